"""Pure-PyTorch references of exactly what each Liger replacement computes.

Liger's Triton kernels do not run on a CPU; these functions reproduce their math (offset, casting
mode, activation, layout) so a probe can compare a model's own module against them anywhere.
A module's reference takes the candidate module (for its parameters and settings) and the input; a
rotary's takes the arguments Liger's function takes. A rotary reads its inputs the way the kernel
does (it ignores the arguments the kernel ignores and reads q, k and cos/sin in the kernel's
layout), so a call the model makes with another layout computes here what the kernel would compute,
or raises ``ValueError`` where the kernel would read past a tensor. (The norm and MLP kernels make
their inputs contiguous first: any strides compute the same.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _eps(module: nn.Module) -> float:
    return float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))


def rms_norm_llama(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LigerRMSNorm (llama casting): normalize in float32, cast back, then scale by ``offset + w``."""
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + _eps(module))).to(x.dtype)
    return normed * (module.offset + module.weight)


def rms_norm_gemma(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Liger's Gemma casting: everything in float32, ``normed * (offset + w)``, then cast back."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + _eps(module))
    return (normed * (module.offset + module.weight.float())).to(x.dtype)


def rms_norm_none(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Liger's ``casting_mode="none"``: everything in the input dtype, ``normed * (offset + w)``."""
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + _eps(module))
    return normed * (module.offset + module.weight)


def rms_norm_by_casting(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Any ``LigerRMSNorm`` (sub)class that keeps Liger's forward: the reference its own
    ``casting_mode`` and ``offset`` select (what an official helper's own norm class computes)."""
    mode = getattr(module, "casting_mode", "llama")
    by_mode = {"llama": rms_norm_llama, "gemma": rms_norm_gemma, "none": rms_norm_none}
    if mode not in by_mode:
        raise ValueError(f"Liger casting mode {mode!r} has no reference")
    return by_mode[mode](module, x)


def layer_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LigerLayerNorm: affine LayerNorm whose bias is always a (trainable) parameter."""
    return F.layer_norm(x, (x.shape[-1],), module.weight, module.bias, _eps(module))


def swiglu(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LigerSwiGLUMLP: ``down(silu(gate(x)) * up(x))``, no biases."""
    return module.down_proj(F.silu(module.gate_proj(x)) * module.up_proj(x))


def geglu(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LigerGEGLUMLP: ``down(gelu_tanh(gate(x)) * up(x))``, no biases (tanh approximation only)."""
    return module.down_proj(F.gelu(module.gate_proj(x), approximate="tanh") * module.up_proj(x))


def phi3_swiglu(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LigerPhi3SwiGLUMLP: one fused ``gate_up_proj`` (gate first), ``down(up * silu(gate))``."""
    gate, up = module.gate_up_proj(x).chunk(2, dim=-1)
    return module.down_proj(up * F.silu(gate))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The first ``cos.shape[-1]`` entries of each head rotated in ``dtype`` and stored back in ``x``'s dtype
    (the kernel writes into ``x``); the rest passes through."""
    width = cos.shape[-1]
    rot, rest = x[..., :width].to(dtype), x[..., width:]
    return torch.cat(((rot * cos + _rotate_half(rot) * sin).to(x.dtype), rest), dim=-1)


def _liger_cos_rows(cos: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """cos (or sin) as Liger's rotary holds it: (1 or batch, seq, width). A 4-D tensor loses the size-1
    dimension ``unsqueeze_dim`` names (else dimension 1, else every size-1 dimension); a 2-D one gains a
    batch of 1. ``unsqueeze_dim`` does nothing else: q and k are always read as (batch, heads, seq, dim)."""
    if cos.dim() == 4:
        if cos.shape[unsqueeze_dim] == 1:
            cos = cos.squeeze(unsqueeze_dim)
        elif cos.shape[1] == 1:
            cos = cos.squeeze(1)
        else:
            cos = cos.squeeze()
    if cos.dim() == 2:
        cos = cos.unsqueeze(0)
    if cos.dim() != 3:
        raise ValueError(f"Liger's rotary takes cos/sin of 2 to 4 dimensions (batch, seq, width); got shape "
                         f"{tuple(cos.shape)}")
    return cos


def _liger_rotary_table(cos: torch.Tensor, batch: int, seq: int, width: int) -> torch.Tensor:
    """The cos (or sin) value Liger's kernel uses at every (batch, position, rotated entry) of q: row
    ``position`` (cos batch 1) or ``b * seq + position`` of the contiguous (rows, width) table, ``seq``
    being q's dimension 2, and of each row only the first ``width / 2`` entries, used for both halves."""
    flat = cos.contiguous().reshape(-1, cos.shape[-1])
    positions = torch.arange(seq, device=cos.device)
    rows = positions.expand(batch, seq) if cos.shape[0] == 1 else \
        torch.arange(batch, device=cos.device)[:, None] * seq + positions
    if int(rows.max()) >= flat.shape[0] or cos.shape[0] not in (1, batch):
        raise ValueError(f"Liger's rotary would read cos/sin at other positions or past their end (row "
                         f"{int(rows.max())} of {flat.shape[0]}): it reads q as (batch {batch}, heads, seq {seq}, "
                         f"head_dim) and cos/sin as (1 or {batch}, seq, width), and these cos/sin have shape "
                         f"{tuple(cos.shape)}")
    half = flat[rows][..., : width // 2]
    return torch.cat((half, half), dim=-1)


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1,
           rotary_dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """liger_rotary_pos_emb as its kernel computes it: ``rotate_half`` rotary (``cat(-x2, x1)``) over the
    first ``rotary_dim`` entries of each head (default: cos's width, at most head_dim).

    The kernel reads q and k as (batch, heads, seq, head_dim) whatever ``unsqueeze_dim`` says (it only
    picks which size-1 dimension a 4-D cos loses), ignores ``position_ids``, takes cos/sin rows by
    position (:func:`_liger_rotary_table`: a cos laid out otherwise is read at other positions, or past
    its end, which this refuses), uses the first half of each row for both halves, computes in the
    promoted dtype of q and cos and writes back in q's dtype.
    """
    if q.dim() != 4 or k.dim() != 4 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] \
            or k.shape[3] != q.shape[3]:
        raise ValueError(f"Liger's rotary takes q and k as (batch, heads, seq, head_dim) with equal batch, seq and "
                         f"head_dim; got q {tuple(q.shape)}, k {tuple(k.shape)}")
    batch, _, seq, head_dim = q.shape
    cos, sin = _liger_cos_rows(cos, unsqueeze_dim), _liger_cos_rows(sin, unsqueeze_dim)
    width = min(cos.shape[-1], head_dim) if rotary_dim is None else rotary_dim
    if width % 2 or not 0 < width <= head_dim or cos.shape[-1] < width // 2:
        raise ValueError(f"Liger's rotary needs an even rotary width in (0, {head_dim}] and cos/sin at least half "
                         f"as wide; got width {width}, cos/sin width {cos.shape[-1]}")
    cos_t = _liger_rotary_table(cos, batch, seq, width).unsqueeze(1)
    sin_t = _liger_rotary_table(sin, batch, seq, width).unsqueeze(1)
    dtype = torch.promote_types(q.dtype, cos.dtype)
    return _rotate(q, cos_t, sin_t, dtype), _rotate(k, cos_t, sin_t, torch.promote_types(k.dtype, cos.dtype))


def multimodal_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      mrope_section: list[int], unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """liger_multimodal_rotary_pos_emb (Qwen2-VL M-RoPE) as its kernel computes it: q and k read as
    (batch, heads, seq, head_dim) whatever ``unsqueeze_dim`` says, cos/sin as the contiguous (3, batch,
    seq, head_dim) rows of temporal, height and width positions; of the first head_dim / 2 entries, the
    first ``mrope_section[0]`` come from the temporal rows, the next ``mrope_section[1]`` from the height
    rows, the rest from the width rows (the third section's own size is not read), and that half is used
    for both halves; the whole head is rotated, computed in cos's dtype and written back in q's."""
    if q.dim() != 4 or k.dim() != 4 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] \
            or k.shape[3] != q.shape[3]:
        raise ValueError(f"Liger's M-RoPE takes q and k as (batch, heads, seq, head_dim) with equal batch, seq and "
                         f"head_dim; got q {tuple(q.shape)}, k {tuple(k.shape)}")
    batch, _, seq, head_dim = q.shape
    half = head_dim // 2
    t_end, h_end = int(mrope_section[0]), int(mrope_section[0]) + int(mrope_section[1])

    def table(c: torch.Tensor) -> torch.Tensor:
        need = 3 * batch * seq * head_dim
        if c.numel() < need:
            raise ValueError(f"Liger's M-RoPE reads cos/sin as (3, {batch}, {seq}, {head_dim}) ({need} values); these "
                             f"have shape {tuple(c.shape)}")
        rows = c.contiguous().reshape(-1)[:need].view(3, batch, seq, head_dim)[..., :half]
        picked = torch.cat((rows[0, ..., :t_end], rows[1, ..., t_end:h_end], rows[2, ..., h_end:]), dim=-1)
        return torch.cat((picked, picked), dim=-1).unsqueeze(1)

    cos_t, sin_t = table(cos), table(sin)
    return _rotate(q, cos_t, sin_t, cos.dtype), _rotate(k, cos_t, sin_t, cos.dtype)
