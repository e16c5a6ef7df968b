"""CPU smoke checks shared by the recipes' tests: a few steps with Liger off must learn."""

from __future__ import annotations

from pathlib import Path

import torch

from ligerkit.engine.recipe import load_engine


def train_cpu(root: Path, steps: int = 12, config: str = "cpu.yaml") -> list[float]:
    """Train the recipe's CPU config for ``steps`` steps on the CPU; return the losses."""
    engine = load_engine(root / "configs" / config, ["train.progress=false", f"train.steps={steps}"])
    result = engine.train(torch.device("cpu"))
    return [s.loss for s in result.steps]


def assert_loss_decreases(losses: list[float], window: int = 3) -> None:
    """The mean of the last ``window`` losses is clearly below the mean of the first ``window``."""
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    assert last < 0.9 * first, f"loss did not decrease: first {losses[:window]}, last {losses[-window:]}"


def assert_liger_refused_on_cpu(root: Path, config: str = "cpu.yaml") -> None:
    """With Liger turned on, a CPU run stops with the way out before building anything."""
    import pytest

    from ligerkit.engine.engine import LigerNeedsAcceleratorError

    engine = load_engine(root / "configs" / config, ["model.liger_kernel.enabled=true"])
    built: list[torch.device] = []
    engine.build_model = built.append  # type: ignore[method-assign]  # would record a build
    with pytest.raises(LigerNeedsAcceleratorError, match="model.liger_kernel.enabled=false"):
        engine.prepare_model(torch.device("cpu"))
    assert built == [] and not engine.kit.active
