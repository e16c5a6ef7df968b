"""Qwen3 recipe engine: the official route, in two visible lines.

The family comes from the config (``model.family: qwen3``); Liger's own helper decides the module
defaults (``modules: auto``) and the kit keeps the loss kernels off.
"""

from __future__ import annotations

import torch

from ligerkit import LigerKernelKit
from ligerkit.train import RecipeEngine


class Qwen3Engine(RecipeEngine):
    """Official route: Liger's Qwen3 helper through the kit, then transformers' Qwen3."""

    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """Liger's official Qwen3 route before the model exists, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.official_liger())
        return self.build_model(device)
