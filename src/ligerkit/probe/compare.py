"""What every probe shares: the verdict, and how two computations are compared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

MATCH, MISMATCH, UNPROBED = "match", "mismatch", "unprobed"


@dataclass(frozen=True)
class ProbeResult:
    """The verdict of one (source symbol, replacement) pair, with the reasons."""

    source: str
    replacement: str
    verdict: str
    reasons: tuple[str, ...] = ()
    errors: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The replacement computes what the source computes."""
        return self.verdict == MATCH


class Unprobeable(Exception):
    """The probe cannot build or call the source symbol."""


def first_output(out: Any) -> torch.Tensor:
    """A module's output tensor (the first element when it returns a tuple)."""
    return out[0] if isinstance(out, tuple) else out


def close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float]:
    """Whether two results agree: allclose in float32; in bfloat16, at most 1% of elements off (a
    different casting order flips many). Returns the verdict and the largest absolute difference."""
    a, b = a.float(), b.float()
    if not a.numel():  # an empty call (no token took this branch): nothing can differ
        return a.shape == b.shape, 0.0
    diff = (a - b).abs()
    worst = float(diff.max())
    if dtype == torch.float32:
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5)), worst
    # bfloat16: the same math rounds the same way; a different casting order flips many elements
    off = float((diff > 1e-6 + 1e-6 * b.abs()).float().mean())
    return off <= 0.01, worst


def module_outputs(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                    grad: torch.Tensor) -> list[torch.Tensor]:
    """``fn(x)``, then the gradients of ``x`` and of every parameter of ``module`` for the upstream ``grad``."""
    x = x.clone().requires_grad_(True)
    out = first_output(fn(x))
    params = [p for _, p in sorted(module.named_parameters())]
    grads = torch.autograd.grad(out, [x, *params], grad.to(out.dtype), allow_unused=True)
    return [out.detach(), *[g if g is not None else torch.zeros_like(p) for g, p in zip(grads, [x, *params],
                                                                                     strict=True)]]


def out_shape(module: nn.Module, x: torch.Tensor) -> torch.Size:
    """The shape of ``module``\'s output for ``x``."""
    with torch.no_grad():
        out = module(x)
    return first_output(out).shape


def structure_differences(source: nn.Module, candidate: nn.Module) -> list[str]:
    """Parameter names and shapes that differ (the state dict would not load both ways)."""
    reasons = []
    src = {k: tuple(v.shape) for k, v in source.state_dict().items()}
    cand = {k: tuple(v.shape) for k, v in candidate.state_dict().items()}
    if extra := sorted(cand.keys() - src.keys()):
        reasons.append(f"the replacement adds parameters {extra}")
    if missing := sorted(src.keys() - cand.keys()):
        reasons.append(f"the replacement drops parameters {missing}")
    for key in sorted(src.keys() & cand.keys()):
        if src[key] != cand[key]:
            reasons.append(f"{key} has shape {src[key]} in the source, {cand[key]} in the replacement")
    return reasons


def randomize_alike(source: nn.Module, candidate: nn.Module) -> None:
    """Give both modules the same non-trivial values (``w`` ones and zeros differ from these)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in source.state_dict().items():
            value = torch.randn(param.shape, generator=g) * 0.5 + 0.3
            param.copy_(value)
            candidate.state_dict()[name].copy_(value)
