"""The inputs activation checkpointing keeps, held in host memory from forward to backward.

With ``train.activation_checkpointing: offload`` each checkpointed layer keeps only its input for the
backward (as with ``true``), and that input lives in pinned host memory in between: the device holds
one layer's activations at a time plus what the model keeps outside its layers, so the longest
sequence that fits grows with the layer count.

Checkpointing saves a layer's inputs through the saved-tensor hooks around the call
(``torch.utils.checkpoint`` keeps them as saved tensors; what the layer saves inside is recomputed and
goes through checkpointing's own hooks), so :class:`HostOffload`'s hooks see exactly those inputs:

- pack: the copy to a pinned host buffer is queued on a side stream after the compute stream's work
  so far; the device tensor is marked as used by that stream, so its memory is reused only once the
  copy is done, and the forward goes on at once.
- unpack (in backward, when checkpointing recomputes the layer): the input comes back from the host,
  and the copy of the layer before it (the next one backward needs) is started on the side stream,
  so that transfer overlaps this layer's recompute and backward.

The values are copied bit for bit and the unpacked tensor takes the saved one's place in the graph, so
loss and gradients are those of ``true``. A ``budget`` caps the bytes held in host memory at once: an
input that would pass it stays on the device, as with ``true`` (the first layers' inputs go to the host,
which backward needs last; the later ones stay), so device and host memory together hold the inputs.
PyTorch's host allocator pins each block rounded up to a power of two, so a large input is held in up to
three pieces (:func:`host_pieces`) and the budget counts their blocks (:func:`pinned_size`): it bounds
what the process really pins. On a CPU the same hooks copy within host memory (what the CPU tests run);
the trainer refuses the key there, where it saves nothing.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ligerkit.errors import LigerKitError

__all__ = ["HostOffload", "Offloaded", "host_pieces", "pinned_size"]


SPLIT_FROM = 64 * 2**20
"""A saved input of at least this many bytes (and contiguous) is held in up to three pinned pieces."""


def host_pieces(nbytes: int) -> list[int]:
    """The byte sizes of the pieces a host copy of ``nbytes`` is held in: one below :data:`SPLIT_FROM`,
    else the two largest powers of two that fit and the rest. PyTorch's caching host allocator rounds each
    block it pins up to a power of two (and keeps freed blocks for reuse): one block for a 2.5 GiB input
    would pin 4 GiB, the pieces pin 2.5; the rounding then wastes at most a seventh."""
    if nbytes < SPLIT_FROM:
        return [nbytes] if nbytes > 0 else []
    pieces, left = [], nbytes
    while left and len(pieces) < 2:
        pieces.append(1 << (left.bit_length() - 1))
        left -= pieces[-1]
    return pieces + ([left] if left else [])


def pinned_size(nbytes: int) -> int:
    """The pinned host memory a host copy of ``nbytes`` takes: its pieces (:func:`host_pieces`), each in a
    block rounded up to a power of two, as the allocator makes them; what a budget counts."""
    return sum(_rounded(piece) for piece in host_pieces(nbytes))


def _rounded(nbytes: int) -> int:
    """``nbytes`` rounded up to a power of two: the block the host allocator pins for it."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 0 else 0


@dataclass(eq=False)
class Offloaded:
    """One saved input in host memory: where it came from, its host copy (one tensor with its strides, or
    the pieces of a large contiguous one, flat, with ``shape`` set), and (on CUDA) the event that marks the
    end of a copy in flight; ``before`` is the input saved just before it in the same forward (the one
    backward needs next; a weak reference, so nothing outlives the graph that saved it), ``back`` the
    device tensor once a fetch is under way."""

    device: torch.device
    host: list[torch.Tensor]
    ready: Any = None
    shape: torch.Size | None = None
    before: weakref.ref[Offloaded] | None = None  # weak: the graph alone keeps a saved input (and its host copy)
    back: torch.Tensor | None = None
    fetched: bool = False


@dataclass(eq=False)
class HostOffload:
    """Saved-tensor hooks that keep checkpointed layers' inputs in host memory (see the module's text).

    ``with torch.autograd.graph.saved_tensors_hooks(h.pack, h.unpack):`` around a checkpointed call;
    :attr:`packed` and :attr:`bytes_offloaded` count what went to the host, :attr:`kept` and
    :attr:`bytes_kept` what stayed on the device because ``budget`` (bytes held in host memory at once;
    ``None``: no limit) was reached (for tests and logs)."""

    budget: int | None = None
    packed: int = 0
    bytes_offloaded: int = 0
    kept: int = 0
    bytes_kept: int = 0
    held: int = 0  # pinned bytes now (blocks as allocated): the host copies of saved inputs whose graph is alive
    _last: weakref.ref[Offloaded] | None = field(default=None, repr=False)
    _boundary: tuple[weakref.ref[torch.Tensor], weakref.ref[Offloaded]] | None = field(default=None, repr=False)
    _stream: Any = field(default=None, repr=False)

    def _side_stream(self, device: torch.device) -> Any:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=device)
        return self._stream

    def pack(self, tensor: torch.Tensor) -> Offloaded | torch.Tensor:
        """Queue ``tensor``'s copy to host memory and return its handle; past the budget, ``tensor`` itself
        (kept on the device)."""
        size = tensor.numel() * tensor.element_size()
        if size == 0:  # nothing to move (torch < 2.13's checkpoint saves an empty marker with each input)
            return tensor
        cuda = tensor.device.type == "cuda"
        pieces = host_pieces(size)
        split = len(pieces) > 1 and tensor.is_contiguous()  # flat pieces, each a whole power of two but the last
        block = sum(_rounded(p) for p in (pieces if split else [size])) if cuda else size  # what the copy pins
        if self.budget is not None and self.held + block > self.budget:
            self.kept += 1
            self.bytes_kept += size
            last = self._last() if self._last is not None else None
            if last is not None and not last.fetched and (self._boundary is None or self._boundary[1]() is not last):
                self._boundary = (weakref.ref(tensor), weakref.ref(last))  # the first input kept after the host's
            return tensor
        if split:
            counts = [piece // tensor.element_size() for piece in pieces]
            host = [torch.empty(n, dtype=tensor.dtype, pin_memory=cuda) for n in counts]
            sources, shape = list(tensor.view(-1).split(counts)), tensor.shape
        else:  # its strides: the same kernels run after
            host, sources, shape = [torch.empty_like(tensor, device="cpu", pin_memory=cuda)], [tensor], None
        ready = None
        if cuda:
            stream = self._side_stream(tensor.device)
            stream.wait_stream(torch.cuda.current_stream(tensor.device))
            with torch.cuda.stream(stream):
                for piece, source in zip(host, sources, strict=True):
                    piece.copy_(source, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(stream)
            tensor.record_stream(stream)  # its memory is reused only after the copy
        else:
            for piece, source in zip(host, sources, strict=True):
                piece.copy_(source)
        last = self._last() if self._last is not None else None
        before = weakref.ref(last) if last is not None and not last.fetched else None  # else a new forward
        handle = Offloaded(tensor.device, host, ready, shape, before=before)
        self._last = weakref.ref(handle)
        self.packed += 1
        self.bytes_offloaded += size
        self.held += block
        weakref.finalize(handle, self._release, block).atexit = False  # its graph gone, the host copy with it
        return handle

    def _release(self, size: int) -> None:
        self.held -= size

    def _fetch(self, handle: Offloaded) -> None:
        """Start bringing ``handle`` back to its device (on the side stream on CUDA)."""
        handle.fetched = True
        if handle.device.type != "cuda":  # a tensor of its own, as a device copy would be
            handle.back = _joined(handle, non_blocking=False)
            return
        stream = self._side_stream(handle.device)
        with torch.cuda.stream(stream):
            if handle.ready is not None:
                stream.wait_event(handle.ready)
            handle.back = _joined(handle, non_blocking=True)
            handle.ready = torch.cuda.Event()
            handle.ready.record(stream)

    def unpack(self, handle: Offloaded | torch.Tensor) -> torch.Tensor:
        """The saved input, on its device again; the input saved before it starts coming back."""
        if isinstance(handle, torch.Tensor):  # kept on the device, past the budget
            if self._boundary is not None and self._boundary[0]() is handle:
                last = self._boundary[1]()  # the last input in host memory: backward needs it next
                if last is not None and not last.fetched:
                    self._fetch(last)
            return handle
        if handle.back is None:  # not prefetched (or unpacked once already: a second backward)
            self._fetch(handle)
        back, handle.back = handle.back, None
        if handle.device.type == "cuda":
            current = torch.cuda.current_stream(handle.device)
            current.wait_event(handle.ready)
            back.record_stream(current)
        before = handle.before() if handle.before is not None else None
        if before is not None and not before.fetched:
            self._fetch(before)  # overlaps this layer's recompute and backward
        return back

    def first_step(self) -> str:
        """What went to host memory in the first step, in words; a :class:`LigerKitError` when nothing did
        (the layers were not given their hidden states as a tensor, so the key would change nothing)."""
        if not self.packed and self.kept:
            raise LigerKitError(
                f"train.activation_checkpointing: offload moved nothing to host memory in the first step: the budget, "
                f"{self.budget / 2**30:.3g} GiB (train.memory.offload_budget_gib), holds none of the layers' inputs "
                f"({self.bytes_kept / self.kept / 2**30:.3g} GiB each). Raise the budget, or set "
                "train.activation_checkpointing: true (checkpointing alone).")
        if not self.packed:
            raise LigerKitError(
                "train.activation_checkpointing: offload moved nothing to host memory in the first step: the "
                "recomputed layers were called without their hidden states as a tensor argument. Set "
                "train.activation_checkpointing: true (checkpointing alone).")
        kept = (f"; {self.kept} more, {self.bytes_kept / 2**30:.3f} GiB, kept on the device (the budget, "
                f"{self.budget / 2**30:.3g} GiB, was reached)" if self.kept and self.budget is not None else "")
        return (f"{self.packed} checkpointed layer input(s), {self.bytes_offloaded / 2**30:.3f} GiB, kept in host "
                f"memory in the first step{kept}")


def _joined(handle: Offloaded, non_blocking: bool) -> torch.Tensor:
    """``handle``'s input on its device again, a tensor of its own (on a CPU too)."""
    if handle.shape is None:
        one = handle.host[0]
        return one.clone() if handle.device.type == "cpu" else one.to(handle.device, non_blocking=non_blocking)
    back = torch.empty(handle.shape, dtype=handle.host[0].dtype, device=handle.device)
    for target, piece in zip(back.view(-1).split([p.numel() for p in handle.host]), handle.host, strict=True):
        target.copy_(piece, non_blocking=non_blocking)
    return back
