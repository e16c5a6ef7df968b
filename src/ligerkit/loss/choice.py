"""The loss, chosen once per run: ``standard`` (full logits) or ``fused`` (never materialized).

Both compute the recipe's token-normalized loss: cross entropy summed in float32 over the shifted,
non-ignored labels of a micro-batch, times ``scale`` (the trainer passes ``world size / valid tokens
of the whole optimizer step``, so the sum over micro-batches and ranks is the mean over the step's
tokens). The choice is ``train.loss.path``; it is independent of Liger's kernel swaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ligerkit.errors import InvalidOptionError
from ligerkit.loss.fused import fused_linear_token_loss
from ligerkit.loss.liger_chunks import CHUNK_TOKENS
from ligerkit.loss.wiring import check_head_reproduces_logits, head_check_batch, output_head
from ligerkit.naming import IGNORE_INDEX

Batch = dict[str, torch.Tensor]


class Forwards(Protocol):
    """What a loss needs from a recipe: its model's logits, and its base hidden states."""

    def forward_logits(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...  # noqa: D102

    def forward_hidden(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...  # noqa: D102


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of float32 cross entropy over shifted, non-ignored labels."""
    shifted = labels[:, 1:].reshape(-1)
    flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    return F.cross_entropy(flat, shifted, ignore_index=IGNORE_INDEX, reduction="sum")


def valid_tokens(labels: torch.Tensor) -> int:
    """Number of shifted labels that count in the loss."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


@dataclass(frozen=True)
class StandardLoss:
    """Full logits from the model, float32 cross entropy."""

    name = "standard"

    def describe(self) -> str:
        """The path in words (reports, ``check``, ``train``)."""
        return "standard: full logits + float32 cross entropy, summed, divided by the step's global valid-token count"

    def check(self, recipe: Forwards, model: nn.Module, batch: Batch) -> None:
        """Nothing to check: the model's own logits are used."""

    def __call__(self, recipe: Forwards, model: nn.Module, batch: Batch, scale: float) -> torch.Tensor:
        return token_loss_sum(recipe.forward_logits(model, batch), batch["labels"]) * scale


@dataclass(frozen=True)
class FusedLoss:
    """``ligerkit.loss`` from the base hidden states and the output head, a chunk of rows at a time."""

    chunk_tokens: int | None = None
    name = "fused"

    def describe(self) -> str:
        """The path in words (reports, ``check``, ``train``)."""
        rows = self.chunk_tokens or CHUNK_TOKENS
        return (f"fused: ligerkit.loss from hidden states and the output head, {rows} rows of logits at a time "
                "(Liger's cross-entropy kernel on a GPU, chunked PyTorch on a CPU), float32, summed, divided by "
                "the step's global valid-token count before the logits' gradient is rounded")

    def check(self, recipe: Forwards, model: nn.Module, batch: Batch) -> None:
        """Refuse (:class:`~ligerkit.loss.FusedLossRefusedError`) unless the output head applied to the
        hidden states gives the model's own logits."""
        head = output_head(model)
        batch = head_check_batch(batch)
        with torch.no_grad():
            check_head_reproduces_logits(recipe.forward_logits(model, batch), recipe.forward_hidden(model, batch), head)

    def __call__(self, recipe: Forwards, model: nn.Module, batch: Batch, scale: float) -> torch.Tensor:
        head = output_head(model)
        hidden = recipe.forward_hidden(model, batch)
        # the kernel divides by the step's count before it rounds the logits' gradient
        return fused_linear_token_loss(hidden, head.weight, batch["labels"], 1.0 / scale, head.bias,
                                       softcap=head.softcap, chunk_tokens=self.chunk_tokens)


LossPath = StandardLoss | FusedLoss


def make_loss(path: str, chunk_tokens: int | None = None) -> LossPath:
    """The loss object for ``train.loss`` (``path`` and ``chunk_tokens``)."""
    if path == "standard":
        if chunk_tokens is not None:
            raise InvalidOptionError("chunk_tokens belongs to the fused loss; drop it or use path: fused")
        return StandardLoss()
    if path == "fused":
        return FusedLoss(chunk_tokens)
    raise InvalidOptionError(f"unknown loss path {path!r}; use 'standard' or 'fused'")
