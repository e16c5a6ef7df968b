"""Deprecated: the recipe engine moved to :mod:`ligerkit.train` (importing this warns).

``Engine`` keeps the first layout's hooks working for recipes written against it:
``official_family()``, ``custom_patches()`` and ``probe_config()`` drive its ``prepare_model``, and
``engine.train()`` runs the :class:`~ligerkit.train.Trainer`. New recipes subclass
:class:`~ligerkit.train.RecipeEngine` and show their wiring in their own ``prepare_model``. Nothing in
ligerkit imports this module; it stays importable as the earlier contract for such recipes.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ligerkit.kit.custom import CustomPatches
from ligerkit.train import RecipeConfig, RecipeEngine, Trainer, TrainResult, load_engine, load_recipe

warnings.warn("ligerkit.engine is deprecated: subclass ligerkit.train.RecipeEngine and show the wiring in its own "
              "prepare_model (ligerkit.engine.Engine keeps the first layout's hooks working for now)",
              DeprecationWarning, stacklevel=2)

class Engine(RecipeEngine):
    """The first layout's recipe base class, on top of :class:`RecipeEngine`."""

    def official_family(self) -> str | None:
        """Family for the official route (``None``: no official call)."""
        lk = self.config.model.liger_kernel
        if lk.model_family_override:
            return lk.model_family_override
        return None if self.config.model.source == "custom" else self.config.model.family

    def custom_patches(self) -> CustomPatches | None:
        """The recipe's own ``custom_patches`` map (custom and composite recipes)."""
        return None

    def probe_config(self) -> Any:
        """The config the kit's probes build the custom map's source modules from."""
        return None

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """The official family (if any), then the recipe's custom map (if any), then the model."""
        if self.liger_enabled:
            family = self.official_family()
            if family is not None:
                self.liger_kit.apply(**self.official_liger(family))
            patches = self.custom_patches()
            if patches is not None:
                self.liger_kit.apply(**self.custom_liger(patches, self.probe_config()))
        return self.build_model(device)

    def train(self, device: torch.device | None = None) -> TrainResult:
        """Train with the :class:`~ligerkit.train.Trainer`."""
        return Trainer(self).train(device)


__all__ = ["Engine", "RecipeConfig", "RecipeEngine", "TrainResult", "Trainer", "load_engine", "load_recipe"]
