"""RMSNorm and LayerNorm as ``ligerkit::`` operators (see ``ligerkit.compile.ops``)."""

from __future__ import annotations

import torch
from torch import Tensor

from ligerkit.compile.common import LIB, checked_casting, empty_dw, row_count


# ----- RMSNorm ------------------------------------------------------------------------------------
@torch.library.custom_op(f"{LIB}::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor | None, eps: float, offset: float, casting_mode: str,
             row_mode: bool | None) -> tuple[Tensor, Tensor]:
    """``y = x / rms(x) * (offset + weight)`` over the last dimension, and ``1 / rms`` per row.

    Reference math (the CUDA kernel is Liger's): ``llama`` normalizes in float32 and scales in the
    input dtype, ``gemma`` computes everything in float32, ``none`` stays in the input dtype.
    """
    mode = checked_casting(casting_mode)
    dtype = x.dtype
    xf = x.float() if mode != "none" else x
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    normed = xf * rstd
    if weight is None:
        y = normed.to(dtype)
    elif mode == "llama":
        y = normed.to(dtype) * (offset + weight)
    elif mode == "gemma":
        y = normed * (offset + weight.float())
    else:
        y = normed * (offset + weight)
    return y.to(dtype).contiguous(), rstd.reshape(-1).contiguous()


@rms_norm.register_kernel("cuda")
def _rms_norm_cuda(x: Tensor, weight: Tensor | None, eps: float, offset: float, casting_mode: str,
                   row_mode: bool | None) -> tuple[Tensor, Tensor]:
    from liger_kernel.ops.rms_norm import rms_norm_forward

    y, _, rstd, _, _, _ = rms_norm_forward(x.contiguous(), weight, eps, offset, checked_casting(casting_mode), row_mode)
    return y, rstd


@rms_norm.register_fake
def _(x: Tensor, weight: Tensor | None, eps: float, offset: float, casting_mode: str,
      row_mode: bool | None) -> tuple[Tensor, Tensor]:
    rstd_dtype = x.dtype if checked_casting(casting_mode) == "none" else torch.float32
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), x.new_empty((row_count(x),), dtype=rstd_dtype)


@torch.library.custom_op(f"{LIB}::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor, offset: float, casting_mode: str,
                      row_mode: bool | None, needs_dw: bool) -> tuple[Tensor, Tensor]:
    """``(dx, dw)`` of :func:`rms_norm` (``dw`` empty when not needed or there is no weight)."""
    dim = x.shape[-1]
    xf = x.reshape(-1, dim).float()
    g = dy.reshape(-1, dim).float()
    r = rstd.reshape(-1, 1).float()
    w = (offset + weight.float()) if weight is not None else torch.ones(dim, dtype=torch.float32, device=x.device)
    m = g * w
    dx = r * m - r.pow(3) * (m * xf).mean(-1, keepdim=True) * xf
    dw = (g * (xf * r)).sum(0) if weight is not None and needs_dw else empty_dw(x)
    return dx.to(x.dtype).reshape(x.shape), dw.to(weight.dtype) if dw.numel() else dw


@rms_norm_backward.register_kernel("cuda")
def _rms_norm_backward_cuda(dy: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor, offset: float,
                            casting_mode: str, row_mode: bool | None, needs_dw: bool) -> tuple[Tensor, Tensor]:
    from liger_kernel.ops.rms_norm import _str_to_casting_mode
    from liger_kernel.ops.rms_norm import rms_norm_backward as liger_backward
    from liger_kernel.ops.utils import calculate_settings

    block, warps = calculate_settings(x.shape[-1])
    # Liger's launcher reads the row stride of x as given: hand it rows, as its forward saved them
    dx, dw = liger_backward(dy.contiguous(), x.reshape(-1, x.shape[-1]).contiguous(), weight, rstd, offset,
                            _str_to_casting_mode[checked_casting(casting_mode)], block, warps, False, row_mode,
                            needs_dw=needs_dw and weight is not None)
    return dx.to(x.dtype), dw if dw is not None else empty_dw(x)


@rms_norm_backward.register_fake
def _(dy: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor, offset: float, casting_mode: str,
      row_mode: bool | None, needs_dw: bool) -> tuple[Tensor, Tensor]:
    dw = torch.empty_like(weight) if weight is not None and needs_dw else empty_dw(x)
    return torch.empty(dy.shape, dtype=x.dtype, device=x.device), dw


def _rms_norm_setup(ctx, inputs, output) -> None:
    x, weight, _, offset, casting_mode, row_mode = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.args = (offset, casting_mode, row_mode)


def _rms_norm_grad(ctx, dy: Tensor, _drstd: Tensor):
    x, weight, rstd = ctx.saved_tensors
    needs_dw = weight is not None and ctx.needs_input_grad[1]
    dx, dw = rms_norm_backward(dy, x, weight, rstd, *ctx.args, needs_dw)
    return dx, (dw if needs_dw else None), None, None, None, None


torch.library.register_autograd(f"{LIB}::rms_norm", _rms_norm_grad, setup_context=_rms_norm_setup)


# ----- LayerNorm ----------------------------------------------------------------------------------
@torch.library.custom_op(f"{LIB}::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``y = (x - mean) / std * weight + bias`` over the last dimension; mean and ``1 / std`` per row
    (float32). Reference math; the CUDA kernel is Liger's."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
    y = (xf - mean) * rstd * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).contiguous(), mean.reshape(-1).contiguous(), rstd.reshape(-1).contiguous()


@layer_norm.register_kernel("cuda")
def _layer_norm_cuda(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    from liger_kernel.ops.layer_norm import layer_norm_forward

    b = bias if bias is not None else torch.zeros_like(weight)
    y, _, mean, rstd, _, _ = layer_norm_forward(x.contiguous(), weight, b, eps)
    return y, mean, rstd


@layer_norm.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    rows = row_count(x)
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device), x.new_empty((rows,), dtype=torch.float32),
            x.new_empty((rows,), dtype=torch.float32))


@torch.library.custom_op(f"{LIB}::layer_norm_backward", mutates_args=())
def layer_norm_backward(dy: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, mean: Tensor, rstd: Tensor,
                        needs_dw: bool, needs_db: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(dx, dw, db)`` of :func:`layer_norm` (``dw``/``db`` empty when not needed)."""
    dim = x.shape[-1]
    xhat = (x.reshape(-1, dim).float() - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)
    g = dy.reshape(-1, dim).float()
    gw = g * weight.float()
    dx = rstd.reshape(-1, 1) * (gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw = (g * xhat).sum(0).to(weight.dtype) if needs_dw else empty_dw(x)
    db = g.sum(0).to(weight.dtype) if needs_db and bias is not None else empty_dw(x)
    return dx.to(x.dtype).reshape(x.shape), dw, db


@layer_norm_backward.register_kernel("cuda")
def _layer_norm_backward_cuda(dy: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, mean: Tensor,
                              rstd: Tensor, needs_dw: bool, needs_db: bool) -> tuple[Tensor, Tensor, Tensor]:
    from liger_kernel.ops.layer_norm import layer_norm_backward as liger_backward

    b = bias if bias is not None else torch.zeros_like(weight)
    # Liger's launcher reads the row stride of x as given: hand it rows, as its forward saved them
    dx, dw, db = liger_backward(dy.contiguous(), x.reshape(-1, x.shape[-1]).contiguous(), weight, b, mean, rstd,
                                needs_dw=needs_dw,
                                needs_db=needs_db and bias is not None)
    return dx, dw if dw is not None else empty_dw(x), db if db is not None else empty_dw(x)


@layer_norm_backward.register_fake
def _(dy: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, mean: Tensor, rstd: Tensor,
      needs_dw: bool, needs_db: bool) -> tuple[Tensor, Tensor, Tensor]:
    dw = torch.empty_like(weight) if needs_dw else empty_dw(x)
    db = torch.empty_like(weight) if needs_db and bias is not None else empty_dw(x)
    return torch.empty(dy.shape, dtype=x.dtype, device=x.device), dw, db


def _layer_norm_setup(ctx, inputs, output) -> None:
    x, weight, bias, _ = inputs
    ctx.save_for_backward(x, weight, bias, output[1], output[2])


def _layer_norm_grad(ctx, dy: Tensor, _dmean: Tensor, _drstd: Tensor):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    needs_dw, needs_db = ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2]
    dx, dw, db = layer_norm_backward(dy, x, weight, bias, mean, rstd, needs_dw, needs_db)
    return dx, (dw if needs_dw else None), (db if needs_db else None), None


torch.library.register_autograd(f"{LIB}::layer_norm", _layer_norm_grad, setup_context=_layer_norm_setup)


