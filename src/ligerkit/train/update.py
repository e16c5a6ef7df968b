"""The optimizer update of one step: clip, refuse a non-finite step, update, and one read of the step's
loss and gradient norm, the step's only wait for the device.

Where the optimizer can skip its update on the device (PyTorch's fused Adam and AdamW read a
``found_inf`` flag and then leave the weights, their states and their step counts as they were: the
mechanism ``torch.amp.GradScaler`` uses), the clip and the update are queued behind the backward with
that flag set from the loss and the norm, and the read comes last. The host then prepares the update
while the device still runs the backward, instead of the device idling while the host prepares it after
a mid-step read. Otherwise (the multi-tensor AdamW, on the CPU or with ``train.optim.fused_adamw: false``)
the read comes first and a non-finite step never reaches the optimizer. Either way a non-finite loss or
norm raises :class:`NonFiniteError` with the weights not updated, and a finite step's update is the
same to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._foreach_utils import _has_foreach_support

from ligerkit.train.step import gathered, grads_by_device_and_dtype, on_host
from ligerkit.train.stopping import NonFiniteError


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step()`` reads a ``found_inf`` flag on the device (every parameter group
    fused, as PyTorch's fused Adam/AdamW, which set ``_step_supports_amp_scaling``)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and all(
        bool(group.get("fused")) for group in optimizer.param_groups)


def non_finite_flag(loss: torch.Tensor, norm: torch.Tensor | None) -> torch.Tensor:
    """A float32 scalar on the loss's device: 1 when ``loss`` or ``norm`` is not finite, else 0 (no
    wait for the device)."""
    bad = ~torch.isfinite(loss.detach().float().reshape(()))
    if norm is not None:
        bad = bad | ~torch.isfinite(norm.detach().float().reshape(()).to(loss.device))
    return bad.float()


def clip_to(model: nn.Module, max_norm: float | None, norm: torch.Tensor | None) -> None:
    """Scale every gradient by ``max_norm / norm`` when the norm is above ``max_norm`` (nothing for a
    falsy ``max_norm`` or a ``None`` norm), as ``torch.nn.utils.clip_grads_with_norm_`` does, to the bit.

    One multi-tensor multiply per (device, dtype) group. On CUDA the factor is first cast to the
    gradients' dtype: PyTorch's multi-tensor multiply falls back to one kernel per tensor when the
    factor's dtype differs (a few hundred launches for bf16 gradients), and that per-tensor CUDA
    multiply loads the float32 factor as the gradients' dtype before it multiplies, so the result is
    the same (``tests/gpu/test_update_gpu.py`` compares the bits with PyTorch's clip).
    """
    if norm is None or not max_norm:
        return
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for (device, dtype), grads in grads_by_device_and_dtype(model).items():
        scale = factor.to(device=device, dtype=dtype if device.type == "cuda" else factor.dtype)
        if _has_foreach_support(grads, device):
            torch._foreach_mul_(grads, scale)
        else:
            for grad in grads:
                grad.mul_(scale)


def update(model: nn.Module, optimizer: torch.optim.Optimizer, loss_sum: torch.Tensor,
           norm: torch.Tensor | None, *, max_norm: float | None, world_size: int = 1,
           step: int = 0, while_waiting: Callable[[], None] | None = None) -> tuple[float, float]:
    """Clip to ``max_norm`` by ``norm`` (the total gradient norm), update, clear the gradients; return the
    step's loss (``loss_sum`` over ``world_size``) and norm as Python floats, read from the device once.

    ``while_waiting`` is called just before the read, with everything the host can queue queued (the
    trainer stages the next step's batches there); it must not raise or wait for the device.

    Raises :class:`NonFiniteError` (the gradients cleared, the weights and the optimizer's states not
    updated) when the loss or the norm is not finite; ``step`` (0-based) names the step in its message.
    """
    full = gathered(norm) if norm is not None else None  # a sharded norm, gathered once for the flag and the read
    if skips_on_device(optimizer):
        clip_to(model, max_norm, norm)
        optimizer.found_inf = non_finite_flag(loss_sum, full)  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
        optimizer.zero_grad(set_to_none=True)
        if while_waiting is not None:
            while_waiting()
        loss, norm_value = on_host(loss_sum, full)  # after the update is queued
        _check_finite(loss / world_size, norm_value, step, max_norm)
        return loss / world_size, norm_value
    if while_waiting is not None:
        while_waiting()
    loss, norm_value = on_host(loss_sum, full)
    try:
        _check_finite(loss / world_size, norm_value, step, max_norm)
    except NonFiniteError:
        optimizer.zero_grad(set_to_none=True)
        raise
    clip_to(model, max_norm, norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss / world_size, norm_value


def _check_finite(loss: float, norm: float, step: int, max_norm: float | None) -> None:
    if not (math.isfinite(loss) and math.isfinite(norm)):
        raise NonFiniteError(
            f"step {step + 1}: the loss is {loss} and the gradient norm {norm}; the weights were not "
            f"updated. Lower train.optim.lr, set train.optim.grad_clip (it is {max_norm}), raise "
            "train.optim.warmup_steps, or check the data and model.dtype")
