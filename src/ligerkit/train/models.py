"""Building a recipe's model: from a transformers config (random init) or a local checkpoint, never a hub.

The kit must have been applied before any of these run; the recipe's ``prepare_model`` shows that
order, and the trainer observes it.
"""

from __future__ import annotations

from typing import Any

import torch

from ligerkit.errors import ModelBuildError
from ligerkit.hf import build_model
from ligerkit.train.config import ModelConfig
from ligerkit.train.config.checks import build_config, config_class_for


def resolve_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """``auto`` is bf16 on an accelerator and float32 on the CPU (and on meta); ``device`` is a device or
    its type (``"npu"`` names one even where this torch has no NPU backend)."""
    if name == "auto":
        return torch.bfloat16 if getattr(device, "type", device) in ("cuda", "npu") else torch.float32
    return getattr(torch, name)


def transformers_config(model: ModelConfig) -> Any:
    """The transformers config for a ``source: config`` model, with the recipe's dimensions (every key
    checked against the family's config class first)."""
    return build_config(config_class_for(model.family), dict(model.config))


def build_transformers_model(model: ModelConfig, device: torch.device) -> torch.nn.Module:
    """Build a transformers model (random init from ``model.config``, or a local checkpoint) on ``device``."""
    dtype = resolve_dtype(model.dtype, device)
    if model.source == "pretrained":
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model.pretrained_path, local_files_only=True)
        return build_model(config, path=model.pretrained_path, dtype=dtype).to(device)
    if model.source != "config":
        raise ModelBuildError("source 'custom' models are built by the recipe: override build_model in its engine")
    return build_model(transformers_config(model), device=device).to(dtype)


def disable_kv_cache(model: torch.nn.Module) -> None:
    """Set ``use_cache = False`` on every transformers config inside ``model``.

    transformers models default to building a key/value cache in every forward, training included:
    work and bookkeeping a training step never reads (and, under ``torch.compile``, a recompile when
    the cache's first layer fills).
    """
    for module in model.modules():
        config = getattr(module, "config", None)
        for cfg in (config, getattr(config, "text_config", None)):
            if getattr(cfg, "use_cache", False) is True:
                cfg.use_cache = False
