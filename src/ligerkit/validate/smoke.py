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
