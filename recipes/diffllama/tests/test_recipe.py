"""DiffLlama recipe: trains on the CPU with Liger off; refuses Liger on a CPU before building."""

from pathlib import Path

from ligerkit.validate.smoke import assert_liger_refused_on_cpu, assert_loss_decreases, train_cpu

RECIPE = Path(__file__).resolve().parents[1]


def test_cpu_config_trains_with_liger_off_and_learns():
    assert_loss_decreases(train_cpu(RECIPE, steps=12))


def test_liger_on_a_cpu_fails_before_building_anything():
    assert_liger_refused_on_cpu(RECIPE)
