"""Discrete choices a model makes in its forward (a mixture of experts' top-k routing), recorded in one
run and replayed in another, for the gradient proof.

bfloat16 rounding moves a router's scores a little; where two experts' scores are that close, the
bfloat16 run sends a token to another expert than the float32 run does, and every gradient of both
experts and of the router then differs by far more than rounding: measured on an H200 on tiny MoE
models (minimax_m2, qwen2_moe), a swap that rounds differently from eager (Liger's rotary) flipped
other tokens than eager did, and the router's gradient was 0.28 from float32's against eager's 0.015.
That is a discontinuity of the model, not an error of the swap. So each bfloat16 arm is compared with
a float32 run that makes *the arm's own* choices: every ``torch.topk`` of the arm is recorded (its
indices, call by call), and the float32 replay takes those indices, with its own values gathered
at them (gradients flow as through ``topk``). A model that makes no top-k choice, or makes the same
ones as float32, is compared with the one float32 run as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Routes", "Routing", "differing", "recording_routes", "replaying_routes"]

_TOPK = torch.topk
_TENSOR_TOPK = torch.Tensor.topk


@dataclass
class Routes:
    """The indices of every ``torch.topk`` a run made, in call order (on the CPU)."""

    calls: list[torch.Tensor] = field(default_factory=list)

    @property
    def choices(self) -> int:
        """How many top-k choices (index entries) the run made."""
        return sum(t.numel() for t in self.calls)


@dataclass(frozen=True)
class Routing:
    """The top-k choices (expert routing) of a model that makes them: how many the float32 run made, and
    how many of each bfloat16 arm's differ from those (``None``: the arm took another path, compared
    with the float32 run unpinned). Each arm is compared with float32 making its own choices."""

    choices: int
    eager_flips: int | None
    patched_flips: int | None

    def describe(self) -> str:
        """``routing pinned: eager 2, patched 5 of 256 top-k choices differ from float32's``."""
        def words(n: int | None) -> str:
            return "another path (not pinned)" if n is None else str(n)

        return (f"routing pinned: eager {words(self.eager_flips)}, patched {words(self.patched_flips)} of "
                f"{self.choices} top-k choices differ from float32's")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"choices": self.choices, "eager_flips": self.eager_flips, "patched_flips": self.patched_flips}


def differing(a: Routes, b: Routes) -> int | None:
    """How many top-k choices differ between two runs (as sets per row), ``None`` when the runs made
    different calls (another number or shape of them)."""
    if len(a.calls) != len(b.calls) or any(x.shape != y.shape for x, y in zip(a.calls, b.calls)):
        return None
    found = 0
    for x, y in zip(a.calls, b.calls):
        if x.dim() == 0:
            found += int(x != y)
            continue
        xs, ys = x.sort(dim=-1).values, y.sort(dim=-1).values
        found += int((xs != ys).sum())
    return found


def _parse(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, int, int, bool, bool]:
    names = ("input", "k", "dim", "largest", "sorted")
    given = dict(zip(names, args)) | kwargs
    return given["input"], int(given["k"]), int(given.get("dim", -1)), bool(given.get("largest", True)), \
        bool(given.get("sorted", True))


@contextmanager
def _topk_as(fn: Any) -> Iterator[None]:
    torch.topk, torch.Tensor.topk = fn, fn  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.topk, torch.Tensor.topk = _TOPK, _TENSOR_TOPK  # type: ignore[assignment]


@contextmanager
def recording_routes() -> Iterator[Routes]:
    """In the block, every ``torch.topk`` (function or method) is recorded into the yielded routes."""
    routes = Routes()

    def topk(*args: Any, **kwargs: Any) -> Any:
        out = _TOPK(*args, **kwargs)
        routes.calls.append(out.indices.detach().cpu())
        return out

    with _topk_as(topk):
        yield routes


@contextmanager
def replaying_routes(routes: Routes) -> Iterator[list[int]]:
    """In the block, the ``i``-th ``torch.topk`` returns ``routes``' ``i``-th indices, with the input's
    values gathered at them. Yields a one-item list: how many calls were replayed; a call beyond the
    recorded ones, or of another shape, raises ``ValueError`` (the runs do not take the same path)."""
    done = [0]

    def topk(*args: Any, **kwargs: Any) -> Any:
        tensor, k, dim, _, _ = _parse(args, kwargs)
        i = done[0]
        if i >= len(routes.calls):
            raise ValueError(f"top-k call {i + 1} was not recorded (the runs take different paths)")
        indices = routes.calls[i].to(tensor.device)
        expected = list(tensor.shape)
        if expected:
            expected[dim] = k
        if list(indices.shape) != expected:
            raise ValueError(f"top-k call {i + 1} has another shape than the recorded one")
        done[0] += 1
        return torch.return_types.topk((tensor.gather(dim, indices) if tensor.dim() else tensor, indices))

    with _topk_as(topk):
        yield done
