"""No PASS without the whole model: in-place verdicts, gradient coverage, and the official route's probes.

A norm that is safe in every block of a model can be shared in the decoder layer around it; a check
that could not build the whole model must say *unproven*; a gradient verdict names the model and
the share of its parameters it compared, and less than all of them is PARTIAL, never PASS.
"""

from __future__ import annotations

import json

import pytest
import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from torch import nn
from typer.testing import CliRunner

from ligerkit import LigerPatch
from ligerkit.errors import InPlaceBackwardError, InvalidOptionError
from ligerkit.probe.aliasing import BACKWARD, FORWARD_AND_BACKWARD, in_place_hazard
from ligerkit.proof.grads import FAIL, PARTIAL, PARTIAL_EXIT, PASS, GradParity, exit_code, grad_parity
from ligerkit.suggest import suggest
from toy_models import modeling_moe_post_norm as M
from toy_models import modeling_no_top as N

MOE = "toy_models.modeling_moe_post_norm"
NO_TOP = "toy_models.modeling_no_top"


# --- the in-place check sees the whole model ---------------------------------------------------

def test_a_norm_shared_only_in_the_decoder_layer_is_caught_in_the_whole_model():
    result = in_place_hazard(M.MoePostNormRMSNorm, M, M.MoePostNormConfig(), BACKWARD)
    assert result.checked and result.hazard, result.reason
    assert result.model == "MoePostNormForCausalLM" and "whole model" in result.reason
    assert any(name.startswith("layers.") for name in result.affected)


def test_suggest_gives_that_norm_its_out_of_place_twin_and_says_where_it_checked():
    result = suggest(MOE)
    norm = next(c for c in result.candidates if c.symbol == "MoePostNormRMSNorm")
    assert norm.verdict == "match" and norm.replacement == "LigerRMSNormForOlmo2", norm.reason
    assert norm.in_place["verdict"] == "hazard" and norm.in_place["model"] == "MoePostNormForCausalLM"
    assert norm.in_place["whole_model"] is True
    assert json.dumps(result.to_dict())  # the in-place record is JSON-ready


def test_a_module_whose_top_model_does_not_build_is_unproven_never_safe():
    for source, writes in ((N.NoTopRMSNorm, BACKWARD), (N.apply_rotary_pos_emb, FORWARD_AND_BACKWARD)):
        result = in_place_hazard(source, N, N.NoTopConfig(), writes)
        assert not result.checked and not result.safe and result.verdict == "unproven", result.reason
        assert result.model is None and "NoTopForCausalLM" in result.reason


def test_suggest_takes_the_twin_for_an_unproven_norm_and_leaves_an_unproven_rotary_off():
    result = suggest(NO_TOP)
    by_symbol = {c.symbol: c for c in result.candidates}
    norm, rope = by_symbol["NoTopRMSNorm"], by_symbol["apply_rotary_pos_emb"]
    assert norm.replacement == "LigerRMSNormForOlmo2" and "unproven" in norm.reason, norm.reason
    assert norm.in_place["verdict"] == "unproven" and norm.in_place["whole_model"] is False
    assert rope.verdict == "leave_off" and rope.replacement is None, rope.reason
    assert "unproven" in rope.reason and "--gpu" in rope.reason and "--config" in rope.reason
    assert "liger_rotary_pos_emb" not in result.patches_code()


# --- the custom route refuses what it could not check ------------------------------------------

def test_custom_route_refuses_an_unproven_in_place_norm_naming_the_twin(kit):
    with pytest.raises(InPlaceBackwardError, match="LigerRMSNormForOlmo2") as err:
        kit.apply(custom_patches={"rms_norm": LigerPatch(NO_TOP, "NoTopRMSNorm", LigerRMSNorm)},
                  config=N.NoTopConfig())
    assert "unproven" in str(err.value) and "in_place_proven" in str(err.value)
    assert N.NoTopRMSNorm is not LigerRMSNorm and not kit.active


def test_custom_route_refuses_an_unproven_in_place_rotary_saying_leave_it_off(kit):
    with pytest.raises(InPlaceBackwardError, match="leave this module off"):
        kit.apply(custom_patches={"rope": LigerPatch(NO_TOP, "apply_rotary_pos_emb", liger_rotary_pos_emb)},
                  config=N.NoTopConfig())
    assert N.apply_rotary_pos_emb is not liger_rotary_pos_emb and not kit.active


def test_in_place_proven_is_an_explicit_opt_in_reported_as_unproven(kit):
    report = kit.apply(custom_patches={"rope": LigerPatch(NO_TOP, "apply_rotary_pos_emb", liger_rotary_pos_emb)},
                       config=N.NoTopConfig(), in_place_proven=["rope"])
    assert N.apply_rotary_pos_emb is liger_rotary_pos_emb
    assert len(report.unproven) == 1 and "in_place_proven" in report.unproven[0]
    assert report.to_dict()["unproven"] == list(report.unproven)
    assert "UNPROVEN" in str(report)
    kit.revert()
    assert N.apply_rotary_pos_emb is not liger_rotary_pos_emb


def test_in_place_proven_is_refused_on_the_official_route_and_must_be_a_list(kit):
    with pytest.raises(InvalidOptionError, match="in_place_proven"):
        kit.apply(model_family="qwen3", in_place_proven=["rope"])
    with pytest.raises(InvalidOptionError, match="in_place_proven"):
        kit.apply(custom_patches={"rope": LigerPatch(NO_TOP, "apply_rotary_pos_emb", liger_rotary_pos_emb)},
                  in_place_proven="rope")
    assert not kit.active


# --- every gradient verdict carries its coverage -----------------------------------------------

class _TwoHeads(nn.Module):
    """A model one of whose parameters the loss may leave without a gradient."""

    def __init__(self, use_second: bool):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second, self.use_second = nn.Linear(8, 8), nn.Linear(8, 8), use_second

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.first(x) + (self.second(x) if self.use_second else 0)


def _parity(use_second: bool) -> GradParity:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    from contextlib import nullcontext
    return grad_parity(lambda: _TwoHeads(use_second), lambda m: m(x.to(next(m.parameters()).dtype)).float().sum(),
                       nullcontext)


def test_a_verdict_that_compared_every_parameter_passes_and_names_its_coverage():
    result = _parity(use_second=True)
    assert result.verdict == PASS and result.passed
    cov = result.coverage
    assert (cov.model, cov.compared, cov.total, cov.share) == ("_TwoHeads", 4, 4, 1.0)
    assert "in _TwoHeads: 4 of 4 tensors (100.0% of the parameters)" in result.summary()
    assert result.to_dict()["verdict"] == PASS and result.to_dict()["coverage"]["total"] == 4


def test_a_parameter_without_a_gradient_makes_the_verdict_partial_never_pass():
    result = _parity(use_second=False)
    assert result.verdict == PARTIAL and not result.passed
    assert result.coverage.not_compared == ("second.weight", "second.bias")
    assert result.coverage.share == pytest.approx(0.5)
    assert result.summary().startswith("gradients PARTIAL (in _TwoHeads: 2 of 4 tensors (50.0%")
    assert "no gradient: second.weight" in result.summary()


def test_exit_codes_are_distinct_per_verdict():
    assert (exit_code(PASS), exit_code(FAIL), exit_code(PARTIAL)) == (0, 1, PARTIAL_EXIT)
    assert PARTIAL_EXIT not in (0, 1, 2, 3)


def test_suggest_gpu_exits_with_the_partial_code_and_says_partial(monkeypatch):
    from ligerkit import suggest as suggest_module
    from ligerkit.cli import app, kit_commands

    real = suggest_module.suggest
    monkeypatch.setattr(kit_commands, "_no_gpu", lambda: None)
    monkeypatch.setattr(suggest_module, "suggest", lambda *a, **k: real(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(kit_commands, "_suggest_gradients", lambda result: _parity(use_second=False))
    runner = CliRunner()
    text = runner.invoke(app, ["suggest", "toy_models.modeling_layouts", "--config",
                               "toy_models.modeling_layouts:LayoutConfig", "--gpu"])
    assert text.exit_code == PARTIAL_EXIT, text.output
    assert "gradients PARTIAL (in _TwoHeads: 2 of 4 tensors" in text.output
    as_json = runner.invoke(app, ["suggest", "toy_models.modeling_layouts", "--config",
                                  "toy_models.modeling_layouts:LayoutConfig", "--gpu", "--json"])
    assert as_json.exit_code == PARTIAL_EXIT
    grads = json.loads(as_json.stdout)["gradients"]
    assert grads["verdict"] == PARTIAL and grads["coverage"]["not_compared"] == ["second.weight", "second.bias"]


def test_smoke_is_partial_when_its_gradient_pass_is():
    from ligerkit.proof.smoke import SmokeResult

    arm = {"losses": [1.0, 0.9], "grad_norms": [1.0, 1.0]}
    partial = SmokeResult("c.yaml", "bfloat16", 1e-2, 0.1, arm, arm, _parity(use_second=False))
    assert partial.verdict == PARTIAL and not partial.passed and partial.to_dict()["verdict"] == PARTIAL
    whole = SmokeResult("c.yaml", "bfloat16", 1e-2, 0.1, arm, arm, _parity(use_second=True))
    assert whole.verdict == PASS and whole.passed


# --- the official route is probed like the others ----------------------------------------------

def test_the_official_route_reports_olmo2s_casting_difference(kit):
    report = kit.apply(model_family="olmo2")
    differs = [d for d in report.differences if "Olmo2RMSNorm" in d]
    assert len(differs) == 1 and "LigerRMSNormForOlmo2" in differs[0], report.differences
    assert "bfloat16 forward differs (max abs diff" in differs[0]
    assert report.to_dict()["differences"] == list(report.differences)
    assert "DIFFERS: rms_norm" in str(report)
    assert any("Olmo2MLP" in p and "same math" in p for p in report.applications[0].probed)


def test_the_official_route_probes_liger_norm_subclasses_and_reports_what_it_cannot(kit):
    report = kit.apply(model_family="gemma3", modules={"rms_norm": True, "geglu": True})
    probed = " ".join(report.applications[0].probed + report.differences + report.unproven)
    assert "LigerRMSNormForGemma3" in probed and "Gemma3RMSNorm" in probed
    assert not any("LigerRMSNormForGemma3" in u and "no reference" in u for u in report.unproven)


def test_plan_shows_the_official_difference_where_a_user_looks():
    from ligerkit.cli import app

    result = CliRunner().invoke(app, ["plan", "--family", "olmo2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["report"]
    assert any("Olmo2RMSNorm" in d for d in report["differences"])


def test_bench_does_not_pass_an_arm_whose_gradient_pass_left_parameters_unseen():
    from ligerkit.proof.arm_grads import ArmGrads
    from ligerkit.proof.recommend import check_gradients

    errors = {"w": 0.01}
    grads = {"eager": ArmGrads("eager", 1.0, dict(errors), not_compared=["vision.w"]),
             "liger": ArmGrads("liger", 1.0, dict(errors), not_compared=["vision.w"])}
    checks = check_gradients(grads)
    assert not checks["liger"].passed and checks["liger"].reason.startswith("PARTIAL: 1 trainable")
    whole = check_gradients({"eager": ArmGrads("eager", 1.0, dict(errors)), "liger": ArmGrads("liger", 1.0, dict(errors))})
    assert whole["liger"].passed


def test_suggest_gpu_without_a_whole_model_is_partial_with_nothing_compared(monkeypatch):
    from ligerkit import suggest as suggest_module
    from ligerkit.cli import app, kit_commands
    from ligerkit.probe.runnable import Unrunnable

    def unbuildable(result):
        raise Unrunnable("LayoutForCausalLM could not be built and run (tried: small widths: does not build)")

    real = suggest_module.suggest
    monkeypatch.setattr(kit_commands, "_no_gpu", lambda: None)
    monkeypatch.setattr(suggest_module, "suggest", lambda *a, **k: real(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(kit_commands, "_suggest_gradients", unbuildable)
    args = ["suggest", "toy_models.modeling_layouts", "--config", "toy_models.modeling_layouts:LayoutConfig", "--gpu"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == PARTIAL_EXIT and "gradients PARTIAL (nothing compared" in text.output
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert as_json.exit_code == PARTIAL_EXIT
    assert json.loads(as_json.stdout)["gradients"]["verdict"] == PARTIAL


def test_suggest_gpu_names_the_key_that_fails_alone_after_a_fail(monkeypatch):
    from ligerkit import suggest as suggest_module
    from ligerkit.cli import app, kit_commands
    from ligerkit.proof import grads as grads_module
    from ligerkit.proof.grads import TensorError

    def verdict(ok: bool) -> GradParity:
        tensor = TensorError("w", 0.01, 0.01 if ok else 0.5, 0.03)
        return GradParity([tensor], {}, coverage=grads_module.Coverage("ToyForCausalLM", 1, 1, 4, 4))

    real = suggest_module.suggest
    monkeypatch.setattr(kit_commands, "_no_gpu", lambda: None)
    monkeypatch.setattr(suggest_module, "suggest", lambda *a, **k: real(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(kit_commands, "_suggest_gradients", lambda result: verdict(False))
    monkeypatch.setattr(kit_commands, "_ablation", lambda result: {"rms_norm": verdict(True), "rope": verdict(False)})
    args = ["suggest", "toy_models.modeling_layouts", "--config", "toy_models.modeling_layouts:LayoutConfig", "--gpu"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 1
    assert "rope alone: gradients FAIL" in text.output and "rms_norm alone: gradients PASS" in text.output
    assert "leave rope off" in text.output
    as_json = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert as_json["gradients"]["alone"]["rope"]["verdict"] == FAIL


def test_a_replacement_the_model_cannot_construct_is_named_with_the_constructor_error():
    from liger_kernel.transformers.layer_norm import LigerLayerNorm
    from transformers import Qwen3Config, SamConfig
    from transformers.models.qwen3 import modeling_qwen3
    from transformers.models.sam import modeling_sam

    from ligerkit.suggest.construction import construction_problem

    problem = construction_problem(modeling_sam, "SamLayerNorm", LigerLayerNorm, SamConfig())
    assert problem is not None and "data_format" in problem
    assert modeling_sam.SamLayerNorm is not LigerLayerNorm  # the check leaves nothing swapped
    small = Qwen3Config(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, num_hidden_layers=2, vocab_size=256)
    assert construction_problem(modeling_qwen3, "Qwen3RMSNorm", LigerRMSNorm, small) is None
