"""RoPE (the Llama "rotate half" form) as ``ligerkit::`` operators (see ``ligerkit.compile.ops``)."""

from __future__ import annotations

import torch
from torch import Tensor

from ligerkit.compile.common import LIB


# ----- RoPE (the Llama / "rotate half" form, partial rotary included) --------------------------------
def _rope_cos_sin(cos: Tensor, sin: Tensor, unsqueeze_dim: int) -> tuple[Tensor, Tensor]:
    """cos/sin as (batch or 1, seq, width), the layouts Liger's launcher accepts."""
    if cos.ndim == 4:
        squeeze = unsqueeze_dim if cos.shape[unsqueeze_dim] == 1 else 1
        cos, sin = cos.squeeze(squeeze), sin.squeeze(squeeze)
    if cos.ndim == 2:
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    return cos, sin


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, rotary_dim: int | None, backward: bool) -> Tensor:
    """x (batch, heads, seq, head_dim) rotated by cos/sin (batch or 1, seq, width) in float32."""
    width = rotary_dim if rotary_dim is not None else min(cos.shape[-1], x.shape[-1])
    half = width // 2
    c = cos[..., :half].float().unsqueeze(1)
    s = sin[..., :half].float().unsqueeze(1)
    if backward:
        s = -s
    xf = x.float()
    x1, x2, rest = xf[..., :half], xf[..., half:width], xf[..., width:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1).to(x.dtype)


def _heads_last_layout(x: Tensor) -> Tensor:
    """A new tensor shaped like ``x`` (batch, heads, seq, dim) laid out as (batch, seq, heads, dim),
    the layout Liger's RoPE kernel writes."""
    return torch.empty(x.transpose(1, 2).shape, dtype=x.dtype, device=x.device).transpose(1, 2)


@torch.library.custom_op(f"{LIB}::rope", mutates_args=())
def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
         rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    """``q * cos + rotate_half(q) * sin`` (and ``k``) over the first ``rotary_dim`` entries of each
    head. Reference math; the CUDA kernel is Liger's."""
    return _reference_rope(q, k, cos, sin, unsqueeze_dim, rotary_dim, backward=False)


def _reference_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int, rotary_dim: int | None,
                    backward: bool) -> tuple[Tensor, Tensor]:
    """Both heads rotated (``backward``: the inverse rotation), in the layout Liger's kernel writes."""
    c, s = _rope_cos_sin(cos, sin, unsqueeze_dim)
    out_q, out_k = _heads_last_layout(q), _heads_last_layout(k)
    out_q.copy_(_rotate(q, c, s, rotary_dim, backward))
    out_k.copy_(_rotate(k, c, s, rotary_dim, backward))
    return out_q, out_k


def _liger_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int, rotary_dim: int | None,
                backward: bool) -> tuple[Tensor, Tensor]:
    from liger_kernel.ops.rope import rope_backward as liger_backward
    from liger_kernel.ops.rope import rope_forward as liger_forward

    # Liger's kernel rotates q and k in place (in their (batch, seq, heads, dim) layout): copies
    q2, k2 = _heads_last_layout(q), _heads_last_layout(k)
    q2.copy_(q)
    k2.copy_(k)
    if backward:
        return liger_backward(q2, k2, cos, sin, None, unsqueeze_dim, rotary_dim)
    out_q, out_k, _, _ = liger_forward(q2, k2, cos, sin, None, unsqueeze_dim, rotary_dim)
    return out_q, out_k


@rope.register_kernel("cuda")
def _rope_cuda(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
               rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    return _liger_rope(q, k, cos, sin, unsqueeze_dim, rotary_dim, backward=False)


@rope.register_fake
def _(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
      rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    return _heads_last_layout(q), _heads_last_layout(k)


@torch.library.custom_op(f"{LIB}::rope_backward", mutates_args=())
def rope_backward(dq: Tensor, dk: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
                  rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    """``(dq, dk)`` of :func:`rope`: the inverse rotation of the incoming gradients."""
    return _reference_rope(dq, dk, cos, sin, unsqueeze_dim, rotary_dim, backward=True)


@rope_backward.register_kernel("cuda")
def _rope_backward_cuda(dq: Tensor, dk: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
                        rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    return _liger_rope(dq, dk, cos, sin, unsqueeze_dim, rotary_dim, backward=True)


@rope_backward.register_fake
def _(dq: Tensor, dk: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
      rotary_dim: int | None) -> tuple[Tensor, Tensor]:
    return _heads_last_layout(dq), _heads_last_layout(dk)


def _rope_setup(ctx, inputs, output) -> None:
    _, _, cos, sin, unsqueeze_dim, rotary_dim = inputs
    ctx.save_for_backward(cos, sin)
    ctx.args = (unsqueeze_dim, rotary_dim)


def _rope_grad(ctx, dq: Tensor, dk: Tensor):
    cos, sin = ctx.saved_tensors
    gq, gk = rope_backward(dq, dk, cos, sin, *ctx.args)
    return gq, gk, None, None, None, None


torch.library.register_autograd(f"{LIB}::rope", _rope_grad, setup_context=_rope_setup)

