"""Custom and composite routes: maps, lists of patches, no-ops, one aggregated report."""

from __future__ import annotations

import json

import pytest
import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

from ligerkit import LigerPatch
from toy_models import modeling_encoder as enc

ENC = "toy_models.modeling_encoder"


def test_custom_map_swaps_symbols_and_reports_them(kit):
    original = enc.EncoderRMSNorm
    report = kit.apply(model_family="myvlm", custom_patches={
        "rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
        "swiglu": [LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)],
    })
    assert enc.EncoderRMSNorm is LigerRMSNorm and enc.EncoderMLP is LigerSwiGLUMLP
    assert report.route == "custom" and report.family == "myvlm" and report.helper is None
    assert [(s.module, s.attr, s.original, s.name) for s in report.patched] == [
        (ENC, "EncoderRMSNorm", f"{ENC}.EncoderRMSNorm", "rms_norm"),
        (ENC, "EncoderMLP", f"{ENC}.EncoderMLP", "swiglu"),
    ]
    kit.revert()
    assert enc.EncoderRMSNorm is original


def test_any_name_is_allowed_and_a_key_may_hold_several_patches(kit):
    report = kit.apply(custom_patches={
        "my_encoder_kernels": [LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
                               LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)],
    })
    assert [s.name for s in report.patched] == ["my_encoder_kernels", "my_encoder_kernels"]


def test_class_attribute_patch_is_measured_and_reverted(kit):
    def forward(self, x):
        return x

    had_own = "forward" in vars(enc.EncoderLayer)
    original = enc.EncoderLayer.forward
    report = kit.apply(custom_patches={"fwd": LigerPatch(ENC, "EncoderLayer.forward", forward)}, probe=False)
    assert [(s.module, s.attr) for s in report.patched] == [(ENC, "EncoderLayer.forward")]
    kit.revert()
    assert enc.EncoderLayer.forward is original and ("forward" in vars(enc.EncoderLayer)) == had_own


def test_same_replacement_again_is_a_noop(kit):
    patch = LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)
    kit.apply(custom_patches={"rms_norm": patch})
    again = kit.apply(custom_patches={"rms_norm": patch})
    assert again.patched == () and again.applications[0].noop == ("rms_norm",)
    assert len(kit.report.patched) == 1


def test_composite_official_llm_plus_custom_encoder_in_one_report(kit):
    from transformers import Qwen3Config
    from transformers.models.qwen3 import modeling_qwen3

    kit.apply(model_family="qwen3", modules="auto")
    kit.apply(model_family="myvlm", custom_patches={
        "rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
        "swiglu": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP),
    })
    report = kit.report
    assert report.route == "composite"
    assert report.routes == ("official", "custom")
    assert report.families == ("qwen3", "myvlm")
    assert len(report.patched) == 5
    json.dumps(report.to_dict())

    with torch.device("meta"):
        llm = modeling_qwen3.Qwen3ForCausalLM(Qwen3Config(hidden_size=32, intermediate_size=64,
                                                          num_hidden_layers=2, num_attention_heads=4,
                                                          num_key_value_heads=2, head_dim=8, vocab_size=64))
        vision = enc.VisionEncoder(enc.EncoderConfig())
    model = torch.nn.ModuleDict({"llm": llm, "vision": vision})
    scan = kit.scan(model)
    assert scan.counts["liger_kernel.transformers.rms_norm.LigerRMSNorm"] == 5 + 4 + 3
    assert scan.counts["liger_kernel.transformers.swiglu.LigerSwiGLUMLP"] == 2 + 2


def test_applied_context_manager_scopes_the_patch(kit):
    original = enc.EncoderRMSNorm
    with kit.applied(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)}) as report:
        assert enc.EncoderRMSNorm is LigerRMSNorm
        assert len(report.patched) == 1
    assert enc.EncoderRMSNorm is original
    assert kit.report.applications == ()


def test_function_patch_with_the_probe_turned_off_is_reported_unprobed(kit):
    report = kit.apply(custom_patches={"rope": LigerPatch(ENC, "encoder_activation", liger_rotary_pos_emb)},
                       skip_probe=("rope",))
    assert enc.encoder_activation is liger_rotary_pos_emb
    assert report.patched[0].replacement == "liger_kernel.transformers.rope.liger_rotary_pos_emb"
    assert report.unprobed == (f"rope: {ENC}.encoder_activation -> liger_kernel.transformers.rope.liger_rotary_pos_emb"
                               " (probe and in-place check turned off by the caller)",)


@pytest.mark.parametrize("bad_replacement", [object()])
def test_replacement_must_be_callable(bad_replacement):
    from ligerkit.errors import InvalidPatchError

    with pytest.raises(InvalidPatchError):
        LigerPatch(ENC, "EncoderRMSNorm", bad_replacement)


def test_liger_s_tiled_mlps_are_proven_like_every_swap_and_refused_on_the_wrong_activation(kit):
    """The long-sequence MLPs are never suggested (the catalog's non-primary entries) but a map may name
    them: probed on the whole model's calls like any swap, refused where the activation differs."""
    from liger_kernel.transformers.tiled_mlp import LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP
    from transformers.models.qwen3 import modeling_qwen3 as qwen3

    from ligerkit.errors import ProbeMismatchError

    name, original = qwen3.__name__, qwen3.Qwen3MLP
    with pytest.raises(ProbeMismatchError, match="requires GELU activation, got silu"):
        kit.apply(model_family="qwen3_tiled", custom_patches={"swiglu": LigerPatch(name, "Qwen3MLP", LigerTiledGEGLUMLP)})
    assert qwen3.Qwen3MLP is original
    report = kit.apply(model_family="qwen3_tiled",
                       custom_patches={"swiglu": LigerPatch(name, "Qwen3MLP", LigerTiledSwiGLUMLP)})
    assert qwen3.Qwen3MLP is LigerTiledSwiGLUMLP
    (probed,) = report.applications[0].probed
    assert "LigerTiledSwiGLUMLP: match on every call the whole model makes" in probed, probed
