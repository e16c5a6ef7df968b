"""Every recipe under ``recipes/``, one parametrized test per shared check.

The Liger wiring checks (``ligerkit.proof.asserts``: structure, configs, the requirement's reference
checks, apply-before-build observed, kernels in the built model) run here per check, and again from
each recipe's own ``tests/skills/liger-kernel/asserts.py``. Each recipe's CPU config trains with
Liger off and learns; with Liger on, a CPU run stops before anything is built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import failing_helper, recipe_family
from ligerkit.errors import LigerNeedsAcceleratorError
from ligerkit.proof import asserts
from ligerkit.train import Trainer, load_engine, set_up_model
from ligerkit.train.config.arms import modules_line

RECIPES = sorted(p.parent for p in Path(__file__).resolve().parents[1].glob("recipes/*/configs"))


def test_there_are_six_recipes():
    assert [r.name for r in RECIPES] == ["composite_vlm", "custom_lm", "diffllama", "qwen3", "qwen3_vl",
                                         "vendored_llm"]


@pytest.mark.parametrize("check", asserts.CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_recipe_wiring(recipe, check):
    if check in (asserts.assert_applies_before_build, asserts.assert_kernels_in_model):  # these set the model up
        with failing_helper(recipe_family(recipe)):
            check(recipe)
    else:
        check(recipe)


def train_cpu(root: Path, steps: int = 12, config: str = "cpu.yaml") -> list[float]:
    """Train the recipe's CPU config for ``steps`` steps on the CPU; return the losses."""
    engine = load_engine(root / "configs" / config, ["train.run.progress=false", f"train.steps={steps}"])
    return [s.loss for s in Trainer(engine).train(torch.device("cpu")).steps]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_cpu_config_trains_with_liger_off_and_learns(recipe):
    losses = train_cpu(recipe)
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.9 * first, f"loss did not decrease: first {losses[:3]}, last {losses[-3:]}"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_liger_on_a_cpu_fails_before_building_anything(recipe):
    engine = load_engine(recipe / "configs" / "cpu.yaml", ["model.liger_kernel.enabled=true"])
    built: list[torch.device] = []
    engine.build_model = built.append  # type: ignore[method-assign]  # would record a build
    with pytest.raises(LigerNeedsAcceleratorError, match="model.liger_kernel.enabled=false"):
        set_up_model(engine, torch.device("cpu"))
    assert built == [] and not engine.liger_kit.active


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_each_module_alone_applies_only_its_swaps(recipe):
    """``model.liger_kernel.modules`` naming one key on applies that key's swaps and nothing else, on
    every route a recipe wires (a composite recipe whose encoder map is then empty included)."""
    config = recipe / "configs" / "gpu.yaml"
    engine = load_engine(config, ["model.liger_kernel.enabled=true"])
    with failing_helper(recipe_family(recipe)) as fails:
        try:
            engine.prepare_model(torch.device("meta"))
            keys = sorted(k for k, on in engine.liger_kit.report.modules.items() if on)
        finally:
            engine.liger_kit.revert()
    if fails:
        return
    assert keys
    for key in keys:
        engine = load_engine(config, ["model.liger_kernel.enabled=true", modules_line(keys, {key})])
        try:
            engine.prepare_model(torch.device("meta"))
            assert {s.name for s in engine.liger_kit.report.patched} == {key}
        finally:
            engine.liger_kit.revert()


@pytest.mark.parametrize("name", ["qwen3_vl", "composite_vlm"])
@pytest.mark.parametrize("dtype, accelerator, expected", [
    ("auto", None, torch.float32), ("auto", "cuda", torch.bfloat16), ("auto", "npu", torch.bfloat16),
    ("bfloat16", None, torch.bfloat16), ("float32", "cuda", torch.float32)])
def test_vlm_images_take_the_dtype_the_model_is_built_in(monkeypatch, name, dtype, accelerator, expected):
    import ligerkit.environment

    monkeypatch.setattr(ligerkit.environment, "accelerator", lambda: accelerator)
    root = next(r for r in RECIPES if r.name == name)
    engine = load_engine(root / "configs" / "cpu.yaml", [f"model.dtype={dtype}"])
    batch = engine.make_batch(0, 1, 64)
    assert batch["pixel_values"].dtype == expected
    assert not batch["input_ids"].is_floating_point() and batch["labels"].dtype == torch.long
