"""The token-normalized causal-LM loss of a transformers model, fused or standard, for any loop.

``token_loss(model, batch, num_valid_tokens)`` is ``sum of cross entropy over the shifted labels /
num_valid_tokens``: what transformers' own causal-LM loss computes when it is given
``num_items_in_batch``. The fused loss never builds the logits: the model is called (through any
wrapper: DDP, FSDP2, accelerate, TRL's rebound forward) with ``logits_to_keep=1``, a forward hook
on its backbone keeps the final hidden states, and ``ligerkit.loss.fused_linear_token_loss`` takes
them with the output head, a chunk of rows at a time. The one logit row the model still computes per
sequence checks, on the first call, that the head reproduces the model's own logits.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch
from torch import nn

from ligerkit.errors import InvalidOptionError
from ligerkit.loss import FusedLossRefusedError, fused_linear_token_loss, output_head, token_loss_sum, valid_tokens
from ligerkit.loss.wiring import check_head_reproduces_logits

_CHECKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models whose head matched their logits


def unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside DDP (``.module``), ``torch.compile`` (``._orig_mod``) and PEFT."""
    seen: set[int] = set()
    while id(model) not in seen:
        seen.add(id(model))
        if hasattr(model, "get_base_model") and callable(model.get_base_model):
            model = model.get_base_model()
        elif isinstance(getattr(model, "module", None), nn.Module):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
    return model


def token_loss(model: nn.Module, batch: dict[str, Any], num_valid_tokens: float | torch.Tensor | None = None, *,
               path: str = "fused", chunk_tokens: int | None = None) -> torch.Tensor:
    """The causal-LM loss of ``batch`` (its ``labels`` shifted inside), divided by ``num_valid_tokens``.

    Args:
        model: the model as the loop calls it (wrapped or not).
        batch: the model's inputs with ``labels`` (``-100`` where a token does not count).
        num_valid_tokens: the count to divide by: for gradient accumulation, the valid labels of the
            whole optimizer step (Trainer's ``num_items_in_batch``), divided by the number of
            processes when gradients are averaged across them; default: this batch's own count.
        path: ``fused`` (never builds the logits) or ``standard`` (the model's full logits).
        chunk_tokens: rows of logits that exist at once with the fused loss.
    """
    if "labels" not in batch:
        raise InvalidOptionError("token_loss needs batch['labels'] (token ids, -100 where a token does not count)")
    labels = batch["labels"]
    count = float(valid_tokens(labels) if num_valid_tokens is None else num_valid_tokens)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    if path == "standard":
        logits = model(**inputs).logits
        return token_loss_sum(logits, labels) / max(count, 1.0)
    if path != "fused":
        raise InvalidOptionError(f"unknown loss path {path!r}; use 'fused' or 'standard'")
    core = unwrap(model)
    head = output_head(core)
    hidden, logits = _hidden_states(model, core, inputs)
    if core not in _CHECKED:
        try:
            check_head_reproduces_logits(logits[:, -1:], hidden[:, -1:].detach(), head)
        except FusedLossRefusedError as exc:
            raise FusedLossRefusedError(f"{exc} (outside a recipe: path='standard', or the trainer's own "
                                        "loss)") from None
        _CHECKED.add(core)
    return fused_linear_token_loss(hidden, head.weight, labels.to(hidden.device), count, head.bias,
                                   softcap=head.softcap, chunk_tokens=chunk_tokens)


def _hidden_states(model: nn.Module, core: nn.Module, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Call ``model`` for one logit row per sequence; return the backbone's final hidden states and that row."""
    if "logits_to_keep" not in inspect.signature(type(core).forward).parameters:
        raise FusedLossRefusedError(
            f"{type(core).__name__}.forward takes no logits_to_keep, so the fused loss cannot stop it from building "
            "every logit; use path='standard' for this model"
        )
    backbone = getattr(core, "base_model", None)
    if not isinstance(backbone, nn.Module) or backbone is core:
        raise FusedLossRefusedError(f"{type(core).__name__} has no separate backbone (base_model) whose hidden states "
                                    "the fused loss could take; use path='standard' for this model")
    seen: list[torch.Tensor] = []

    def keep(module: nn.Module, args: Any, output: Any) -> None:
        hidden = getattr(output, "last_hidden_state", None)
        seen.append(hidden if hidden is not None else output[0])

    handle = backbone.register_forward_hook(keep)
    try:
        out = model(**inputs, logits_to_keep=1)
    finally:
        handle.remove()
    if len(seen) != 1:
        raise FusedLossRefusedError(f"the backbone of {type(core).__name__} ran {len(seen)} times in one forward; the "
                                    "fused loss needs exactly one run: use path='standard' for this model")
    return seen[0], out.logits
