"""The product of Liger's gated activations (SwiGLU, GeGLU), recomputed in backward instead of kept.

Liger's ``LigerSiLUMulFunction`` and ``LigerGELUMulFunction`` keep their two inputs (the gate and up
projections) for their own backward. The MLP's down projection then keeps their product ``c`` for its
weight gradient (or its LoRA adapter's): a third tensor as wide as the two, every layer. With
``train.memory.recompute_glu_product`` the saved-tensor hooks of ``saved_recompute`` keep a note of the
function instead, and the backward runs the function's forward kernel again on the inputs the function
kept anyway. The kernel is elementwise and deterministic, so the product is the same, bit for bit, and
so are the loss and every gradient; the cost is one elementwise kernel per MLP in the backward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ligerkit.errors import LigerKitError
from ligerkit.train.memory.saved_recompute import VIEW_NODES, Recomputable, SavedRecompute, recomputed, view_source

__all__ = ["KEY", "RECOMPUTABLE", "VIEW_NODES", "Recomputable", "check_first_forward", "recomputed_glu_products",
           "view_source"]
KEY = "train.memory.recompute_glu_product"


def _silu_mul(node: Any, shape: torch.Size) -> torch.Tensor:
    from liger_kernel.ops.swiglu import swiglu_forward

    a, b = node.saved_tensors
    _, _, c = swiglu_forward(a, b, getattr(node, "gate_multiplier", 1.0))
    down = getattr(node, "down_multiplier", 1.0)
    return c * down if down != 1.0 else c


def _gelu_mul(node: Any, shape: torch.Size) -> torch.Tensor:
    from liger_kernel.ops.geglu import geglu_forward

    a, b = node.saved_tensors
    return geglu_forward(a, b)[2]


RECOMPUTABLE: dict[str, Recomputable] = {
    "LigerSiLUMulFunctionBackward": Recomputable(_silu_mul, KEY),
    "LigerGELUMulFunctionBackward": Recomputable(_gelu_mul, KEY),
}
"""Backward-node class name -> the function's forward run again from its saved inputs (no autograd)."""


@contextmanager
def recomputed_glu_products(verify: bool = False) -> Iterator[SavedRecompute]:
    """Within the block (a forward), Liger's gated-activation products saved for the backward are
    recomputed there instead of kept (checked bit for bit in the forward with ``verify``); the yielded
    hooks count them."""
    with recomputed(RECOMPUTABLE, verify) as hooks:
        yield hooks


def check_first_forward(hooks: SavedRecompute) -> None:
    """Raise when the option is on and the first forward left no product to recompute (the option
    would do nothing: Liger off, or no SwiGLU/GeGLU swapped in, or their products not kept)."""
    if not any(hooks.by_node.get(name) for name in RECOMPUTABLE):
        raise LigerKitError(
            "train.memory.recompute_glu_product is on, but the first forward kept no product of Liger's SwiGLU or "
            "GeGLU for the backward: the model runs neither (Liger off, model.liger_kernel.modules turns them "
            "off, or the family's MLP is not gated), so nothing would be recomputed. Set "
            "train.memory.recompute_glu_product: false")
