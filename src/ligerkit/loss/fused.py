"""Token-normalized cross entropy straight from hidden states: the logits are never materialized.

``fused_linear_token_loss(hidden, weight, labels, num_valid_tokens)`` shifts the labels, honours
``ignore_index``, accumulates in float32, sums, and divides by the caller's count of valid tokens
(the recipe's global count over every micro-batch of the optimizer step and every rank), so it
equals the recipe's standard loss. On a GPU it calls Liger's fused linear cross entropy; on a CPU
a chunked PyTorch implementation of the same math, each chunk recomputed in backward
(checkpointing), so only one chunk's logits ever exist.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100
CHUNK_TOKENS = 1024


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                ignore_index: int, label_smoothing: float, softcap: float | None) -> torch.Tensor:
    logits = F.linear(hidden, weight, bias).float()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    return F.cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction="none")


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                 bias: torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX,
                                 label_smoothing: float = 0.0, softcap: float | None = None,
                                 chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """Per-token float32 losses of ``hidden @ weight.T (+ bias)`` against ``labels``, chunk by chunk."""
    pieces = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        sl = slice(start, start + chunk_tokens)
        pieces.append(checkpoint(_chunk_loss, hidden[sl], weight, bias, labels[sl], ignore_index,
                                 label_smoothing, softcap, use_reentrant=False))
    return torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)


def _liger_per_token_or_sum(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                            bias: torch.Tensor | None, ignore_index: int, label_smoothing: float,
                            softcap: float | None, per_token: bool) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    out = liger_fused_linear_cross_entropy(
        hidden, weight, labels, bias=bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
        reduction="none" if per_token else "sum", softcap=softcap, accum_dtype=torch.float32,
    )
    return out[0] if isinstance(out, tuple) else out


def fused_linear_token_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    num_valid_tokens: float,
    bias: torch.Tensor | None = None,
    *,
    ignore_index: int = IGNORE_INDEX,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    per_token: bool = False,
    backend: str = "auto",
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """The recipe's token-normalized causal-LM loss from final hidden states.

    Args:
        hidden: (batch, seq, hidden) final hidden states (before the output projection).
        weight: (vocab, hidden) output projection (tied or not); ``bias`` if the head has one.
        labels: (batch, seq) token ids aligned with ``hidden``; shifted here by one.
        num_valid_tokens: the recipe's count of valid labels for the whole optimizer step (all
            micro-batches, all ranks). The sum over this micro-batch is divided by it.
        softcap: the model's final logit softcapping (``cap * tanh(logits / cap)``), if any.
        per_token: return (batch, seq - 1) per-token losses divided by ``num_valid_tokens``
            (zero at ignored positions) instead of their sum, for recipes that weight tokens.
        backend: ``liger`` (GPU), ``torch`` (chunked), or ``auto`` (Liger on CUDA tensors).
    """
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    y = labels[:, 1:].reshape(-1)
    use_liger = backend == "liger" or (backend == "auto" and h.is_cuda)
    if use_liger:
        losses = _liger_per_token_or_sum(h.contiguous(), weight, y, bias, ignore_index, label_smoothing, softcap,
                                         per_token)
    else:
        losses = chunked_linear_cross_entropy(h, weight, y, bias, ignore_index, label_smoothing, softcap, chunk_tokens)
        if not per_token:
            losses = losses.sum()
    scale = 1.0 / max(float(num_valid_tokens), 1.0)
    if per_token:
        return (losses.float() * scale).reshape(labels.shape[0], labels.shape[1] - 1)
    return losses.float() * scale
