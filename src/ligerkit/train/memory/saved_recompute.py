"""Outputs of Liger's functions that autograd would keep, recomputed in backward from what the
functions keep anyway.

A Liger function keeps some tensors for its own backward (its ``ctx`` is the backward node). When a
later operation saves that function's *output* too (a linear layer keeps its input for the weight
gradient), the output is a second tensor kept per layer. Under :func:`recomputed`, a saved-tensor
hook recognizes such an output through the graph, by the class of the node that made it, and keeps a
note of the node instead; the backward makes the output again from the node's own saved tensors. Which
functions qualify, and how each is made again, is a table (:class:`Recomputable` by node class name):
``glu_recompute.RECOMPUTABLE`` (gated activations) and ``norm_recompute.RECOMPUTABLE`` (RMSNorm, and
a rotary applied in place over two RMSNorm outputs).

With ``verify`` each note is made again at once in the forward and compared with the tensor it stands
for, bit for bit; a difference raises before anything is trained on it. The trainer verifies its first
forward. An output changed in place after it was saved is refused in backward, as autograd refuses it,
while anything still holds it.

This is not activation checkpointing (no matmul, attention or layer runs twice). It cannot see inside a
``torch.compile`` region (the layer's saved tensors are the compiled graph's) nor inside a layer that
activation checkpointing recomputes (its own hooks are the innermost): the config refuses both.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ligerkit.errors import LigerKitError

Outputs = torch.Tensor | tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Recomputable:
    """How one kind of backward node's output is made again.

    ``run(node, shape)`` returns the node's output (or all its outputs, for a node with several) from
    the node's saved tensors, without autograd; ``shape`` is the saved tensor's, for a node whose
    outputs' shapes its saved tensors do not hold. ``applies(node)`` says whether this node can be made
    again at all (a rotary whose inputs are not recomputable cannot). ``key`` names the config key
    that turns it on, for messages."""

    run: Callable[[Any, torch.Size], Outputs]
    key: str
    outputs: int = 1
    applies: Callable[[Any], bool] = lambda node: True


VIEW_NODES = frozenset({
    "ViewBackward0", "ReshapeAliasBackward0", "AsStridedBackward0", "AliasBackward0", "TBackward0",
    "TransposeBackward0", "PermuteBackward0", "SliceBackward0", "SelectBackward0", "ExpandBackward0",
    "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "UnsqueezeBackward0", "UnflattenBackward0",
})
"""Backward nodes of view operations: their output shares its input's storage, so a saved tensor reached
from an output through them only is a window on that output's storage."""


def view_source(tensor: torch.Tensor) -> tuple[Any, int]:
    """The backward node of the operation that made ``tensor``'s storage, followed back through
    :data:`VIEW_NODES` (each with one input), and which of its outputs leads to ``tensor``; ``(None, 0)``
    for a tensor without ``grad_fn``. A view node with several inputs is returned as it is."""
    return node_source(tensor.grad_fn, tensor.output_nr)


def node_source(node: Any, output: int) -> tuple[Any, int]:
    """:func:`view_source` from a graph edge ``(node, output)`` instead of a tensor."""
    while node is not None and type(node).__name__ in VIEW_NODES:
        edges = [edge for edge in node.next_functions if edge[0] is not None]
        if len(edges) != 1:
            break
        node, output = edges[0]
    return node, output


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values bit for bit (NaNs included), shape and dtype alike."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    return torch.equal(a, b)


@dataclass
class _Note:
    """What the saved-tensor hook keeps in place of an output (or a view of it): the node that makes it
    again, and where in that output's storage the saved tensor lies."""

    node: Any
    output: int
    recompute: Recomputable
    storage: tuple[int, torch.dtype]  # the output's storage: bytes, element type
    view: tuple[torch.Size, tuple[int, ...], int]  # the saved tensor: shape, stride, offset in that storage
    original: weakref.ref[torch.Tensor]
    version: int


@dataclass
class SavedRecompute:
    """The hooks of one forward: ``notes`` counts the outputs (or views of them) left to the backward,
    ``by_node`` the same by node class."""

    table: Mapping[str, Recomputable]
    verify: bool = False
    notes: int = 0
    by_node: dict[str, int] = field(default_factory=dict)
    # per (node, output): notes not yet unpacked, and the output made again while some are left, so that
    # the q, k and v projections' three uses of one norm output make it once
    _pending: dict[tuple[int, int], int] = field(default_factory=dict)
    _alive: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    def _producer(self, tensor: torch.Tensor) -> tuple[Any, int] | None:
        """The recomputable node (and output) whose output ``tensor`` is, or is a view of (through
        :data:`VIEW_NODES` only). Followed in the graph, not through ``tensor._base``: Liger's functions
        return a view of the buffer their kernel wrote, whose ``_base`` is that buffer, with no ``grad_fn``."""
        node, output = view_source(tensor)
        entry = self.table.get(type(node).__name__) if node is not None else None
        if entry is None or output >= entry.outputs:
            return None
        if node is not tensor.grad_fn and tensor._base is None:  # reached through views, so must be one
            return None
        if getattr(node, "dtensor_metadata", None) is not None or not entry.applies(node):
            return None
        return node, output

    def pack(self, tensor: torch.Tensor) -> Any:
        """A saved tensor as autograd will keep it: a note for a recomputable output or a view of one
        (a linear layer saves its input flattened to two dimensions), else the tensor itself."""
        found = self._producer(tensor)
        if found is None:
            return tensor
        node, output = found
        name = type(node).__name__
        root = tensor._base if tensor._base is not None else tensor
        note = _Note(node, output, self.table[name], (tensor.untyped_storage().nbytes(), tensor.dtype),
                     (tensor.shape, tensor.stride(), tensor.storage_offset()), weakref.ref(root), tensor._version)
        if self.verify:
            try:
                again = self._make(note, cache=False)
            except Exception as error:  # a layout the recompute does not know: refused before training on it
                raise LigerKitError(f"recomputing the output of {name} failed on the first forward ({error}); set "
                                    f"{note.recompute.key}: false") from error
            if not same_bits(again, tensor):
                raise LigerKitError(
                    f"recomputing the output of {name} did not give the bits the forward made on this machine, "
                    f"so it cannot stand in for them; set {note.recompute.key}: false")
        self.notes += 1
        self.by_node[name] = self.by_node.get(name, 0) + 1
        key = (id(node), output)
        self._pending[key] = self._pending.get(key, 0) + 1
        return note

    def unpack(self, saved: Any) -> torch.Tensor:
        """The saved tensor back: a note's output made again (once per output while it is in use), and
        the saved tensor's window on it."""
        if not isinstance(saved, _Note):
            return saved
        original = saved.original()  # the output itself, while something else still holds it
        if original is not None and original._version != saved.version:
            raise RuntimeError(
                f"an output of {type(saved.node).__name__} kept for the backward was modified in place after it "
                f"was saved, so its gradient would be wrong; set {saved.recompute.key}: false to see autograd's "
                "own error, and remove the in-place operation")
        tensor = self._make(saved, cache=True)
        key = (id(saved.node), saved.output)
        self._pending[key] = left = self._pending.get(key, 1) - 1
        if left <= 0:
            self._alive.pop(key, None)
        return tensor

    def _make(self, note: _Note, cache: bool) -> torch.Tensor:
        """The note's saved tensor, from the node's output made again (or kept from an earlier unpack
        while other notes of it are left). The output's buffer must be laid out as in the forward; one
        of another size or type is refused."""
        key = (id(note.node), note.output)
        buffer = self._alive.get(key) if cache else None
        if buffer is None:
            with torch.no_grad():
                outputs = note.recompute.run(note.node, note.view[0])
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            buffers = [out._base if out._base is not None else out for out in outputs]
            buffer = buffers[note.output]
            if (buffer.untyped_storage().nbytes(), buffer.dtype) != note.storage:
                raise RuntimeError(
                    f"recomputing {type(note.node).__name__}'s output gave a {buffer.untyped_storage().nbytes()}"
                    f"-byte {buffer.dtype} buffer, not the {note.storage[0]}-byte {note.storage[1]} of the "
                    f"forward; set {note.recompute.key}: false")
            if cache:
                for index, made_buffer in enumerate(buffers):
                    if self._pending.get((id(note.node), index), 0) > 0:
                        self._alive[(id(note.node), index)] = made_buffer
        shape, stride, offset = note.view
        return buffer.as_strided(shape, stride, offset)


@contextmanager
def recomputed(table: Mapping[str, Recomputable], verify: bool = False) -> Iterator[SavedRecompute]:
    """Within the block (a forward), the outputs ``table`` names that autograd saves for the backward
    are recomputed there instead of kept (each checked bit for bit in the forward with ``verify``);
    the yielded hooks count them."""
    hooks = SavedRecompute(dict(table), verify)
    with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
        yield hooks
