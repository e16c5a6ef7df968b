"""Where the fused loss plugs into a model: its output head, and what the head may not hide.

The fused path takes the model's base hidden states and its output projection. That equals the
model's own logits only if the model does nothing else to them. Final logit softcapping
(Gemma 2/3) is reproduced exactly; a logit scale (Cohere), a logit divisor (Granite), a head that
is not a Linear layer, or any other transformation is refused before training, never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.hf import text_config


class FusedLossRefusedError(LigerKitError):
    """The model transforms its logits in a way the fused path cannot reproduce exactly."""


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
                f"the model scales its logits ({attr}={value}); the fused loss path would compute a different "
                "loss. Set train.loss.path: standard for this model."
            )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise FusedLossRefusedError(
            f"the output head is {type(head).__name__}, not an nn.Linear; the fused path needs a linear head. "
            "Set train.loss.path: standard for this model."
        )
    softcap = getattr(config, "final_logit_softcapping", None)
    return OutputHead(head.weight, head.bias, float(softcap) if softcap else None)


def check_head_reproduces_logits(logits: torch.Tensor, hidden: torch.Tensor, head: OutputHead) -> None:
    """Refuse unless ``head(hidden)`` (with its softcap) equals the model's own logits."""
    with torch.no_grad():
        mine = torch.nn.functional.linear(hidden, head.weight, head.bias).float()
        if head.softcap is not None:
            mine = head.softcap * torch.tanh(mine / head.softcap)
        theirs = logits.float()
        tol = 1e-4 if logits.dtype == torch.float32 else 3e-2
        if mine.shape != theirs.shape or not torch.allclose(mine, theirs, rtol=tol, atol=tol * 10):
            worst = float((mine - theirs).abs().max()) if mine.shape == theirs.shape else float("nan")
            raise FusedLossRefusedError(
                "the model's logits are not its output head applied to its hidden states (max difference "
                f"{worst:.3g}): something transforms them (scaling, extra heads, a non-linear head). The fused "
                "path refuses rather than approximate; set train.loss.path: standard."
            )
