"""Where the fused loss plugs into a model: its output head, and what the head may not hide.

The fused loss takes the model's base hidden states and its output projection. That equals the
model's own logits only if the model does nothing else to them. Final logit softcapping
(Gemma 2/3) is reproduced exactly; a logit scale (Cohere), a logit divisor (Granite), a head that
is not a Linear layer, or any other transformation is refused before training, never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ligerkit.errors import FusedLossRefusedError
from ligerkit.hf import text_config


@dataclass(frozen=True)
class OutputHead:
    """The output projection the fused loss uses."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    softcap: float | None


def output_head(model: nn.Module) -> OutputHead:
    """The model's output head, or :class:`FusedLossRefusedError` naming what the path cannot do."""
    config = text_config(getattr(model, "config", None))
    for attr, neutral in (("logit_scale", 1.0), ("logits_scaling", 1.0), ("output_multiplier_scale", 1.0)):
        value = getattr(config, attr, None)
        if value is not None and float(value) != neutral:
            raise FusedLossRefusedError(
                f"the model scales its logits ({attr}={value}); the fused loss would compute a different "
                "loss. Set train.loss.path: standard for this model."
            )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and (hasattr(head, "lora_A") or hasattr(head, "base_layer")):
        raise FusedLossRefusedError(
            f"the output head carries an adapter ({type(head).__module__}.{type(head).__name__}); the fused loss "
            "multiplies the hidden states by the head's weight itself and would leave the adapter out. Leave the "
            "head out of train.lora.target_modules (all-linear does), or set train.loss.path: standard."
        )
    if not isinstance(head, nn.Linear):
        raise FusedLossRefusedError(
            f"the output head is {type(head).__name__}, not an nn.Linear; the fused loss needs a linear head. "
            "Set train.loss.path: standard for this model."
        )
    softcap = getattr(config, "final_logit_softcapping", None)
    return OutputHead(head.weight, head.bias, float(softcap) if softcap else None)


HEAD_CHECK_TOKENS = 512
"""Positions of a text sample the head check runs on: the check is about the head, and the model's
full-length logits (sequence x vocabulary, twice) would cap the longest sequence the fused loss trains."""

TEXT_KEYS = frozenset({"input_ids", "attention_mask", "labels", "position_ids", "token_type_ids"})
"""Batch keys that are per-position text and nothing else; a batch of only these can be cut to a prefix."""


def head_check_batch(batch: dict[str, torch.Tensor], tokens: int = HEAD_CHECK_TOKENS) -> dict[str, torch.Tensor]:
    """The batch the head check runs on: a text-only batch's first ``tokens`` positions (each tensor cut
    along its position dimension, which must be the same length for all), any other batch unchanged
    (images or audio may need every position that carries them)."""
    if not batch or set(batch) - TEXT_KEYS:
        return batch
    lengths = {v.shape[1] if v.dim() >= 2 else -1 for v in batch.values()}
    if len(lengths) != 1 or next(iter(lengths)) <= tokens:
        return batch
    return {k: v[:, :tokens] for k, v in batch.items()}


def check_head_reproduces_logits(logits: torch.Tensor, hidden: torch.Tensor, head: OutputHead,
                                 rows: int = 1024) -> None:
    """Refuse unless ``head(hidden)`` (with its softcap) equals the model's own logits; compared
    ``rows`` positions at a time, so the check holds no float32 copy of the whole logits."""
    with torch.no_grad():
        tol = 1e-4 if logits.dtype == torch.float32 else 3e-2
        mine_shape = (*hidden.shape[:-1], head.weight.shape[0])
        worst, same = float("nan"), mine_shape == tuple(logits.shape)
        if same:
            flat_hidden, flat_logits = hidden.reshape(-1, hidden.shape[-1]), logits.reshape(-1, logits.shape[-1])
            worst = 0.0
            for first in range(0, flat_hidden.shape[0], rows):
                mine = torch.nn.functional.linear(flat_hidden[first:first + rows], head.weight, head.bias).float()
                if head.softcap is not None:
                    mine = head.softcap * torch.tanh(mine / head.softcap)
                theirs = flat_logits[first:first + rows].float()
                if not torch.allclose(mine, theirs, rtol=tol, atol=tol * 10):
                    same = False
                    worst = max(worst, float((mine - theirs).abs().max()))
        if not same:
            raise FusedLossRefusedError(
                "the model's logits are not its output head applied to its hidden states (max difference "
                f"{worst:.3g}): something transforms them (scaling, extra heads, a non-linear head). The fused "
                "path refuses rather than approximate; set train.loss.path: standard."
            )
