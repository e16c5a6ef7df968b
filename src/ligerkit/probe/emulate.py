"""Liger's in-place writes, emulated in pure PyTorch around any module's or function's own math.

``GradIntoGradOutput`` runs a module's forward and, in backward, writes dX into the incoming dY
and hands that tensor back, as Liger's default RMSNorm does. ``RotaryInPlace`` writes a rotary's
results into the q/k it was given and dq/dk into the incoming gradients, as Liger's rotary does
(whenever ``t.transpose(1, 2)`` is contiguous, i.e. its ``.contiguous()`` copy is a no-op). With
``in_place=False`` both compute the same values without the writes: the difference between the two
is exactly what the writes do to the model around them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ligerkit.naming import stands_for


class GradIntoGradOutput(torch.autograd.Function):
    """``fn(x)`` whose backward may write dX into the incoming dY, as Liger's RMSNorm does."""

    @staticmethod
    def forward(ctx, fn, in_place, x, *params):  # noqa: D102
        with torch.enable_grad():
            xd = x.detach().clone().requires_grad_(True)
            out = fn(xd)
        ctx.graph = (out, xd, params, in_place)
        return out.detach().clone()

    @staticmethod
    def backward(ctx, dy):  # noqa: D102
        out, xd, params, in_place = ctx.graph
        wanted = [p for p in params if p.requires_grad]
        grads = list(torch.autograd.grad(out, [xd, *wanted], dy, allow_unused=True))
        dx = grads[0]
        if in_place and dx is not None and dy.is_contiguous() and dy.shape == dx.shape:
            dy.copy_(dx)  # Liger's in-place backward: dX lands in dY's storage
            dx = dy
        by_param = dict(zip(map(id, wanted), grads[1:], strict=True))
        return (None, None, dx, *[by_param.get(id(p)) for p in params])


def aliased(t: torch.Tensor) -> bool:
    """Liger's rotary works on ``t.transpose(1, 2).contiguous()``: in place when that is a no-op."""
    return t.dim() == 4 and t.transpose(1, 2).is_contiguous()


class RotaryInPlace(torch.autograd.Function):
    """``fn(q, k)`` that may write its results into q/k and dq/dk into the incoming gradients."""

    @staticmethod
    def forward(ctx, fn, in_place, q, k):  # noqa: D102
        with torch.enable_grad():
            qd, kd = q.detach().clone().requires_grad_(True), k.detach().clone().requires_grad_(True)
            oq, ok = fn(qd, kd)
        ctx.graph = (oq, ok, qd, kd, in_place)
        if in_place:
            for src, out in ((q, oq), (k, ok)):
                if aliased(src) and src.shape == out.shape:
                    src.data.copy_(out.detach())  # a kernel write: autograd does not see it
        return oq.detach().clone(), ok.detach().clone()

    @staticmethod
    def backward(ctx, gq, gk):  # noqa: D102
        oq, ok, qd, kd, in_place = ctx.graph
        dq, dk = torch.autograd.grad((oq, ok), (qd, kd), (gq, gk), allow_unused=True)
        if in_place:
            if dq is not None and aliased(gq) and gq.shape == dq.shape:
                gq.copy_(dq)
                dq = gq
            if dk is not None and aliased(gk) and gk.shape == dk.shape:
                gk.copy_(dk)
                dk = gk
        return None, None, dq, dk


def emulated_module_forward(module: nn.Module, forward: Callable[..., Any], in_place: bool,
                            x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``module``'s own forward on ``x`` with Liger's norm backward (dX into dY when ``in_place``)."""
    params = tuple(module.parameters())
    return GradIntoGradOutput.apply(lambda t: forward(t, *args, **kwargs), in_place, x, *params)


def emulated_rotary(fn: Callable[..., Any], in_place: bool, *args: Any, **kwargs: Any) -> Any:
    """A rotary function's own math with Liger's writes (into q/k, and dq/dk) when ``in_place``."""
    fn = stands_for(fn)  # a hub-kernel wrapper: the function it calls
    bound = inspect.signature(fn).bind(*args, **kwargs)
    q_name, k_name = list(bound.signature.parameters)[:2]
    q, k = bound.arguments[q_name], bound.arguments[k_name]

    def call(q_: torch.Tensor, k_: torch.Tensor) -> Any:
        return fn(**{**bound.arguments, q_name: q_, k_name: k_})

    return RotaryInPlace.apply(call, in_place, q, k)
