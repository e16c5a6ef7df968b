"""Qwen3 recipe: trains on the CPU with Liger off; refuses Liger on a CPU before building."""

from pathlib import Path

import pytest
import torch

from ligerkit.engine.engine import LigerNeedsAcceleratorError
from ligerkit.engine.recipe import load_engine
from ligerkit.validate.smoke import assert_loss_decreases, train_cpu

RECIPE = Path(__file__).resolve().parents[1]


def test_cpu_config_trains_with_liger_off_and_learns():
    assert_loss_decreases(train_cpu(RECIPE, steps=12))


def test_liger_on_a_cpu_fails_before_building_anything():
    engine = load_engine(RECIPE / "configs" / "cpu.yaml", ["model.liger_kernel.enabled=true"])
    built = []
    engine.build_model = lambda device: built.append(device)  # would record a build
    with pytest.raises(LigerNeedsAcceleratorError, match="model.liger_kernel.enabled=false"):
        engine.prepare_model(torch.device("cpu"))
    assert built == [] and not engine.kit.active
