"""A toy causal LM whose attention also runs a token indexer (as DeepSeek-V3.2, HY-V4 and AXK2 do): the
attention calls ``apply_rotary_pos_emb`` the standard way, the indexer calls it on (batch, seq, heads,
dim) tensors with ``unsqueeze_dim=2``. Its own config's defaults build it that way, so every route
that judges a rotary on this module's whole model meets both calls."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class IndexerConfig:
    """Dimensions of the toy."""

    def __init__(self, hidden_size: int = 32, heads: int = 4, index_heads: int = 2, vocab_size: int = 64,
                 num_hidden_layers: int = 2):
        self.hidden_size = hidden_size
        self.num_attention_heads = heads
        self.index_heads = index_heads
        self.head_dim = hidden_size // heads
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1)``."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Standard rotary; ``unsqueeze_dim=2`` for (batch, seq, heads, dim) tensors."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class IndexerAttention(nn.Module):
    """Causal attention whose scores are biased by an indexer's own rotated queries and keys."""

    def __init__(self, config: IndexerConfig):
        super().__init__()
        self.config = config
        width, index = config.hidden_size, config.index_heads * config.head_dim
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.index_qk = nn.Linear(width, 2 * index, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        heads, dim = self.config.num_attention_heads, self.config.head_dim
        q, k, v = (t.view(b, s, heads, dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        positions = torch.arange(s, dtype=torch.float32, device=x.device)
        angles = positions[:, None] / (100.0 ** (torch.arange(dim // 2, device=x.device) / (dim // 2)))
        emb = torch.cat((angles, angles), dim=-1)[None].expand(b, -1, -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        iq, ik = (t.view(b, s, self.config.index_heads, dim) for t in self.index_qk(x).chunk(2, dim=-1))
        iq, ik = apply_rotary_pos_emb(iq, ik, cos, sin, unsqueeze_dim=2)  # the indexer's own layout
        bias = torch.einsum("bshd,bthd->bst", iq, ik)[:, None] / dim
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class IndexerForCausalLM(nn.Module):
    """Embeddings, attention blocks, an output head."""

    def __init__(self, config: IndexerConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(IndexerAttention(config) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = x + layer(x)
        return self.lm_head(x)
