"""Synthetic source modules, one per row of the decision table (right and wrong matches)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TableConfig:
    hidden_size = 32
    intermediate_size = 64
    hidden_act = "silu"
    num_attention_heads = 4
    head_dim = 8

    def __init__(self, **kw):
        self.__dict__.update(kw)


class StandardRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype)


class GemmaStyleRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).to(x.dtype)


class WeightInFloat32RMSNorm(StandardRMSNorm):
    """Multiplies the weight before casting back (only bfloat16 shows the difference)."""

    def forward(self, x):
        x32 = x.float()
        out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.float() * out).to(x.dtype)


class BiasFreeLayerNorm(nn.LayerNorm):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__(hidden_size, eps=eps, bias=False)


class AffineLayerNorm(nn.LayerNorm):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__(hidden_size, eps=eps)


class GatedSiluMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GatedTanhGeluMLP(GatedSiluMLP):
    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class GatedErfGeluMLP(GatedSiluMLP):
    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x)) * self.up_proj(x))


class BiasedSiluMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=True)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DropoutSiluMLP(GatedSiluMLP):
    def __init__(self, config):
        super().__init__(config)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(super().forward(x))


class FusedGateUpMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * F.silu(gate))


class ReluSquaredMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.relu(self.up_proj(x)) ** 2)


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def standard_rotary(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def partial_rotary(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Rotates the first cos.shape[-1] dims and passes the rest (the model passes full-width q)."""
    width = cos.shape[-1]
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    q_rot, q_pass = q[..., :width], q[..., width:]
    k_rot, k_pass = k[..., :width], k[..., width:]
    return (torch.cat((q_rot * cos + _rotate_half(q_rot) * sin, q_pass), -1),
            torch.cat((k_rot * cos + _rotate_half(k_rot) * sin, k_pass), -1))


def interleaved_rotary(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    def rot(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def other_sign_rotary(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    def rot(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((x2, -x1), dim=-1)

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def multimodal_rotary(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Qwen2-VL-style M-RoPE: cos/sin are (3, batch, seq, dim)."""
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return standard_rotary(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
