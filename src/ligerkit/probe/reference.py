"""Pure-PyTorch references of exactly what each Liger replacement computes.

Liger's Triton kernels do not run on a CPU; these functions reproduce their math (offset, casting
mode, activation, layout) so a probe can compare a model's own module against them anywhere.
Each takes the candidate module (for its parameters and settings) and the inputs.
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


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    width = cos.shape[-1]  # Liger infers the rotated width from cos/sin; the rest passes through
    rot, rest = x[..., :width], x[..., width:]
    return torch.cat((rot * cos + _rotate_half(rot) * sin, rest), dim=-1)


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """liger_rotary_pos_emb: standard ``rotate_half`` rotary over the first ``cos.shape[-1]`` dims."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def multimodal_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      mrope_section: list[int], unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """liger_multimodal_rotary_pos_emb (Qwen2-VL M-RoPE): cos/sin are (3, batch, seq, dim); each
    channel section takes its temporal / height / width row, then standard rotary."""
    sections = list(mrope_section) * 2
    cos = torch.cat([part[i % 3] for i, part in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([part[i % 3] for i, part in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return rotary(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
