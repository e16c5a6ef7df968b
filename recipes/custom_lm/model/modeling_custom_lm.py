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

    # sizes: vocabulary, width, depth, MLP
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    # attention: query heads, their width, shared key/value heads
    num_attention_heads: int
    head_dim: int
    num_key_value_heads: int
    # numerics and initialization
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
        self.weight = nn.Parameter(torch.zeros(hidden_size))  # (1 + weight) starts as the identity
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x / rms(x) * (1 + weight)``, all in float32, cast back at the end."""
        x32 = x.float()
        inv_rms = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.variance_epsilon)
        return (x32 * inv_rms * (1.0 + self.weight.float())).to(x.dtype)


class CustomMLP(nn.Module):
    """Gated-GELU (tanh approximation) feed-forward block: ``down(gelu(gate(x)) * up(x))``."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        width, inner = config.hidden_size, config.intermediate_size
        self.gate_proj, self.up_proj = (nn.Linear(width, inner, bias=False) for _ in range(2))
        self.down_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim (the standard rotary convention)."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q (B, Hq, T, D) and k (B, Hkv, T, D) by cos/sin (B, T, D); ``position_ids`` is unused."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    q_rot, k_rot = (t * cos + rotate_half(t) * sin for t in (q, k))
    return q_rot, k_rot


class CustomRotaryEmbedding(nn.Module):
    """Full-width RoPE tables from integer positions: ``(cos, sin)``, each (B, T, head_dim)."""

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        half = torch.arange(head_dim // 2, dtype=torch.float32)
        self.register_buffer("inv_freq", theta ** (-2.0 * half / head_dim), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.einsum("bt,f->btf", position_ids.float(), self.inv_freq.to(x.device, torch.float32))
        table = angles.repeat(1, 1, 2)  # (B, T, D): the two halves share their frequencies
        return table.cos().to(x.dtype), table.sin().to(x.dtype)


def padding_causal_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """A (B, T) 0/1 padding mask as a boolean (B, 1, T, T) mask, True where a query may attend.

    Causal, padded keys hidden; every query keeps its own position, so rows of padding stay finite.
    """
    length = attention_mask.shape[-1]
    positions = torch.arange(length, device=attention_mask.device)
    allowed = positions[None, :] <= positions[:, None]  # key index <= query index
    allowed = allowed & attention_mask.bool()[:, None, None, :]
    return allowed | (positions[None, :] == positions[:, None])


class CustomAttention(nn.Module):
    """Grouped-query self-attention with RoPE; SDPA shares the key/value heads itself (``enable_gqa``)."""

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.grouped = config.num_attention_heads != config.num_key_value_heads
        width, q_width = config.hidden_size, config.num_attention_heads * config.head_dim
        kv_width = config.num_key_value_heads * config.head_dim
        self.q_proj = nn.Linear(width, q_width, bias=False)
        self.k_proj = nn.Linear(width, kv_width, bias=False)
        self.v_proj = nn.Linear(width, kv_width, bias=False)
        self.o_proj = nn.Linear(q_width, width, bias=False)

    def _heads(self, projected: torch.Tensor) -> torch.Tensor:
        return projected.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)  # (B, H, T, D)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attention over ``hidden_states`` (B, T, C), rotated by ``cos``/``sin``; ``mask`` is boolean or None."""
        q, k, v = (self._heads(proj(hidden_states)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        # Looked up in this module's globals at call time: rebinding apply_rotary_pos_emb swaps it.
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                             enable_gqa=self.grouped)
        return self.o_proj(out.transpose(1, 2).flatten(2))


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
        self.embed_scale = math.sqrt(config.hidden_size)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([CustomDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = CustomRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = CustomRotaryEmbedding(config.head_dim, theta=config.rope_theta)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
        hidden = self.embed_tokens(input_ids)
        hidden = hidden * hidden.new_tensor(self.embed_scale)  # the scale rounded to the activations' dtype
        cos, sin = self.rotary_emb(hidden, positions)
        mask = None if attention_mask is None else padding_causal_mask(attention_mask)
        for block in self.layers:  # every block rotates with the same tables
            hidden = block(hidden, cos, sin, mask)
        return self.norm(hidden)


class CustomLMForCausalLM(nn.Module):
    """:class:`CustomLMModel` and an output head, tied to the embeddings by default; returns logits."""

    _no_split_modules: ClassVar[list[str]] = ["CustomDecoderLayer"]  # FSDP2 shards each block alone

    def __init__(self, config: CustomLMConfig) -> None:
        super().__init__()
        self.config, self.model = config, CustomLMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.initialize()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def initialize(self) -> None:
        """normal(0, initializer_range) for projections and embeddings; zeros for every norm weight
        (Gemma-style norms scale by ``1 + weight``; a swapped-in Liger norm is a norm weight too)."""
        for module in self.modules():
            weight = getattr(module, "weight", None)
            if isinstance(module, (nn.Linear, nn.Embedding)):
                weight.normal_(0.0, self.config.initializer_range)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(weight, nn.Parameter) and weight.ndim == 1:
                weight.zero_()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **ignored: object) -> torch.Tensor:
        """Logits of shape (B, T, vocab_size); other keyword arguments (``labels``) are ignored."""
        return self.lm_head(self.model(input_ids, attention_mask))

    # transformers-style accessors, used by the fused loss and tied-embedding checks
    def get_input_embeddings(self) -> nn.Embedding:
        """The token embedding table."""
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        """The output projection."""
        return self.lm_head
