"""Build a family's model on the ``meta`` device: real module classes, no memory, no weights.

Used by ``ligerkit plan`` (and ``check``) to prove that the swaps reach the modules a model of
that family really instantiates, without a GPU and without downloading anything.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Any

from ligerkit.errors import ModelBuildError

# At most this many decoder layers: the classes are what the scan needs, not the depth.
PLAN_LAYERS = 2

_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_MAPPING_NAMES",
)


def default_config(model_type: str, layers: int = PLAN_LAYERS) -> Any:
    """transformers' default config for ``model_type`` with at most ``layers`` layers everywhere."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(model_type)
    except Exception as exc:
        raise ModelBuildError(
            f"transformers has no config class for {model_type!r} ({exc}); pass --model PATH to a local "
            "config.json instead."
        ) from exc
    _shrink(config, layers)
    return config


def _shrink(config: Any, layers: int) -> None:
    from transformers import PretrainedConfig

    for sub in [config, *(v for v in vars(config).values() if isinstance(v, PretrainedConfig))]:
        depth = getattr(sub, "num_hidden_layers", None)
        if isinstance(depth, int) and depth > layers:
            sub.num_hidden_layers = layers
            for key in ("layer_types", "mlp_layer_types"):
                value = getattr(sub, key, None)
                if isinstance(value, list) and len(value) == depth:
                    setattr(sub, key, value[:layers])


def model_class_for(config: Any) -> type:
    """The task model class for a config: causal LM, else image-text-to-text, else base model."""
    import transformers
    from transformers.models.auto import modeling_auto

    for mapping_name in _MAPPINGS:
        class_name = getattr(modeling_auto, mapping_name).get(config.model_type)
        cls = getattr(transformers, class_name, None) if class_name else None
        if cls is not None and isinstance(config, cls.config_class):
            return cls
    module = sys.modules.get(type(config).__module__.replace("configuration_", "modeling_"))
    if module is None:
        try:
            module = importlib.import_module(type(config).__module__.replace("configuration_", "modeling_"))
        except ImportError:
            module = None
    candidates = [
        v for v in vars(module).values()
        if isinstance(v, type) and getattr(v, "config_class", None) is type(config)
    ] if module else []
    for suffix in ("ForCausalLM", "ForConditionalGeneration", "Model"):
        for cls in candidates:
            if cls.__name__.endswith(suffix):
                return cls
    raise ModelBuildError(
        f"No transformers model class takes a {type(config).__name__} ({config.model_type!r})."
    )


def build_meta_model(config: Any) -> Any:
    """Instantiate the config's model class on the meta device (no memory, no weights)."""
    import torch

    cls = model_class_for(config)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            return cls._from_config(config)
    except Exception as exc:
        raise ModelBuildError(
            f"Could not build {cls.__name__} from the {config.model_type!r} config on the meta device "
            f"({type(exc).__name__}: {exc}). Pass --model PATH to a directory with a complete config.json."
        ) from exc


def load_local_config(path: str | os.PathLike[str], layers: int = PLAN_LAYERS) -> Any:
    """A local config, shrunk to ``layers`` layers for the meta build."""
    from ligerkit.kit.config import load_config

    config = load_config(path)
    _shrink(config, layers)
    return config
