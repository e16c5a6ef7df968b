"""SwiGLU and GEGLU products as ``ligerkit::`` operators (see ``ligerkit.compile.ops``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ligerkit.compile.common import LIB

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# ----- SwiGLU: silu(a * gate_multiplier) * b * down_multiplier --------------------------------------
@torch.library.custom_op(f"{LIB}::silu_mul", mutates_args=())
def silu_mul(a: Tensor, b: Tensor, gate_multiplier: float, down_multiplier: float) -> Tensor:
    """``silu(a * gate_multiplier) * b * down_multiplier``; the activation in float32, rounded to
    ``b``'s dtype before the product (reference math; the CUDA kernel is Liger's)."""
    act = torch.nn.functional.silu(a.float() * gate_multiplier).to(b.dtype)
    c = act * b
    return (c * down_multiplier if down_multiplier != 1.0 else c).contiguous()


@silu_mul.register_kernel("cuda")
def _silu_mul_cuda(a: Tensor, b: Tensor, gate_multiplier: float, down_multiplier: float) -> Tensor:
    from liger_kernel.ops.swiglu import swiglu_forward

    _, _, c = swiglu_forward(a.contiguous(), b.contiguous(), gate_multiplier)
    return c * down_multiplier if down_multiplier != 1.0 else c


@silu_mul.register_fake
def _(a: Tensor, b: Tensor, gate_multiplier: float, down_multiplier: float) -> Tensor:
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


@torch.library.custom_op(f"{LIB}::silu_mul_backward", mutates_args=())
def silu_mul_backward(dc: Tensor, a: Tensor, b: Tensor, gate_multiplier: float,
                      down_multiplier: float) -> tuple[Tensor, Tensor]:
    """``(da, db)`` of :func:`silu_mul`."""
    g = dc.float() * down_multiplier
    z = a.float() * gate_multiplier
    sig = torch.sigmoid(z)
    silu = z * sig
    db = g * silu
    da = g * (silu * (1 - sig) + sig) * b.float() * gate_multiplier
    return da.to(a.dtype), db.to(b.dtype)


@silu_mul_backward.register_kernel("cuda")
def _silu_mul_backward_cuda(dc: Tensor, a: Tensor, b: Tensor, gate_multiplier: float,
                            down_multiplier: float) -> tuple[Tensor, Tensor]:
    from liger_kernel.ops.swiglu import swiglu_backward

    g = dc * down_multiplier if down_multiplier != 1.0 else dc
    # Liger's backward writes da and db into its a and b: give it private copies
    da, db = swiglu_backward(a.contiguous().clone(), b.contiguous().clone(), g.contiguous(), gate_multiplier)
    return da, db


@silu_mul_backward.register_fake
def _(dc: Tensor, a: Tensor, b: Tensor, gate_multiplier: float, down_multiplier: float) -> tuple[Tensor, Tensor]:
    return torch.empty(a.shape, dtype=a.dtype, device=a.device), torch.empty(b.shape, dtype=b.dtype, device=b.device)


def _silu_mul_setup(ctx, inputs, output) -> None:
    a, b, gate_multiplier, down_multiplier = inputs
    ctx.save_for_backward(a, b)
    ctx.multipliers = (gate_multiplier, down_multiplier)


def _silu_mul_grad(ctx, dc: Tensor):
    a, b = ctx.saved_tensors
    da, db = silu_mul_backward(dc, a, b, *ctx.multipliers)
    return da, db, None, None


torch.library.register_autograd(f"{LIB}::silu_mul", _silu_mul_grad, setup_context=_silu_mul_setup)


# ----- GEGLU: gelu_tanh(a) * b ----------------------------------------------------------------------
def _gelu_tanh_parts(a32: Tensor) -> tuple[Tensor, Tensor]:
    t = torch.tanh(_SQRT_2_OVER_PI * (a32 + 0.044715 * a32.pow(3)))
    return 0.5 * a32 * (1 + t), t


@torch.library.custom_op(f"{LIB}::gelu_mul", mutates_args=())
def gelu_mul(a: Tensor, b: Tensor) -> Tensor:
    """``gelu_tanh(a) * b``; the activation in float32, rounded to ``b``'s dtype before the product
    (reference math; the CUDA kernel is Liger's)."""
    act, _ = _gelu_tanh_parts(a.float())
    return (act.to(b.dtype) * b).contiguous()


@gelu_mul.register_kernel("cuda")
def _gelu_mul_cuda(a: Tensor, b: Tensor) -> Tensor:
    from liger_kernel.ops.geglu import geglu_forward

    return geglu_forward(a.contiguous(), b.contiguous())[2]


@gelu_mul.register_fake
def _(a: Tensor, b: Tensor) -> Tensor:
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


@torch.library.custom_op(f"{LIB}::gelu_mul_backward", mutates_args=())
def gelu_mul_backward(dc: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``(da, db)`` of :func:`gelu_mul`."""
    a32 = a.float()
    act, t = _gelu_tanh_parts(a32)
    g = dc.float()
    db = g * act.to(dc.dtype).float()
    dact = 0.5 * (1 + t) + 0.5 * a32 * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * a32 * a32)
    da = g * b.float() * dact
    return da.to(a.dtype), db.to(b.dtype)


@gelu_mul_backward.register_kernel("cuda")
def _gelu_mul_backward_cuda(dc: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    from liger_kernel.ops.geglu import geglu_backward

    # Liger's backward writes da and db into its a and b: give it private copies
    da, db = geglu_backward(a.contiguous().clone(), b.contiguous().clone(), dc.contiguous())
    return da, db


@gelu_mul_backward.register_fake
def _(dc: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    return torch.empty(a.shape, dtype=a.dtype, device=a.device), torch.empty(b.shape, dtype=b.dtype, device=b.device)


def _gelu_mul_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _gelu_mul_grad(ctx, dc: Tensor):
    a, b = ctx.saved_tensors
    return gelu_mul_backward(dc, a, b)


torch.library.register_autograd(f"{LIB}::gelu_mul", _gelu_mul_grad, setup_context=_gelu_mul_setup)


