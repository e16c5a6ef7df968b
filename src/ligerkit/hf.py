"""Neutral helpers over transformers: configs, model classes, small and meta-device builds.

Every layer above (probes, the kit, the loss, the trainer) reads configs and finds model classes
through this module, so none of them reaches into another for it. Nothing here downloads: paths
are local, and ``local_files_only`` is always set.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import typing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from ligerkit.errors import FamilyResolutionError, ModelBuildError

# At most this many decoder layers in a meta build: the classes are what a scan needs, not depth.
PLAN_LAYERS = 2
# Dimensions of the small configs probes and detectors build real (CPU) models from.
SMALL_DIMS: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=256)

_MODEL_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "Model")
_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_MAPPING_NAMES",
)


def load_config(model_name_or_path: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """Load the transformers config at a local path (or already in the local cache), offline."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            str(model_name_or_path), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as exc:
        raise FamilyResolutionError(
            f"Could not read a model config at {str(model_name_or_path)!r} ({type(exc).__name__}: "
            f"{exc}). ligerkit never downloads: point model_name_or_path at a local directory with a "
            "config.json, or pass model_family= explicitly."
        ) from exc


def family_of(model_name_or_path: str | os.PathLike[str], trust_remote_code: bool = False) -> str:
    """The ``model_type`` of the model at ``model_name_or_path``.

    A local ``config.json`` is read as JSON first (no code runs); only a path that is not a local
    directory goes through ``AutoConfig`` with ``local_files_only=True``.
    """
    path = Path(model_name_or_path)
    config_file = path / "config.json" if path.is_dir() else path
    if config_file.is_file():
        try:
            data = json.loads(config_file.read_text())
        except (OSError, ValueError) as exc:
            raise FamilyResolutionError(f"{config_file} is not a readable JSON config: {exc}") from exc
        if not isinstance(data, dict):
            raise FamilyResolutionError(
                f"{config_file} holds a JSON {type(data).__name__}, not an object with a 'model_type'; "
                "point at a transformers config.json, or pass model_family= explicitly."
            )
        model_type = data.get("model_type")
        if not isinstance(model_type, str) or not model_type:
            raise FamilyResolutionError(
                f"{config_file} has no 'model_type' string; pass model_family= explicitly."
            )
        return model_type
    return str(load_config(model_name_or_path, trust_remote_code).model_type)


def text_config(config: Any) -> Any:
    """The language model's part of a config: transformers' ``get_text_config()``, a ``text`` field
    (composite configs), or the config itself."""
    getter = getattr(config, "get_text_config", None)
    if callable(getter):
        return getter()
    return getattr(config, "text", config)


def shrink_layers(config: Any, layers: int = PLAN_LAYERS) -> None:
    """Cut every (sub)config to at most ``layers`` layers, in place (per-layer lists too)."""
    from transformers import PretrainedConfig

    for sub in [config, *(v for v in vars(config).values() if isinstance(v, PretrainedConfig))]:
        depth = getattr(sub, "num_hidden_layers", None)
        if isinstance(depth, int) and depth > layers:
            sub.num_hidden_layers = layers
            for key in ("layer_types", "mlp_layer_types"):
                value = getattr(sub, key, None)
                if isinstance(value, list) and len(value) == depth:
                    setattr(sub, key, value[:layers])


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
    shrink_layers(config, layers)
    return config


def load_local_config(path: str | os.PathLike[str], layers: int = PLAN_LAYERS) -> Any:
    """A local config, shrunk to ``layers`` layers for the meta build."""
    config = load_config(path)
    shrink_layers(config, layers)
    return config


def small_config(cls: type, overrides: dict[str, Any] | None = None) -> Any:
    """``cls`` at small dimensions (:data:`SMALL_DIMS`), falling back to fewer of them if it objects.

    Raises ``ValueError`` with the last constructor error when no attempt builds.
    """
    overrides = dict(overrides or {})
    fields = inspect.signature(cls).parameters
    attempts = [
        {**SMALL_DIMS, **overrides},
        {k: v for k, v in {**SMALL_DIMS, **overrides}.items() if k in fields or k in overrides},
        {**{k: v for k, v in SMALL_DIMS.items() if k != "num_key_value_heads"}, **overrides},
        dict(overrides),
    ]
    error: Exception | None = None
    for kwargs in attempts:
        try:
            with quiet_transformers():  # special token ids of the full vocabulary fall outside the small one
                config = cls(**kwargs)
        except Exception as exc:  # config validators reject some combinations; try the next
            error = exc
            continue
        pad = getattr(config, "pad_token_id", None)
        if isinstance(pad, int) and pad >= SMALL_DIMS["vocab_size"] and "pad_token_id" not in overrides:
            config.pad_token_id = 0  # keep the padding index inside the small vocabulary
        return config
    raise ValueError(f"cannot build {cls.__name__} with small dimensions: {error}")


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings off for the block (small probe configs trip its vocabulary checks)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def config_class_of(module: Any) -> type | None:
    """The config class a modeling module's model classes declare (``XForCausalLM.config_class``)."""
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    for suffix in ("ForCausalLM", "ForConditionalGeneration", "Model"):
        for cls in classes:
            config_class = getattr(cls, "config_class", None)
            if cls.__name__.endswith(suffix) and isinstance(config_class, type):
                return config_class
    return None


def config_class_for(module: Any) -> type | None:
    """The config class the module's models take: their ``config_class``, else the class their constructors'
    ``config`` argument is annotated with, else the one ``PretrainedConfig`` subclass the module holds."""
    cls = config_class_of(module)
    if cls is not None:
        return cls
    own = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    own.sort(key=lambda c: next((i for i, end in enumerate(_MODEL_SUFFIXES) if c.__name__.endswith(end)), 9))
    for candidate in own:
        annotated = _config_annotation(candidate, module)
        if annotated is not None:
            return annotated
    from transformers import PretrainedConfig

    held = {v for v in vars(module).values() if isinstance(v, type) and issubclass(v, PretrainedConfig)
            and v is not PretrainedConfig}
    return held.pop() if len(held) == 1 else None


def _config_annotation(cls: type, module: Any) -> type | None:
    """The class ``cls.__init__``'s ``config`` argument is annotated with (``X``, ``"X"`` or ``X | None``)."""
    init = vars(cls).get("__init__")
    if init is None or "config" not in inspect.signature(init).parameters:
        return None
    try:
        hint = typing.get_type_hints(init, globalns=vars(module)).get("config")
    except Exception:  # an annotation that does not resolve here
        return None
    options = [hint] if isinstance(hint, type) else list(typing.get_args(hint))
    found = [t for t in options if isinstance(t, type) and t is not type(None)
             and t.__name__ not in ("PretrainedConfig", "PreTrainedConfig")]
    return found[0] if len(found) == 1 else None


def model_class_for(config: Any) -> type:
    """The task model class for a config: causal LM, else image-text-to-text, else base model."""
    import transformers
    from transformers.models.auto import modeling_auto

    for mapping_name in _MAPPINGS:
        class_name = getattr(modeling_auto, mapping_name).get(config.model_type)
        cls = getattr(transformers, class_name, None) if class_name else None
        if cls is not None and isinstance(config, cls.config_class):
            return cls
    module_name = type(config).__module__.replace("configuration_", "modeling_")
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
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


def build_model(config: Any, cls: type | None = None, *, path: str | os.PathLike[str] | None = None,
                dtype: Any = None, device: Any = None, quiet: bool = False,
                from_pretrained: dict[str, Any] | None = None) -> Any:
    """The one model build, which every other builds through: ``cls`` (default :func:`model_class_for`)
    from ``config``.

    With ``path``, the local checkpoint there with its weights (``from_pretrained``, never a download,
    with the keywords of the ``from_pretrained`` mapping, transformers' hub kernels off unless it names
    ``use_kernels``: :func:`hub_kernels_off`); else randomly initialized from ``config``
    (``cls._from_config`` for a transformers class, ``cls(config)`` for any other module class). In
    ``dtype`` where given, created under ``torch.device(device)`` where given (``"meta"``: no memory, no
    weights); ``quiet`` silences Python's and transformers' warnings. Whatever the build raises is raised
    as it is.
    """
    import torch

    cls = cls if cls is not None else model_class_for(config)
    with (warnings.catch_warnings() if quiet else nullcontext(), quiet_transformers() if quiet else nullcontext(),
          torch.device(device) if device is not None else nullcontext()):
        if quiet:
            warnings.simplefilter("ignore")
        if path is not None:
            return cls.from_pretrained(str(path), config=config, local_files_only=True, dtype=dtype,
                                       **{**hub_kernels_off(cls), **(from_pretrained or {})})
        if not (hasattr(cls, "_from_config") and hasattr(cls, "config_class")):  # a plain nn.Module class
            model = cls(config)
            return model.to(dtype) if dtype is not None else model
        return cls._from_config(config, dtype=dtype) if dtype is not None else cls._from_config(config)


def has_hub_kernels_switch(cls: type) -> bool:
    """Whether ``cls`` is a transformers model class with the hub-kernels switch (``use_kernels``)."""
    return hasattr(cls, "set_use_kernels")


def hub_kernels_off(cls: type) -> dict[str, Any]:
    """``{"use_kernels": False}`` for a class with the switch (:func:`has_hub_kernels_switch`), else ``{}``.
    From transformers 5.25, ``from_pretrained`` turns hub kernels on by default (with ``kernels`` installed),
    and they replace forwards when the model is set to train or eval on a GPU: ligerkit's builds keep them
    off, so a model computes what the kit's swaps and proofs assume (the scan refuses one with them on)."""
    return {"use_kernels": False} if has_hub_kernels_switch(cls) else {}


def build_meta_model(config: Any) -> Any:
    """Instantiate the config's model class on the meta device (no memory, no weights)."""
    cls = model_class_for(config)
    try:
        return build_model(config, cls, device="meta", quiet=True)
    except Exception as exc:
        raise ModelBuildError(
            f"Could not build {cls.__name__} from the {config.model_type!r} config on the meta device "
            f"({type(exc).__name__}: {exc}). Pass --model PATH to a directory with a complete config.json."
        ) from exc


def hidden_width(config: Any) -> int | None:
    """The language model's hidden size (``hidden_size`` of :func:`text_config`), or ``None``."""
    width = getattr(text_config(config), "hidden_size", None) if config is not None else None
    return width if isinstance(width, int) and width > 0 else None
