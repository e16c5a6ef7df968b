"""The model kit: build a model from a config (random init) or a local checkpoint; never a hub.

The kit must have been applied before ``build_model`` runs; the engine takes care of the order.
"""

from __future__ import annotations

from typing import Any

import torch

from ligerkit.engine.config import ModelConfig
from ligerkit.errors import ModelBuildError
from ligerkit.hf import model_class_for


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 on an accelerator and float32 on the CPU (and on meta)."""
    if name == "auto":
        return torch.bfloat16 if device.type in ("cuda", "npu") else torch.float32
    return getattr(torch, name)


def transformers_config(model: ModelConfig) -> Any:
    """The transformers config for a ``source: config`` model, with the recipe's dimensions."""
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(model.family, **model.config)
    except Exception as exc:
        raise ModelBuildError(f"cannot make a {model.family!r} config from model.config: {exc}") from exc


class ModelKit:
    """Builds transformers models for ``source: config`` and ``source: pretrained``."""

    def build_model(self, model: ModelConfig, device: torch.device) -> torch.nn.Module:
        """Build (random init, or load a local checkpoint) directly on ``device``."""
        dtype = resolve_dtype(model.dtype, device)
        if model.source == "pretrained":
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(model.pretrained_path, local_files_only=True)
            cls = model_class_for(config)
            built = cls.from_pretrained(model.pretrained_path, local_files_only=True, dtype=dtype)
            return built.to(device)
        if model.source != "config":
            raise ModelBuildError(
                "source 'custom' models are built by the recipe's engine: override Engine.build_model"
            )
        cls = model_class_for(transformers_config(model))
        with torch.device(device):
            built = cls._from_config(transformers_config(model))
        return built.to(dtype)
