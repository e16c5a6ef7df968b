"""A toy causal LM whose calls of its norm, MLP and rotary are config choices, for the call-site proof.

Every symbol here computes what a Liger replacement computes when called the default way, so a probe
on made-up inputs matches all of them. What the model passes decides:

- ``rope_layout="bshd"``: the second attention's rotary is called on (batch, seq, heads, dim) tensors
  with ``unsqueeze_dim=2``; Liger's kernel reads q and k as (batch, heads, seq, dim) whatever
  ``unsqueeze_dim`` says.
- ``late_eps``: the final norm's ``eps`` attribute is set after construction (the source reads it;
  Liger's norm reads ``variance_epsilon``, from its constructor).
- ``mlp_scale``: the MLP subclass's own ``forward`` takes a scale the model passes.
- ``inline_rope``: the attention rotates inline and never calls ``apply_rotary_pos_emb``.
- ``eps_per_layer``: layer ``i`` builds its norms with ``eps = 1e-6 * (i + 1)`` (one signature a layer).
- ``copy_layers``: the first layer is built, the others are ``copy.deepcopy`` of it (no ``__init__`` runs).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class CallSitesConfig:
    """Dimensions and how the model calls its symbols."""

    def __init__(self, rope_layout: str = "bhsd", late_eps: float | None = None, mlp_scale: float | None = None,
                 inline_rope: bool = False, eps_per_layer: bool = False, copy_layers: bool = False,
                 num_hidden_layers: int = 2,
                 hidden_size: int = 32, heads: int = 4, intermediate_size: int = 64, vocab_size: int = 64):
        self.rope_layout = rope_layout
        self.late_eps = late_eps
        self.mlp_scale = mlp_scale
        self.inline_rope = inline_rope
        self.eps_per_layer = eps_per_layer
        self.copy_layers = copy_layers
        self.num_hidden_layers = num_hidden_layers
        self.hidden_size = hidden_size
        self.num_attention_heads = heads
        self.head_dim = hidden_size // heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.hidden_act = "silu"


class SitesRMSNorm(nn.Module):
    """Standard RMSNorm that reads ``self.eps``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class SitesMLP(nn.Module):
    """Gated SiLU MLP without biases."""

    def __init__(self, config: CallSitesConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SitesScaledMLP(SitesMLP):
    """The same MLP whose forward takes a scale for its input (1 by default)."""

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return super().forward(x * scale)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1)``."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Standard rotary; ``unsqueeze_dim=2`` for (batch, seq, heads, dim) tensors."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class SitesAttention(nn.Module):
    """Causal self-attention with rotary positions, in the layout the config gives this instance."""

    def __init__(self, config: CallSitesConfig, layout: str = "bhsd"):
        super().__init__()
        self.config, self.layout = config, layout
        width = config.hidden_size
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        heads, dim = self.config.num_attention_heads, self.config.head_dim
        q, k = self.q_proj(x).view(b, s, heads, dim), self.k_proj(x).view(b, s, heads, dim)
        v = self.v_proj(x).view(b, s, heads, dim).transpose(1, 2)
        positions = torch.arange(s, dtype=torch.float32, device=x.device)
        angles = positions[:, None] / (100.0 ** (torch.arange(dim // 2, device=x.device) / (dim // 2)))
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None].expand(b, -1, -1).to(x.dtype), emb.sin()[None].expand(b, -1, -1).to(x.dtype)
        if self.config.inline_rope:
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            c, n = cos[:, None], sin[:, None]
            q, k = q * c + rotate_half(q) * n, k * c + rotate_half(k) * n
        elif self.layout == "bshd":
            q, k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        else:
            q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class SitesDecoderLayer(nn.Module):
    """Pre-norm block: attention, a second attention (the config's rotary layout), the MLP."""

    def __init__(self, config: CallSitesConfig, index: int):
        super().__init__()
        eps = 1e-6 * (index + 1) if config.eps_per_layer else 1e-6
        self.norm_1 = SitesRMSNorm(config.hidden_size, eps)
        self.attn = SitesAttention(config)
        self.norm_2 = SitesRMSNorm(config.hidden_size, eps)
        self.cross = SitesAttention(config, config.rope_layout)
        self.norm_3 = SitesRMSNorm(config.hidden_size, eps)
        self.mlp = SitesScaledMLP(config)
        self.scale = config.mlp_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x))
        x = x + self.cross(self.norm_2(x))
        h = self.norm_3(x)
        return x + (self.mlp(h) if self.scale is None else self.mlp(h, scale=self.scale))


class SitesForCausalLM(nn.Module):
    """Embeddings, the blocks, a final norm and an output head."""

    def __init__(self, config: CallSitesConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.copy_layers:
            first = SitesDecoderLayer(config, 0)
            self.layers = nn.ModuleList([first, *(copy.deepcopy(first) for _ in range(config.num_hidden_layers - 1))])
        else:
            self.layers = nn.ModuleList(SitesDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = SitesRMSNorm(config.hidden_size)
        if config.late_eps is not None:
            self.norm.eps = config.late_eps
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
