"""A toy MoE causal LM whose RMSNorm is safe in every block but shared in the decoder layer.

The MoE block ends in a norm (``norm(experts(x))``): run alone, nothing else reads the norm's output
gradient, so an in-place backward (Liger's default RMSNorm: dX into dY) changes nothing there. The
decoder layer adds the block's output straight to the residual (``x + moe(x)``), so the add hands one
gradient tensor to both branches and the in-place write corrupts the residual's gradient: only the
whole model shows it. The causal LM refuses small widths (as some families do), so a check that
falls back to smaller blocks when the top model does not build at small widths sees only the block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MoePostNormConfig:
    """Own widths a little larger than a probe's small ones; the causal LM needs them."""

    def __init__(self, hidden_size: int = 96, intermediate_size: int = 128, vocab_size: int = 64,
                 num_hidden_layers: int = 3, num_experts: int = 4, num_experts_per_tok: int = 2):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.hidden_act = "silu"


class MoePostNormRMSNorm(nn.Module):
    """Standard RMSNorm: float32 statistics, cast back, then times the weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.variance_epsilon, self.weight = eps, nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)


class MoePostNormExpert(nn.Module):
    """One expert: a gated SiLU MLP without biases."""

    def __init__(self, config: MoePostNormConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoePostNormSparseMoeBlock(nn.Module):
    """Top-k routed experts, then a norm of their sum."""

    def __init__(self, config: MoePostNormConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.router = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(MoePostNormExpert(config) for _ in range(config.num_experts))
        self.norm = MoePostNormRMSNorm(config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.router(x).softmax(-1).topk(self.top_k, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            gate = (weights * (chosen == e)).sum(-1, keepdim=True)
            out = out + gate * expert(x)
        return self.norm(out)


class MoePostNormDecoderLayer(nn.Module):
    """A mixing projection, then the MoE block added straight to the residual."""

    def __init__(self, config: MoePostNormConfig):
        super().__init__()
        self.input_norm = MoePostNormRMSNorm(config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.moe = MoePostNormSparseMoeBlock(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.input_norm(x))
        return x + self.moe(x)


class MoePostNormForCausalLM(nn.Module):
    """Embeddings, the layers, a final norm and an output head; refuses widths under 80."""

    def __init__(self, config: MoePostNormConfig):
        super().__init__()
        if config.hidden_size < 80:
            raise ValueError(f"hidden_size {config.hidden_size} is too small for this family (at least 80)")
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(MoePostNormDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = MoePostNormRMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
