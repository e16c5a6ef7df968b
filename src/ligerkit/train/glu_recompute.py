"""The product of Liger's gated activations (SwiGLU, GeGLU), recomputed in backward instead of kept.

Liger's ``LigerSiLUMulFunction`` and ``LigerGELUMulFunction`` keep their two inputs (the gate and up
projections) for their own backward. The MLP's down projection then keeps their product ``c`` for its
weight gradient (or its LoRA adapter's): a third tensor as wide as the two, every layer. Under
:func:`recomputed_glu_products`, when autograd saves a tensor that one of these functions produced, a
saved-tensor hook keeps a note of the function instead, and the backward runs the function's
forward kernel again on the inputs the function kept anyway. The kernel is elementwise and
deterministic, so the product is the same, bit for bit, and so are the loss and every gradient; the
cost is one elementwise kernel per MLP in the backward.

A product changed in place after it was saved is refused in backward, as autograd refuses it, while
anything still holds it; once it is gone, the backward gets the product as the function made it.

This is not activation checkpointing (no matmul, attention or layer runs twice). It cannot see inside a
``torch.compile`` region (the layer's saved tensors are the compiled graph's) nor inside a layer that
activation checkpointing recomputes (its own hooks are the innermost): the config refuses both.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ligerkit.errors import LigerKitError


def _silu_mul(node: Any) -> torch.Tensor:
    from liger_kernel.ops.swiglu import swiglu_forward

    a, b = node.saved_tensors
    _, _, c = swiglu_forward(a, b, getattr(node, "gate_multiplier", 1.0))
    down = getattr(node, "down_multiplier", 1.0)
    return c * down if down != 1.0 else c


def _gelu_mul(node: Any) -> torch.Tensor:
    from liger_kernel.ops.geglu import geglu_forward

    a, b = node.saved_tensors
    return geglu_forward(a, b)[2]


RECOMPUTABLE: dict[str, Callable[[Any], torch.Tensor]] = {
    "LigerSiLUMulFunctionBackward": _silu_mul,
    "LigerGELUMulFunctionBackward": _gelu_mul,
}
"""Backward-node class name -> the function's forward run again from its saved inputs (no autograd)."""


VIEW_NODES = frozenset({
    "ViewBackward0", "ReshapeAliasBackward0", "AsStridedBackward0", "AliasBackward0", "TBackward0",
    "TransposeBackward0", "PermuteBackward0", "SliceBackward0", "SelectBackward0", "ExpandBackward0",
    "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "UnsqueezeBackward0", "UnflattenBackward0",
})
"""Backward nodes of view operations: their output shares its input's storage, so a saved tensor reached
from a product through them only is a window on the product's storage."""


def view_source(tensor: torch.Tensor) -> tuple[Any, int]:
    """The backward node of the operation that made ``tensor``'s storage, followed back through
    :data:`VIEW_NODES` (each with one input), and which of its outputs leads to ``tensor``; ``(None, 0)``
    for a tensor without ``grad_fn``. A view node with several inputs is returned as it is."""
    node, output = tensor.grad_fn, tensor.output_nr
    while node is not None and type(node).__name__ in VIEW_NODES:
        edges = [edge for edge in node.next_functions if edge[0] is not None]
        if len(edges) != 1:
            break
        node, output = edges[0]
    return node, output


def _producer(tensor: torch.Tensor) -> Any:
    """The recomputable node whose product ``tensor`` is, or is a view of (through :data:`VIEW_NODES` only);
    else ``None``. Followed in the graph, not through ``tensor._base``: Liger's functions return a view
    of the buffer their kernel wrote, so a product's ``_base`` is that buffer, which has no ``grad_fn``."""
    node, output = view_source(tensor)
    if node is None or type(node).__name__ not in RECOMPUTABLE or output != 0:
        return None
    if node is not tensor.grad_fn and tensor._base is None:  # reached through views, so must be one
        return None
    return node


@dataclass
class _Note:
    """What the saved-tensor hook keeps in place of a product (or a view of it): how to make it again,
    and where in the product's storage the saved tensor lies."""

    node: Any
    recompute: Callable[[Any], torch.Tensor]
    storage: tuple[int, torch.dtype]  # the product's storage: bytes, element type
    view: tuple[torch.Size, tuple[int, ...], int]  # the saved tensor: shape, stride, offset in that storage
    original: weakref.ref[torch.Tensor]
    version: int


@dataclass
class GluRecompute:
    """The hooks of one forward: ``notes`` counts the products (or views of them) left to the backward."""

    notes: int = 0
    _made: dict[int, weakref.ref[torch.Tensor]] = field(default_factory=dict)

    def pack(self, tensor: torch.Tensor) -> Any:
        """A saved tensor as autograd will keep it: a note for a recomputable product or a view of one
        (a linear layer saves its input flattened to two dimensions), else the tensor itself."""
        node = _producer(tensor)
        if node is None or getattr(node, "dtensor_metadata", None) is not None:
            return tensor
        self.notes += 1
        root = tensor._base if tensor._base is not None else tensor
        return _Note(node, RECOMPUTABLE[type(node).__name__], (tensor.untyped_storage().nbytes(), tensor.dtype),
                     (tensor.shape, tensor.stride(), tensor.storage_offset()), weakref.ref(root), tensor._version)

    def unpack(self, saved: Any) -> torch.Tensor:
        """The saved tensor back: a note's product made again (once per product while it is in use), and
        the saved tensor's window on it. The product's kernel writes a fresh buffer laid out as in the
        forward; one of another size or type is refused."""
        if not isinstance(saved, _Note):
            return saved
        original = saved.original()  # the product itself, while something else still holds it
        if original is not None and original._version != saved.version:
            raise RuntimeError(
                "a Liger gated-activation product kept for the backward was modified in place after it was "
                "saved, so its gradient would be wrong; set train.recompute_glu_product: false to see "
                "autograd's own error, and remove the in-place operation")
        made = self._made.get(id(saved.node))
        buffer = made() if made is not None else None
        if buffer is None:
            with torch.no_grad():
                product = saved.recompute(saved.node)
            buffer = product._base if product._base is not None else product
            if (buffer.untyped_storage().nbytes(), buffer.dtype) != saved.storage:
                raise RuntimeError(
                    f"recomputing {type(saved.node).__name__}'s product gave a {buffer.untyped_storage().nbytes()}"
                    f"-byte {buffer.dtype} buffer, not the {saved.storage[0]}-byte {saved.storage[1]} of the "
                    "forward; set train.recompute_glu_product: false")
            self._made[id(saved.node)] = weakref.ref(buffer)
        shape, stride, offset = saved.view
        return buffer.as_strided(shape, stride, offset)


@contextmanager
def recomputed_glu_products() -> Iterator[GluRecompute]:
    """Within the block (a forward), Liger's gated-activation products saved for the backward are
    recomputed there instead of kept; the yielded counter says how many were."""
    hooks = GluRecompute()
    with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
        yield hooks


def check_first_forward(hooks: GluRecompute) -> None:
    """Raise when the option is on and the first forward left no product to recompute (the option
    would do nothing: Liger off, or no SwiGLU/GeGLU swapped in, or their products not kept)."""
    if hooks.notes == 0:
        raise LigerKitError(
            "train.recompute_glu_product is on, but the first forward kept no product of Liger's SwiGLU or "
            "GeGLU for the backward: the model runs neither (Liger off, model.liger_kernel.modules turns them "
            "off, or the family's MLP is not gated), so nothing would be recomputed. Set "
            "train.recompute_glu_product: false")
