"""A toy causal LM whose norm placement is a config choice: pre-norm, post-norm or sandwich norms.

Post-norm (``h = x + norm(attn(x))``) and sandwich layouts add a norm's output straight to the
residual, so the add's backward hands one gradient tensor to both branches: an in-place norm
backward (Liger's default) corrupts the residual's gradient there. ``reuse_q`` makes attention read
the pre-rotary query again after the rotary ran, which an in-place rotary (Liger's) overwrites.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayoutConfig:
    """Dimensions, the norm layout and whether the pre-rotary query is read again."""

    def __init__(self, layout: str = "pre", reuse_q: bool = False, hidden_size: int = 32, heads: int = 4,
                 intermediate_size: int = 64, vocab_size: int = 64, num_hidden_layers: int = 2):
        self.layout = layout
        self.reuse_q = reuse_q
        self.hidden_size = hidden_size
        self.num_attention_heads = heads
        self.head_dim = hidden_size // heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        self.hidden_act = "silu"


class LayoutRMSNorm(nn.Module):
    """Standard RMSNorm: float32 statistics, cast back, then times the weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.variance_epsilon, self.weight = eps, nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # one cast: its backward rounds the input's gradient once, as the kernel does
        normed = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)


class LayoutMLP(nn.Module):
    """Gated SiLU MLP without biases."""

    def __init__(self, config: LayoutConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1)``."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Standard rotary."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class LayoutAttention(nn.Module):
    """Causal self-attention with rotary positions."""

    def __init__(self, config: LayoutConfig):
        super().__init__()
        self.config = config
        width = config.hidden_size
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        heads, dim = self.config.num_attention_heads, self.config.head_dim
        q = self.q_proj(x).view(b, s, heads, dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, heads, dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, heads, dim).transpose(1, 2)
        angles = torch.arange(s, dtype=torch.float32)[:, None] / (100.0 ** (torch.arange(dim // 2) / (dim // 2)))
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None].expand(b, -1, -1).to(x.dtype), emb.sin()[None].expand(b, -1, -1).to(x.dtype)
        q_rot, k_rot = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q_rot, k_rot, v, is_causal=True)
        if self.config.reuse_q:
            out = out + q  # reads the pre-rotary query after the rotary ran
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class LayoutDecoderLayer(nn.Module):
    """One block in the configured layout."""

    def __init__(self, config: LayoutConfig):
        super().__init__()
        self.layout = config.layout
        self.attn = LayoutAttention(config)
        self.mlp = LayoutMLP(config)
        self.norm_1 = LayoutRMSNorm(config.hidden_size)
        self.norm_2 = LayoutRMSNorm(config.hidden_size)
        if config.layout == "sandwich":
            self.norm_3 = LayoutRMSNorm(config.hidden_size)
            self.norm_4 = LayoutRMSNorm(config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layout == "pre":
            x = x + self.attn(self.norm_1(x))
            return x + self.mlp(self.norm_2(x))
        if self.layout == "post":
            x = x + self.norm_1(self.attn(x))
            return x + self.norm_2(self.mlp(x))
        x = x + self.norm_3(self.attn(self.norm_1(x)))
        return x + self.norm_4(self.mlp(self.norm_2(x)))


class LayoutForCausalLM(nn.Module):
    """Embeddings, the blocks, a final norm and an output head."""

    def __init__(self, config: LayoutConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LayoutDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = LayoutRMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
