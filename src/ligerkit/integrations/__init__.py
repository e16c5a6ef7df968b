"""The kit where users already train: a model loader, Hugging Face Trainer, TRL, any loop.

- :func:`load_model`: apply, build (``from_pretrained`` or ``from_config``), scan; the model carries
  ``model.ligerkit`` (kit, report, scan) and the kit stays applied until you revert it.
- :func:`token_loss`: the token-normalized causal-LM loss of a transformers model, fused (logits
  never built) or standard, for Accelerate and plain PyTorch loops.
- :class:`LigerKitCallback`, :class:`FusedLossTrainer`: Hugging Face Trainer (needs transformers).
- :class:`LigerKitSFTTrainer`: TRL's ``SFTTrainer`` with the fused loss (needs ``trl``).

Examples for each are in ``examples/``; ``docs/integrations.md`` walks through them.
"""

from __future__ import annotations

from typing import Any

from ligerkit.integrations.hf_loss import token_loss, unwrap
from ligerkit.integrations.model import LigerKitHandle, attach, kit_of, load_model

__all__ = ["FusedLossMixin", "FusedLossTrainer", "LigerKitCallback", "LigerKitHandle", "LigerKitSFTTrainer",
           "attach", "kit_of", "load_model", "refuse_trainer_liger", "token_loss", "unwrap"]

_LAZY = {"FusedLossMixin": "hf_trainer", "FusedLossTrainer": "hf_trainer", "LigerKitCallback": "hf_trainer",
         "refuse_trainer_liger": "hf_trainer", "LigerKitSFTTrainer": "trl"}


def __getattr__(name: str) -> Any:
    """Import the Trainer and TRL integrations on first use (TRL is an optional dependency)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"ligerkit.integrations.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ligerkit.integrations' has no attribute {name!r}")
