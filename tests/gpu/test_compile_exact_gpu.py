"""GPU: on every recipe, compiling over Liger's swaps (compile mode) changes no weight, adds no graph
break, and keeps step-1 gradients within 2x the plain compile arm's error against float32.

The same measurement as ``benchmarks/compile_drift_gpu.py`` (two forward+backward passes per arm, the
micro-batches of one step, one sample each), with every kernel through the compile-mode operators
(``LIGERKIT_INDUCTOR_TABLE=none``: none left to Inductor).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ligerkit.proof.arm_grads import Arm, recipe_arm_grads

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.parent.name for p in ROOT.glob("recipes/*/configs"))
OFF, ON, COMPILE = "model.liger_kernel.enabled=false", "model.liger_kernel.enabled=true", "train.compile=ops"


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_mode_is_exact_on_every_recipe(recipe, monkeypatch):
    monkeypatch.setenv("LIGERKIT_INDUCTOR_TABLE", "none")
    arms = {"compile": Arm((OFF, COMPILE), compiled=True), "liger": Arm((ON,)),
            "liger_compile": Arm((ON, COMPILE), compiled=True)}
    result = recipe_arm_grads(ROOT / "recipes" / recipe / "configs" / "gpu.yaml", ["train.micro_batch_size=1"], arms,
                              torch.device("cuda"), calls=2)
    compiled, ours = result["compile"], result["liger_compile"]
    assert ours.swaps > 0
    assert ours.changed == []  # nothing written into a weight across the two passes
    assert ours.graph_breaks <= compiled.graph_breaks
    for name, error in ours.errors.items():
        assert error <= 2 * compiled.errors[name] + 0.01, (name, error, compiled.errors[name])
