"""The kit's in-place verdicts under LoRA and activation checkpointing: the checks run their whole model
in the form it trains in (``ligerkit.probe.training_form``), say so, keep hazards, and never reuse a
verdict found in another form."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.probe.aliasing import in_place_hazard
from ligerkit.probe.training_form import TrainingForm, checked_in_form, current_form
from ligerkit.train import load_engine, set_up_model
from ligerkit.train.recipe.engine import RecipeEngine
from ligerkit.train.memory.checkpointing import is_recomputed
from ligerkit.train.recipe.setup import kit_checks_in_form, training_form
from toy_models import modeling_layouts as L

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.run.progress=false"]
BOTH = ["train.lora={rank: 4, alpha: 8}", "train.activation_checkpointing=true"]


def _qwen3() -> tuple[type, object]:
    module = importlib.import_module("transformers.models.qwen3.modeling_qwen3")
    return module.Qwen3RMSNorm, module


def test_a_pre_norm_family_stays_safe_with_lora_and_checkpointing_and_the_verdict_says_so(tmp_path):
    engine = load_engine(QWEN3_CPU, [*SETS, *BOTH, f"train.run.output_dir={tmp_path}"])
    form = training_form(engine)
    seen: list[nn.Module] = []
    watched = TrainingForm(form.key, lambda model: (form.adapt(model), seen.append(model)))
    norm, module = _qwen3()
    with checked_in_form(watched):
        result = in_place_hazard(norm, module)
    assert result.checked and not result.hazard, result.reason
    assert "as it trains: LoRA r=4 alpha=8" in result.reason and "activation checkpointing" in result.reason
    (model,) = seen  # the whole model the check ran had the adapters and recomputed layers
    assert any(".lora_A." in name for name, _ in model.named_parameters())
    assert any(is_recomputed(m) for m in model.modules())


def test_a_hazard_stays_a_hazard_under_lora():
    lora_only = load_engine(QWEN3_CPU, [*SETS, "train.lora={rank: 4, alpha: 8}"])
    with checked_in_form(training_form(lora_only)):
        result = in_place_hazard(L.LayoutRMSNorm, L, L.LayoutConfig(layout="post"))
    assert result.checked and result.hazard, result.reason
    assert "as it trains: LoRA" in result.reason


def test_a_form_that_does_not_fit_the_model_leaves_the_verdict_unproven_and_apart_from_the_plain_one():
    def broken(model: nn.Module) -> None:
        raise RuntimeError("this form does not fit")

    norm, module = _qwen3()
    with checked_in_form(TrainingForm("a form that does not fit", broken)):
        under = in_place_hazard(norm, module)
    plain = in_place_hazard(norm, module)
    assert not under.checked and under.verdict == "unproven" and "does not fit" in under.reason
    assert plain.checked and not plain.hazard and "as it trains" not in plain.reason


def test_the_kit_checks_in_the_form_only_when_the_config_asks_and_liger_is_on(tmp_path):
    forms = {}
    for name, sets in (("both, Liger on", [*BOTH, "model.liger_kernel.enabled=true"]),
                       ("both, Liger off", BOTH), ("neither, Liger on", ["model.liger_kernel.enabled=true"])):
        engine = load_engine(QWEN3_CPU, [*SETS, *sets, f"train.run.output_dir={tmp_path}"])
        with kit_checks_in_form(engine):
            forms[name] = current_form()
    assert forms["both, Liger on"].key == "LoRA r=4 alpha=8 dropout=0 on all-linear; activation checkpointing per layer"
    assert forms["both, Liger off"] is None  # the kit applies nothing: no verdict to compute
    assert forms["neither, Liger on"] is None and current_form() is None


def test_the_set_up_with_liger_off_builds_outside_any_form(tmp_path):
    seen: list[object] = []

    class Recording(RecipeEngine):
        def prepare_model(self, device: torch.device) -> nn.Module:
            seen.append(current_form())
            return super().prepare_model(device)

    engine = load_engine(QWEN3_CPU, [*SETS, *BOTH, f"train.run.output_dir={tmp_path}"])
    set_up_model(Recording(engine.config, engine.recipe_dir), torch.device("cpu"))
    assert seen == [None] and training_form(engine) is not None


@pytest.mark.parametrize("sets, words", [(["train.lora={rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}"],
                                          "LoRA r=8 alpha=16 dropout=0 on q_proj,v_proj"),
                                         (["train.activation_checkpointing=true"],
                                          "activation checkpointing per layer")])
def test_the_form_key_changes_with_every_setting_that_changes_the_steps(sets, words, tmp_path):
    engine = load_engine(QWEN3_CPU, [*SETS, *sets, f"train.run.output_dir={tmp_path}"])
    assert training_form(engine).key == words


def test_the_apply_report_says_which_form_its_in_place_checks_ran_in(tmp_path):
    from ligerkit import LigerKernelKit

    engine = load_engine(QWEN3_CPU, [*SETS, *BOTH, f"train.run.output_dir={tmp_path}"])
    kit = LigerKernelKit()
    try:
        with checked_in_form(training_form(engine)):
            report = kit.apply(model_family="qwen3")
        plain = [n for a in report.applications for n in a.notes]
        assert any(n.endswith("as it trains: " + training_form(engine).key) for n in plain)
    finally:
        kit.revert()


def test_a_checked_model_without_the_named_targets_runs_as_built_and_stays_checked():
    def watched(targets: str) -> tuple[TrainingForm, list[nn.Module]]:
        lines = [*SETS, f"train.lora={{rank: 4, alpha: 8, target_modules: {targets}}}"]
        form = training_form(load_engine(QWEN3_CPU, lines))
        seen: list[nn.Module] = []
        return TrainingForm(form.key, lambda model: (form.adapt(model), seen.append(model))), seen

    form, seen = watched("[no_such_proj]")
    with checked_in_form(form):
        result = in_place_hazard(L.LayoutRMSNorm, L, L.LayoutConfig(layout="pre"))
    assert result.checked and not result.hazard, result.reason
    assert not any(".lora_" in name for name, _ in seen[0].named_parameters())  # none of the targets there
    form, seen = watched("[q_proj, no_such_proj]")
    norm, module = _qwen3()
    with checked_in_form(form):
        assert in_place_hazard(norm, module).checked
    assert {n.split(".")[-4] for n, _ in seen[0].named_parameters() if ".lora_A." in n} == {"q_proj"}


def test_a_recipe_hook_written_for_its_own_model_does_not_stop_the_check():
    class OwnUnits(RecipeEngine):
        def fsdp_units(self, model: nn.Module) -> tuple[str, ...]:
            return (type(model.llm.layers[0]).__name__,)  # only the recipe's own model has .llm

    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=true"])
    form = training_form(OwnUnits(engine.config, engine.recipe_dir))
    seen: list[nn.Module] = []
    norm, module = _qwen3()
    with checked_in_form(TrainingForm(form.key + " (own units)", lambda m: (form.adapt(m), seen.append(m)))):
        result = in_place_hazard(norm, module)
    assert result.checked and not result.hazard, result.reason
    assert any(is_recomputed(m) for m in seen[0].modules())  # transformers' _no_split_modules stood in


def test_a_composite_part_that_declares_no_layers_of_its_own_recomputes_the_layers_the_whole_model_does(tmp_path):
    """composite_vlm's vision encoder module (checked for its norm's in-place backward) declares no layer
    classes; the composite model recomputes its VisionEncoderLayer, so the check's model does too."""
    from recipes.composite_vlm.model import modeling_vision as vision

    config = Path(__file__).resolve().parents[1] / "recipes" / "composite_vlm" / "configs" / "cpu.yaml"
    engine = load_engine(config, ["train.activation_checkpointing=true", f"train.run.output_dir={tmp_path}"])
    form = training_form(engine)
    seen: list[nn.Module] = []
    with checked_in_form(TrainingForm(form.key, lambda m: (form.adapt(m), seen.append(m)))):
        result = in_place_hazard(vision.VisionRMSNorm, vision, vision.VisionConfig())
    assert result.checked and not result.hazard, result.reason
    recomputed = {type(m).__name__ for m in seen[0].modules() if is_recomputed(m)}
    assert recomputed == {"VisionEncoderLayer"}


def test_a_check_model_with_none_of_the_built_models_layers_stays_unproven():
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=true"])
    with checked_in_form(training_form(engine)):
        result = in_place_hazard(L.LayoutRMSNorm, L, L.LayoutConfig(layout="pre"))
    assert not result.checked and "has none of the recipe's layer classes" in result.reason
