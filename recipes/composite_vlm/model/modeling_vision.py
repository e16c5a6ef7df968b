"""A small ViT-style vision encoder written here, for the composite VLM recipe.

This is the "custom model" half of the composite VLM: its RMSNorm and gated
SiLU MLP are named module globals (``VisionRMSNorm``, ``VisionMLP``) that the
encoder constructs by bare name, so rebinding those globals before the model is
built swaps in Liger's ``LigerRMSNorm`` / ``LigerSwiGLUMLP`` with identical
parameter names and shapes. Attention is bidirectional SDPA over patches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class VisionConfig:
    """Hyper-parameters of :class:`VisionEncoder` (names match what Liger's SwiGLU reads)."""

    image_size: int = 32
    patch_size: int = 8
    num_channels: int = 3
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"

    @property
    def num_patches(self) -> int:
        """Patches per image, i.e. the encoder's output sequence length."""
        return (self.image_size // self.patch_size) ** 2


class VisionRMSNorm(nn.Module):
    """RMSNorm: float32 ``x * rsqrt(mean(x^2) + eps)``, cast back, times ``weight``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        x = hidden_states.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


class VisionMLP(nn.Module):
    """Gated SiLU MLP: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(
            config.hidden_size, config.intermediate_size, bias=False
        )
        self.up_proj = nn.Linear(
            config.hidden_size, config.intermediate_size, bias=False
        )
        self.down_proj = nn.Linear(
            config.intermediate_size, config.hidden_size, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class VisionAttention(nn.Module):
    """Bidirectional multi-head self-attention with a fused qkv projection."""

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        if config.hidden_size % config.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=True)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (
            self.qkv(x)
            .view(b, n, 3, self.num_heads, self.head_dim)
            .permute(2, 0, 3, 1, 4)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class VisionEncoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``."""

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        self.norm1 = VisionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.attn = VisionAttention(config)
        self.norm2 = VisionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = VisionMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionEncoder(nn.Module):
    """Conv patch embedding + learned positions + encoder layers + ``post_norm``."""

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        if config.image_size % config.patch_size:
            raise ValueError("image_size must be a multiple of patch_size")
        self.config = config
        self.patch_embed = nn.Conv2d(
            config.num_channels,
            config.hidden_size,
            kernel_size=config.patch_size,
            stride=config.patch_size,
        )
        self.pos_embed = nn.Parameter(
            torch.zeros(1, config.num_patches, config.hidden_size)
        )
        nn.init.normal_(self.pos_embed, std=0.02)
        self.layers = nn.ModuleList(
            VisionEncoderLayer(config) for _ in range(config.num_hidden_layers)
        )
        self.post_norm = VisionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) pixels -> (B, num_patches, hidden_size) features."""
        x = self.patch_embed(pixel_values.to(self.patch_embed.weight.dtype))
        x = x.flatten(2).transpose(1, 2) + self.pos_embed
        for layer in self.layers:
            x = layer(x)
        return self.post_norm(x)
