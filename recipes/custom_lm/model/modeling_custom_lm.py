"""A small, self-contained, Gemma2-flavoured decoder-only language model.

Why this file exists: it stands in for a "custom" in-house model that is *not* one of
the architectures transformers (or Liger's ``apply_liger_kernel_to_*`` helpers) know
about. It is written so that Liger Kernel can still be wired in before the model is
built, purely by rebinding this module's globals:

* ``CustomRMSNorm``  -> ``liger_kernel.transformers.rms_norm.LigerRMSNormForGemma2``
* ``CustomMLP``      -> ``liger_kernel.transformers.geglu.LigerGEGLUMLP``
* ``apply_rotary_pos_emb`` -> ``liger_kernel.transformers.rope.liger_rotary_pos_emb``

Every submodule is constructed by its bare module-level name, and the rotary function
is looked up in this module's globals at call time, so a swap done before
construction (classes) or before the forward pass (function) takes effect. The
Liger replacements have the same constructor signatures, parameter names and shapes
as the originals here, so checkpoints are interchangeable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class CustomLMConfig:
    """Hyper-parameters of :class:`CustomLMForCausalLM`."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02


class CustomRMSNorm(nn.Module):
    """Gemma-style RMSNorm: zero-initialised weight, scales by ``1 + weight``, float32 math."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.variance_epsilon = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        y = y * (1.0 + self.weight.float())
        return y.to(x.dtype)


class CustomMLP(nn.Module):
    """Gated-GELU (tanh approximation) feed-forward block: ``down(gelu(gate(x)) * up(x))``."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Swap the two halves of the last dim, negating the second: ``[x1, x2] -> [-x2, x1]``."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q (B, Hq, T, D) and k (B, Hkv, T, D) by cos/sin (B, T, D); ``position_ids`` is unused."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class CustomRotaryEmbedding(nn.Module):
    """Standard full-width RoPE tables; returns ``(cos, sin)`` of shape (B, T, head_dim)."""

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        self.register_buffer("inv_freq", 1.0 / (theta**exponents), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq.to(device=x.device, dtype=torch.float32)
        freqs = position_ids.to(torch.float32)[..., None] * inv_freq  # (B, T, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def build_attention_mask(attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Turn a (B, T) 0/1 padding mask into a boolean (B, 1, T, T) causal+padding mask (True = attend).

    The diagonal is always allowed so fully padded query rows never produce NaNs.
    """
    device = attention_mask.device
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
    mask = causal & attention_mask.bool()[:, None, None, :]
    return mask | torch.eye(seq_len, dtype=torch.bool, device=device)


class CustomAttention(nn.Module):
    """Grouped-query self-attention with RoPE, computed with ``F.scaled_dot_product_attention``."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.num_kv_groups = self.num_heads // self.num_kv_heads
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bsz, seq_len, _ = hidden_states.shape
        shape = (bsz, seq_len, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        # Global lookup at call time: rebinding this module's apply_rotary_pos_emb swaps it.
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if self.num_kv_groups > 1:
            k = k.repeat_interleave(self.num_kv_groups, dim=1)
            v = v.repeat_interleave(self.num_kv_groups, dim=1)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, -1))


class CustomDecoderLayer(nn.Module):
    """Gemma2-style block with sandwich norms around both the attention and the MLP."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = CustomRMSNorm(config.hidden_size, eps=eps)
        self.self_attn = CustomAttention(config)
        self.post_attention_layernorm = CustomRMSNorm(config.hidden_size, eps=eps)
        self.pre_feedforward_layernorm = CustomRMSNorm(config.hidden_size, eps=eps)
        self.mlp = CustomMLP(config)
        self.post_feedforward_layernorm = CustomRMSNorm(config.hidden_size, eps=eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.post_attention_layernorm(h)
        h = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(h)


class CustomLMModel(nn.Module):
    """Embedding (scaled by sqrt(hidden_size)), decoder stack and final norm; returns hidden states."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(CustomDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = CustomRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = CustomRotaryEmbedding(config.head_dim, theta=config.rope_theta)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bsz, seq_len = input_ids.shape
        x = self.embed_tokens(input_ids)
        x = x * torch.tensor(math.sqrt(self.config.hidden_size), dtype=x.dtype, device=x.device)
        position_ids = torch.arange(seq_len, device=input_ids.device).expand(bsz, seq_len)
        cos, sin = self.rotary_emb(x, position_ids)
        mask = None if attention_mask is None else build_attention_mask(attention_mask, seq_len)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class CustomLMForCausalLM(nn.Module):
    """Causal LM head on top of :class:`CustomLMModel`; ``forward`` returns logits only (no loss)."""

    _no_split_modules: ClassVar[list[str]] = ["CustomDecoderLayer"]

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.config = config
        self.model = CustomLMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _init_weights(self, module: nn.Module) -> None:
        """normal(0, initializer_range) for Linear/Embedding; zeros for (any, incl. swapped) norm weights."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(getattr(module, "weight", None), nn.Parameter) and module.weight.ndim == 1:
            nn.init.zeros_(module.weight)  # Gemma-style norms scale by (1 + weight)

    def get_input_embeddings(self) -> nn.Embedding:
        """Return the token embedding table."""
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        """Return the LM head projection."""
        return self.lm_head

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **ignored: object
    ) -> torch.Tensor:
        """Return logits of shape (B, T, vocab_size)."""
        return self.lm_head(self.model(input_ids, attention_mask))
