"""Qwen3-VL recipe engine: official multimodal route, synthetic image + text batches.

Liger's ``qwen3_vl`` helper owns the rotary choice for this family (the text model's M-RoPE
builds cos/sin per 3-D position, Liger swaps the apply function and the vision rope); the recipe
never forces a standard-rope override. The engine only adds the image batches.
"""

from __future__ import annotations

from typing import Any

import torch

from ligerkit import LigerKernelKit
from ligerkit.train import RecipeEngine
from ligerkit.train.data.batches import multimodal_batch
from recipes.qwen3_vl.data import make_batch


class Qwen3VLEngine(RecipeEngine):
    """Official route (``model.family: qwen3_vl``); batches carry ``pixel_values``."""

    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """Liger's official Qwen3-VL route (text and vision) before the model exists, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.official_liger())
        return self.build_model(device)

    _hf_config: Any = None

    def model_config(self) -> Any:
        """The transformers Qwen3VLConfig the model is built from, every key checked (built once)."""
        if self._hf_config is None:
            self._hf_config = super().model_config()
        return self._hf_config

    def make_batch(self, start: int, size: int, vocab_size: int) -> dict[str, torch.Tensor]:
        """Samples ``start..start+size-1``: one synthetic image per sample, deterministic per index."""
        return multimodal_batch(make_batch, self.model_config(), self.config.data, self.config.seed, start, size,
                                self.config.model.dtype)
