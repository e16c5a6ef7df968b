"""Token-normalized cross entropy straight from hidden states: the logits are never materialized.

``fused_linear_token_loss(hidden, weight, labels, num_valid_tokens)`` shifts the labels, honours
``ignore_index``, accumulates in float32, sums, and divides by the caller's count of valid tokens
(the recipe's global count over every micro-batch of the optimizer step and every rank), so it
equals the recipe's standard loss. On a GPU it runs Liger's fused linear cross entropy: for the
token-normalized sum, Liger's cross-entropy kernel in the chunk loop of ``liger_chunks`` (the kernel
divides by the count before it rounds the logits' gradient, as the standard loss does); for
per-token output, Liger's FLCE function. On a CPU it runs a chunked PyTorch implementation of the
same math, each chunk recomputed in backward (checkpointing), so only one chunk's logits ever exist.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ligerkit.loss.liger_chunks import CHUNK_TOKENS, liger_token_normalized_loss
from ligerkit.naming import IGNORE_INDEX



def liger_chunk_mem_const(tokens: int, hidden: int, vocab: int, chunk_tokens: int) -> int:
    """The ``chunk_mem_const`` that makes Liger's FLCE work on about ``chunk_tokens`` rows at a time.

    Liger 0.8.5 splits the ``tokens`` rows into ``inc = ceil(vocab / (c * hidden))`` parts and rounds
    each part up to a power of two. Its default ``c = 1`` bounds the transient logits to one
    ``tokens x hidden`` tensor, which at a 152k vocabulary means chunks of 128 rows: many thin
    matmuls and a float32 weight-gradient read-modify-write per chunk. Asking for ``inc =
    ceil(tokens / chunk_tokens)`` parts (at least that many: ``c`` rounds down) bounds the transient
    logits to about ``chunk_tokens x vocab``.
    """
    parts = max(1, -(-tokens // max(1, chunk_tokens)))
    return max(1, vocab // (parts * hidden))


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


def _liger_per_token(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, bias: torch.Tensor | None,
                     ignore_index: int, label_smoothing: float, softcap: float | None,
                     chunk_tokens: int) -> torch.Tensor:
    """Unreduced float32 losses from Liger's own FLCE function (it folds per-token upstream gradients in)."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    out = liger_fused_linear_cross_entropy(
        hidden, weight, labels, bias=bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
        reduction="none", softcap=softcap, accum_dtype=torch.float32,
        chunk_mem_const=liger_chunk_mem_const(hidden.shape[0], hidden.shape[1], weight.shape[0], chunk_tokens),
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
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """The recipe's token-normalized causal-LM loss from final hidden states.

    Args:
        hidden: (batch, seq, hidden) final hidden states (before the output projection).
        weight: (vocab, hidden) output projection (tied or not); ``bias`` if the head has one.
        labels: (batch, seq) token ids aligned with ``hidden``; shifted here by one.
        num_valid_tokens: the recipe's count of valid labels for the whole optimizer step (all
            micro-batches, all ranks; divided by the world size under FSDP, which averages
            gradients over ranks). The sum over this micro-batch is divided by it; 0 (an
            all-ignored step) gives a zero loss.
        softcap: the model's final logit softcapping (``cap * tanh(logits / cap)``), if any.
        per_token: return (batch, seq - 1) per-token losses divided by ``num_valid_tokens``
            (zero at ignored positions) instead of their sum, for recipes that weight tokens.
        backend: ``liger`` (GPU), ``torch`` (chunked), or ``auto`` (Liger on CUDA tensors).
        chunk_tokens: rows of logits that exist at once (default ``CHUNK_TOKENS``); larger is
            faster and holds more memory.
    """
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be a positive number of rows, got {chunk_tokens}")
    # Every position stays (a view, no copy of the hidden states); the last one of each row gets an
    # ignored label, which is the shift.
    batch, seq = labels.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    y = torch.cat([labels[:, 1:], labels.new_full((batch, 1), ignore_index)], dim=1).reshape(-1)
    use_liger = backend == "liger" or (backend == "auto" and h.is_cuda)
    chunk = chunk_tokens or CHUNK_TOKENS
    if num_valid_tokens < 0:
        raise ValueError(f"num_valid_tokens must be >= 0, got {num_valid_tokens}")
    # An all-ignored step has nothing to count: its loss is zero, never NaN.
    normalizer = float(num_valid_tokens) if num_valid_tokens > 0 else 1.0
    if use_liger and not per_token:
        # The division happens inside the kernel, before the logits' gradient is rounded.
        return liger_token_normalized_loss(h.contiguous(), weight, y, normalizer, bias, ignore_index=ignore_index,
                                           label_smoothing=label_smoothing, softcap=softcap, chunk_tokens=chunk)
    if use_liger:
        losses = _liger_per_token(h.contiguous(), weight, y, bias, ignore_index, label_smoothing, softcap, chunk)
    else:
        losses = chunked_linear_cross_entropy(h, weight, y, bias, ignore_index, label_smoothing, softcap, chunk)
    scale = 1.0 / normalizer
    if per_token:
        return (losses.float() * scale).reshape(batch, seq)[:, :-1]
    return losses.sum() * scale
