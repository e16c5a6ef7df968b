"""The engine of a recipe whose model is its own (``model.source: custom``): the plumbing written once.

A custom-model recipe names its config class and its model class; this base reads ``model.config`` as
that config class (every key checked), builds the model from it on the device in ``model.dtype``, and
gives the fused loss the decoder's hidden states (``model.model``, the usual causal-LM layout). What the
requirement asks of the recipe stays in the recipe: its own ``prepare_model``, which calls
``self.liger_kit.apply(...)`` with its map and then ``self.build_model(...)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from ligerkit.train.config.checks import build_config
from ligerkit.train.models import resolve_dtype
from ligerkit.train.recipe.engine import RecipeEngine


class CustomModelEngine(RecipeEngine):
    """A :class:`~ligerkit.train.recipe.engine.RecipeEngine` for a model of the recipe's own: set
    ``config_class`` and ``model_class``, and write ``prepare_model``."""

    config_class: ClassVar[type]
    model_class: ClassVar[type[nn.Module]]

    def model_config(self) -> Any:
        """``model.config`` as the recipe's own config class (every key checked)."""
        return build_config(self.config_class, self.config.model.config)

    def build_model(self, device: torch.device) -> nn.Module:
        """Build on ``device`` from ``model.config``, in ``model.dtype``."""
        with torch.device(device):
            model = self.model_class(self.model_config())
        return model.to(resolve_dtype(self.config.model.dtype, device))

    def forward_hidden(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's final hidden states, before ``lm_head`` (the fused loss)."""
        return model.model(batch["input_ids"], attention_mask=batch.get("attention_mask"))
