"""A toy causal LM whose top model never builds: every in-place verdict about it is unproven.

Its decoder layer builds and runs alone, and inside it a pre-norm RMSNorm and the rotary look safe;
but the causal LM (which holds every use of them) raises in its constructor, so nothing can see
how the whole model consumes their outputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class NoTopConfig:
    """Small dimensions."""

    def __init__(self, hidden_size: int = 32, heads: int = 4, intermediate_size: int = 64, vocab_size: int = 64,
                 num_hidden_layers: int = 2):
        self.hidden_size = hidden_size
        self.num_attention_heads = heads
        self.head_dim = hidden_size // heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        self.hidden_act = "silu"


class NoTopRMSNorm(nn.Module):
    """Standard RMSNorm."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.variance_epsilon, self.weight = eps, nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1)``."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Standard rotary."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class NoTopDecoderLayer(nn.Module):
    """Pre-norm attention with rotary positions."""

    def __init__(self, config: NoTopConfig):
        super().__init__()
        self.config = config
        width = config.hidden_size
        self.norm = NoTopRMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        heads, dim = self.config.num_attention_heads, self.config.head_dim
        q, k, v = (t.view(b, s, heads, dim).transpose(1, 2) for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
        angles = torch.arange(s, dtype=torch.float32)[:, None] / (100.0 ** (torch.arange(dim // 2) / (dim // 2)))
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None].expand(b, -1, -1).to(x.dtype), emb.sin()[None].expand(b, -1, -1).to(x.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class NoTopForCausalLM(nn.Module):
    """Never builds (a dependency this machine lacks, say)."""

    def __init__(self, config: NoTopConfig):
        super().__init__()
        raise RuntimeError("NoTopForCausalLM needs a fused attention extension that is not installed")

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # pragma: no cover - never built
        raise NotImplementedError
