"""Vendored Llama recipe: trains on the CPU with Liger off; refuses Liger on a CPU before building."""

from pathlib import Path

import torch

from ligerkit.engine.recipe import load_engine
from ligerkit.validate.smoke import assert_liger_refused_on_cpu, assert_loss_decreases, train_cpu

RECIPE = Path(__file__).resolve().parents[1]


def test_cpu_config_trains_with_liger_off_and_learns():
    assert_loss_decreases(train_cpu(RECIPE, steps=12))


def test_liger_on_a_cpu_fails_before_building_anything():
    assert_liger_refused_on_cpu(RECIPE)


def test_the_official_llama_route_cannot_reach_the_vendored_copy():
    from ligerkit import LigerKernelKit
    from ligerkit.engine.config import load_recipe_config

    engine = load_engine(RECIPE / "configs" / "cpu.yaml")
    kit = LigerKernelKit()
    try:
        kit.apply(model_family="llama")
        model = engine.build_model(torch.device("meta"))
        scan = kit.verify(model)
    finally:
        kit.revert()
    assert scan.counts and not any(scan.counts.values()), "the official llama swaps must not show up"
    assert len(scan.unused) == 2  # LlamaRMSNorm and LlamaMLP of transformers, never instantiated here
    assert load_recipe_config(RECIPE / "configs" / "gpu.yaml").model.source == "custom"
