"""TRL: ``SFTTrainer`` with the kit-built model and ``ligerkit``'s fused loss.

TRL 1.16's ``SFTTrainer`` rebinds the model's ``forward`` for its own chunked LM head
(``add_fused_lm_head``); the kit's first-forward guard reports that wrapper in the scan
(``model.ligerkit.scan.wrappers``) rather than refusing it. ``use_liger_kernel=True`` is refused (TRL
deprecates it, and it would run Liger's helper again over the kit's swaps). :class:`LigerKitSFTTrainer`
trains with ``ligerkit``'s fused loss instead of TRL's head, through ``compute_loss`` (TRL 1.16
deprecates ``compute_loss_func``); it computes the loss only, so TRL's entropy and token-accuracy
metrics (which need the logits) are not logged. TRL's ``num_tokens`` is: the tokens are counted on the
device and read once per log, not once per micro-batch as TRL does. A model with a router (MoE)
auxiliary loss is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import SFTTrainer

from ligerkit.errors import TrainerConflictError
from ligerkit.integrations.hf_trainer import FusedLossMixin


class LigerKitSFTTrainer(FusedLossMixin, SFTTrainer):
    """``trl.SFTTrainer`` whose loss is ``ligerkit``'s fused loss (TRL's own loss, logits never built)."""

    def __init__(self, *args: Any, **kwargs: Any):
        model = kwargs.get("model", args[0] if args else None)
        config = getattr(model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(text, "output_router_logits", False):
            raise TrainerConflictError("this model adds a router auxiliary loss (output_router_logits), which the "
                                       "fused loss does not compute: train it with SFTTrainer's own loss")
        super().__init__(*args, **kwargs)
        self._ligerkit_tokens: torch.Tensor | None = None  # trained tokens since the last log, on the device

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: torch.Tensor | int | None = None) -> Any:
        """The fused loss (:class:`FusedLossMixin`), and TRL's count of the tokens trained."""
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if model.training:
            if "attention_mask" in inputs:  # as SFTTrainer counts: the attended tokens, or the packed length
                count = inputs["attention_mask"].sum()
            elif "position_ids" in inputs:
                count = torch.tensor(inputs["position_ids"].size(1), device=inputs["position_ids"].device)
            else:
                raise TrainerConflictError("SFTTrainer counts the tokens of a batch from its attention_mask or "
                                           "position_ids, and this batch has neither: " + ", ".join(sorted(inputs)))
            held = self._ligerkit_tokens
            self._ligerkit_tokens = count.detach() if held is None else held + count.detach()
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's ``num_tokens``: the tokens counted since the last log, summed over processes (every
        process logs at the same step), read to the host here, once."""
        if self._ligerkit_tokens is not None and self.model.training:
            total = self.accelerator.gather_for_metrics(self._ligerkit_tokens.reshape(1)).sum().item()
            self._total_train_tokens += int(total) // self._tp_size
            self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            self._ligerkit_tokens = None
        super().log(logs, start_time)
