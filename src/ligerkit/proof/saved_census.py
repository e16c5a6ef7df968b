"""What one forward keeps for the backward, by the kind of module that keeps it and by the operation
that made it.

The context sweep says how long a sequence each arm fits; this says where the kept memory goes at that
length, so a goal not reached can be read (the attention's saved tensors, the MLP's, the logits, the
inputs checkpointing keeps?). :class:`SavedCensus` counts the tensors autograd saves during a forward
through a saved-tensor hook placed on top of the hooks already active when it is entered, which it
passes every tensor on to, so recompute keys, offload and checkpointing behave exactly as in training:

- a saved tensor is counted once per storage (views, and a tensor saved twice, share one), by its
  storage's bytes, under the kind of the innermost running module that has one (:func:`module_kind`),
  and under the operation that made it (followed back through views); parameters and buffers are the
  weights, not what the forward keeps, and are left out;
- a tensor the hook below replaced by something else (a recompute key's note) is counted as
  *replaced*, not kept;
- inside a layer that activation checkpointing recomputes, checkpointing's own hooks are the innermost
  and keep nothing: what such a layer keeps is its input, counted under :data:`CHECKPOINTED` (with
  offload the inputs go through offload's hooks, on top of these: not counted here, whether they went
  to host memory or stayed on the device past the budget; :class:`~ligerkit.train.memory.offload.HostOffload`
  counts both).

A custom autograd function can also keep tensors as attributes of its context (a fused loss that
computes its input's gradient in the forward keeps it so until the backward); no hook sees those.
:meth:`SavedCensus.count_contexts`, given the forward's output, walks its graph and counts each such
tensor not counted already under :data:`ON_CONTEXTS`, its producer named by the function and attribute.

What it cannot see: the inside of a compiled region (its saved tensors count under the module that
runs it) and memory held outside the graph and its hooks (the allocator's figure beside it shows that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import nn

from ligerkit.train.memory.checkpointing import is_recomputed
from ligerkit.train.memory.saved_recompute import view_source

CHECKPOINTED = "checkpointed layer inputs"
OUTSIDE = "loss and the top model"
IN_LAYERS = "in layers (other)"
ON_CONTEXTS = "on autograd functions' contexts"
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("embedding", ("embedding",)),
    ("norm", ("norm",)),
    ("attention", ("attention", "attn")),
    ("MLP", ("mlp", "feedforward", "ffn", "expert", "moe")),
    ("rotary", ("rotary", "rope")),
)
"""Kinds of module by a word in the class name (lower case); the first that matches wins."""


def module_kind(module: nn.Module, name: str, head: nn.Module | None = None) -> str | None:
    """The kind a tensor saved inside ``module`` (at path ``name``) counts under when ``module`` is the
    innermost running module with one: LoRA adapters (``lora_*`` in the path), the output head, a kind of
    :data:`KINDS`; ``None`` for a module that says nothing (a plain linear layer counts under the
    module around it)."""
    if any(part.startswith("lora_") for part in name.split(".")):  # PEFT calls lora_A["default"], not lora_A
        return "LoRA adapters"
    if head is not None and module is head:
        return "output head"
    cls = type(module).__name__.lower()
    return next((kind for kind, words in KINDS if any(w in cls for w in words)), None)


@dataclass
class Group:
    """Distinct storages saved, and their bytes."""

    tensors: int = 0
    bytes: int = 0

    def add(self, size: int) -> None:
        """Count one storage of ``size`` bytes."""
        self.tensors += 1
        self.bytes += size


@dataclass
class SavedCensus:
    """Count what ``model``'s forward saves for backward (see the module's text).

    ``with SavedCensus(model) as census: loss = ...`` (entered inside any other saved-tensor hooks the
    forward runs under); then :attr:`by_kind`, :attr:`by_producer` (kind or operation to
    :class:`Group`) and :attr:`replaced`. Leaving the block removes every hook, whatever happened; the
    graph keeps working after it (backward unpacks through the hooks that were below)."""

    model: nn.Module
    by_kind: dict[str, Group] = field(default_factory=dict)
    by_producer: dict[str, Group] = field(default_factory=dict)
    replaced: int = 0
    _stack: list[nn.Module] = field(default_factory=list, repr=False)
    _kinds: dict[int, str | None] = field(default_factory=dict, repr=False)
    _seen: set[int] = field(default_factory=set, repr=False)
    _weights: set[int] = field(default_factory=set, repr=False)
    _below: Any = field(default=None, repr=False)
    _handles: list[Any] = field(default_factory=list, repr=False)
    _hooks: Any = field(default=None, repr=False)

    def __enter__(self) -> SavedCensus:
        if self._hooks is not None:
            raise RuntimeError("a SavedCensus counts one block; make a new one")
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        try:
            for name, module in self.model.named_modules():
                self._kinds[id(module)] = CHECKPOINTED if is_recomputed(module) else module_kind(module, name, head)
                self._handles.append(module.register_forward_pre_hook(self._entered))
                self._handles.append(module.register_forward_hook(self._left, always_call=True))
            self._weights = {_storage(t) for t in [*self.model.parameters(), *self.model.buffers()]}
            self._below = torch._C._autograd._top_saved_tensors_default_hooks(False)
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._hooks.__enter__()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._hooks.__exit__(kind, exc, tb)
        finally:
            self._remove()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()

    def _entered(self, module: nn.Module, args: Any) -> None:
        self._stack.append(module)

    def _left(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._stack and self._stack[-1] is module:
            self._stack.pop()

    def kind_now(self) -> str:
        """The kind a tensor saved now counts under: the innermost running module's that has one; a
        checkpointed layer's only when it is the innermost (what it saves itself is its input)."""
        if self._stack and self._kinds.get(id(self._stack[-1])) == CHECKPOINTED:
            return CHECKPOINTED
        for module in reversed(self._stack):
            kind = self._kinds.get(id(module))
            if kind not in (None, CHECKPOINTED):
                return kind
        return IN_LAYERS if len(self._stack) > 1 else OUTSIDE

    def _pack(self, tensor: torch.Tensor) -> Any:
        packed = self._below[0](tensor) if self._below is not None else tensor
        if not isinstance(packed, torch.Tensor):  # the hook below keeps something else in its place
            self.replaced += 1
            return packed
        size = self._new(packed)
        if size is not None:
            self._add(self.kind_now(), _producer(packed), size)
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        return self._below[1](packed) if self._below is not None else packed

    def count_contexts(self, output: torch.Tensor) -> None:
        """Count the tensors custom autograd functions in ``output``'s graph keep as attributes of their
        contexts (directly, or in a list or tuple there), each storage once and none already counted or a
        weight, under :data:`ON_CONTEXTS`; call it after the block, before the backward frees them."""
        nodes: dict[int, Any] = {}  # held while walking: a wrapper let go could give its id to another
        stack = [output.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or id(node) in nodes:
                continue
            nodes[id(node)] = node
            stack.extend(after for after, _ in node.next_functions)
            for attr, value in (getattr(node, "__dict__", None) or {}).items():  # C++ nodes have none
                for tensor in value if isinstance(value, (list, tuple)) else (value,):
                    size = self._new(tensor) if isinstance(tensor, torch.Tensor) else None
                    if size is not None:
                        self._add(ON_CONTEXTS, f"{type(node).__name__} context .{attr} {_shape(tensor)}", size)

    def _new(self, tensor: torch.Tensor) -> int | None:
        """The bytes of ``tensor``'s storage the first time it is seen (now marked seen); ``None`` for one
        seen before or a weight's."""
        key = _storage(tensor)
        if key in self._seen or key in self._weights:
            return None
        self._seen.add(key)  # kept with the graph: no address reused
        return _nbytes(tensor)

    def _add(self, kind: str, producer: str, size: int) -> None:
        self.by_kind.setdefault(kind, Group()).add(size)
        self.by_producer.setdefault(producer, Group()).add(size)

    @property
    def kept_bytes(self) -> int:
        """Every kept storage's bytes, once."""
        return sum(group.bytes for group in self.by_kind.values())

    def table(self, by: str = "kind") -> dict[str, dict[str, float]]:
        """``by`` ``"kind"`` or ``"producer"``: each group's bytes, GiB and storages, largest first (JSON)."""
        groups = self.by_kind if by == "kind" else self.by_producer
        return {name: {"bytes": g.bytes, "gib": round(g.bytes / 2**30, 4), "tensors": g.tensors}
                for name, g in sorted(groups.items(), key=lambda kv: -kv[1].bytes)}


def _storage(tensor: torch.Tensor) -> int:
    """An identity for ``tensor``'s storage, shared by its views (also on the meta device); the tensor's own
    for one without a plain storage (a tensor subclass)."""
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return id(tensor)


def _nbytes(tensor: torch.Tensor) -> int:
    """The bytes ``tensor``'s storage holds (its own elements' for one without a plain storage)."""
    try:
        return tensor.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return tensor.numel() * tensor.element_size()


def _producer(tensor: torch.Tensor) -> str:
    """The operation that made ``tensor``'s storage (followed back through views), its dtype and width."""
    node, _ = view_source(tensor)
    name = type(node).__name__ if node is not None else "no grad_fn (made under no_grad or in a function)"
    return f"{name} {_shape(tensor)}"


def _shape(tensor: torch.Tensor) -> str:
    """``tensor``'s dtype and width (its last dimension), as the producers are named."""
    return f"{tensor.dtype} width {tensor.shape[-1] if tensor.dim() else 1}"


__all__ = ["CHECKPOINTED", "Group", "IN_LAYERS", "KINDS", "ON_CONTEXTS", "OUTSIDE", "SavedCensus", "module_kind"]
