"""Exact revert for every family in Liger's registry, and the post-build scan."""

from __future__ import annotations

import importlib

import pytest
import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm

from helpers import failing_helper
from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.errors import LateApplyError, RevertError
from ligerkit.kit.families import all_families
from ligerkit.kit.snapshot import PROCESS_WIDE_MODULES, Snapshot, owners_of
from toy_models import modeling_encoder as enc

ENC = "toy_models.modeling_encoder"


def test_apply_and_revert_restores_identity_for_every_family():
    kit = LigerKernelKit()
    for name, family in all_families().items():
        modules = [importlib.import_module(m) for m in family.modeling_modules]
        modules += [importlib.import_module(m) for m in PROCESS_WIDE_MODULES]
        owners = owners_of(modules)
        before = {(id(o), k): v for o in owners for k, v in vars(o).items()}
        with failing_helper(name) as fails:  # a helper that fails on this stack: its apply leaves every binding
            report = kit.apply(model_family=name, excluded_modules=())
        if not fails:
            assert kit.active == bool(report.patched)
            kit.revert()
        after = {(id(o), k): v for o in owners for k, v in vars(o).items()}
        assert before.keys() == after.keys(), name
        assert all(before[key] is after[key] for key in before), f"{name}: revert is not exact"


def test_revert_is_newest_first_across_layers(kit):
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    original = enc.EncoderMLP
    kit.apply(custom_patches={"a": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    kit.apply(custom_patches={"b": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)})
    kit.revert()
    assert enc.EncoderMLP is original and not kit.active


def test_revert_refuses_to_clobber_someone_elses_patch(kit):
    original = enc.EncoderRMSNorm
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    enc.EncoderRMSNorm = int  # other code patched on top
    try:
        with pytest.raises(RevertError, match="changed by other code"):
            kit.revert()
        assert enc.EncoderRMSNorm is int
    finally:
        enc.EncoderRMSNorm = original


def test_scan_counts_replacements_in_the_built_model(kit):
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    model = enc.VisionEncoder(enc.EncoderConfig(layers=3))
    scan = kit.scan(model)
    assert scan.counts == {"liger_kernel.transformers.rms_norm.LigerRMSNorm": 4}
    assert scan.unused == () and scan.leftovers == {}


def test_late_apply_is_caught_with_module_paths(kit):
    model = enc.VisionEncoder(enc.EncoderConfig(layers=2))  # built before apply
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    with pytest.raises(LateApplyError, match=r"layers\.0\.norm.*apply ran after the model was built"):
        kit.scan(model)
    scan = kit.scan(model, strict=False)
    assert scan.leftovers == {f"{ENC}.EncoderRMSNorm": ("layers.0.norm", "layers.1.norm", "final_norm")}


def test_late_official_apply_is_caught(kit):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                             vocab_size=64))
    kit.apply(model_family="qwen3")
    with pytest.raises(LateApplyError, match="model.layers.0.input_layernorm"):
        kit.scan(model)


def test_unused_class_swap_is_reported(kit):
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    kit.apply(custom_patches={"swiglu": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)})
    scan = kit.scan(torch.nn.Linear(2, 2))
    assert scan.unused == (f"{ENC}.EncoderMLP -> liger_kernel.transformers.swiglu.LigerSwiGLUMLP",)


def test_stale_binding_is_listed(kit):
    import toy_models.stale_user  # holds EncoderRMSNorm by name since import time  # noqa: F401

    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    scan = kit.scan(enc.VisionEncoder(enc.EncoderConfig()))
    assert [(b.module, b.attr) for b in scan.stale] == [("toy_models.stale_user", "EncoderRMSNorm")]


def test_snapshot_ignores_unrelated_dunder_noise():
    snap = Snapshot([enc])
    enc.__warningregistry__ = {}
    try:
        assert snap.changes() == []
    finally:
        del enc.__warningregistry__
