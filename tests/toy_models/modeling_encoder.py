"""A toy vision encoder with its own norm and MLP classes, as a recipe would write one."""

from __future__ import annotations

import torch
from torch import nn


class EncoderRMSNorm(nn.Module):
    """Standard RMSNorm: x * rsqrt(mean(x^2) + eps) * w."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


class EncoderMLP(nn.Module):
    """Gated SiLU MLP without biases."""

    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def encoder_activation(x: torch.Tensor) -> torch.Tensor:
    """A module-level function, to exercise function patches."""
    return torch.tanh(x)


class EncoderConfig:
    """Plain config object the encoder reads."""

    def __init__(self, hidden_size: int = 32, intermediate_size: int = 64, layers: int = 2):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.hidden_act = "silu"
        self.layers = layers


class EncoderLayer(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.norm = EncoderRMSNorm(config.hidden_size)
        self.mlp = EncoderMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class VisionEncoder(nn.Module):
    """Resolves its classes through this module's globals at construction, like HF modeling files."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.final_norm = EncoderRMSNorm(config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x)
