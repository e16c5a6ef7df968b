"""A toy causal LM whose top model cannot be built: its constructor refuses every config.

Its decoder layer, MLP and norm build and run on their own; a probe that must see the whole model
has to say so (unproven) instead of checking the symbol in a block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class UnbuildableConfig:
    """Dimensions of the toy model."""

    def __init__(self, hidden_size: int = 32, intermediate_size: int = 64, vocab_size: int = 64,
                 num_hidden_layers: int = 2):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers


class UnbuildableRMSNorm(nn.Module):
    """Standard RMSNorm."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.variance_epsilon, self.weight = eps, nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)


class UnbuildableMLP(nn.Module):
    """Gated SiLU MLP without biases."""

    def __init__(self, config: UnbuildableConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class UnbuildableDecoderLayer(nn.Module):
    """A post-norm block: the norm's output is added straight to the residual."""

    def __init__(self, config: UnbuildableConfig):
        super().__init__()
        self.mlp = UnbuildableMLP(config)
        self.norm = UnbuildableRMSNorm(config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.mlp(x))


class UnbuildableForCausalLM(nn.Module):
    """Embeddings, the blocks and a head; its constructor refuses every config."""

    def __init__(self, config: UnbuildableConfig):
        super().__init__()
        raise ValueError("UnbuildableForCausalLM needs weights this toy does not have")
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)  # noqa: unreachable, the structure
        self.layers = nn.ModuleList(UnbuildableDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)
