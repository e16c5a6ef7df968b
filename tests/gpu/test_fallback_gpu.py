"""GPU: a family whose Liger helper fails trains on ligerkit's proven map, gradients per parameter passing.

On transformers >= 5.23 Liger 0.8.5's VL helpers fail to import their output classes; on the tested
5.22 the failure is emulated (the helper raises the ImportError a rename gives). Either way the
recipe's config asks for the fallback (``model.liger_kernel.fallback=custom``), and the gradient check
compares the whole model, Liger off in float32 (the truth), off in the training dtype, and on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import ligerkit.kit.core as core
from ligerkit.kit.families import get_family
from ligerkit.proof.recipe_grads import recipe_grad_parity

ROOT = Path(__file__).resolve().parents[2]


def _broken(**flags):
    raise ImportError("cannot import name 'LigerQwen3VLCausalLMOutputWithPast' (emulated)")


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["qwen3_vl", "qwen3"])
def test_a_recipe_on_the_fallback_map_passes_the_gradient_check(recipe, monkeypatch):
    real = get_family
    monkeypatch.setattr(core, "get_family", lambda name: dataclasses.replace(real(name), helper=_broken))
    result = recipe_grad_parity(ROOT / "recipes" / recipe / "configs" / "cpu.yaml",
                                ["model.liger_kernel.fallback=custom"], torch.device("cuda"))
    assert result.passed, result.summary()
    assert result.max_eager > 0
