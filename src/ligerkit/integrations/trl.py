"""TRL: ``SFTTrainer`` with the kit-built model and ``ligerkit``'s fused loss.

TRL 1.16's ``SFTTrainer`` rebinds the model's ``forward`` for its own chunked LM head
(``add_fused_lm_head``); the kit's first-forward guard reports that wrapper in the scan
(``model.ligerkit.scan.wrappers``) rather than refusing it. ``use_liger_kernel=True`` is refused (TRL
deprecates it, and it would run Liger's helper again over the kit's swaps). :class:`LigerKitSFTTrainer`
trains with ``ligerkit``'s fused loss instead of TRL's head, through ``compute_loss`` (TRL 1.16
deprecates ``compute_loss_func``); it computes the loss only, so TRL's entropy and token-accuracy
metrics are not logged. A model with a router (MoE) auxiliary loss is refused.
"""

from __future__ import annotations

from typing import Any

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
