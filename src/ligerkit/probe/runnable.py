"""A small model a modeling module really builds, with inputs it runs on, for model-level probes.

A symbol's math can be probed alone, but how its output is *used* (added straight to the residual,
read again after a rotary wrote over it) shows only in the model around it. This module builds the
smallest model of a modeling module that instantiates a given class (or calls a given function):
the module's own model classes, from the config (shrunk to one or two layers when it allows),
float32 on the CPU, and finds inputs its forward accepts (token ids, hidden states or pixels).
"""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ligerkit.hf import config_class_of, quiet_transformers, small_config, smaller_copies, text_config

BATCH, SEQ = 2, 8
MAX_PARAMETERS = 20_000_000  # a probe model larger than this is not built (counted on the meta device)
_PREFERRED = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model", "Encoder", "Transformer",
              "DecoderLayer", "EncoderLayer", "Layer", "Block")


class Unrunnable(Exception):
    """No model of the module could be built and run with the inputs tried."""


@dataclass
class Runnable:
    """A built model, the inputs its forward takes, and a scalar loss over its output."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    config: Any = None

    def loss(self) -> torch.Tensor:
        """A scalar with a non-trivial gradient for every parameter that reaches the output: a fixed
        random projection of the output (the same on every device)."""
        out = first_tensor(self.model(*self.args, **self.kwargs))
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.device)
        return (out.float() * weights).sum()


def first_tensor(out: Any) -> torch.Tensor:
    """The main tensor of a model output: logits, last hidden state, or the first tensor found."""
    if isinstance(out, torch.Tensor):
        return out
    for name in ("logits", "last_hidden_state"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return value
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for value in items:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
    raise Unrunnable(f"the model returned {type(out).__name__}, with no tensor to take a loss of")


def module_config(module: types.ModuleType, config: Any) -> Any:
    """``config``, else the module's own config class at small dimensions, else ``None``."""
    if config is not None:
        return config
    cls = config_class_of(module)
    if cls is None:
        return None
    try:
        return small_config(cls)
    except ValueError:
        return None


def _model_classes(module: types.ModuleType) -> list[type]:
    classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, nn.Module)
               and v.__module__ == module.__name__]

    def rank(cls: type) -> int:
        return next((i for i, suffix in enumerate(_PREFERRED) if cls.__name__.endswith(suffix)), len(_PREFERRED))

    return sorted(classes, key=rank)


def build_model_class(cls: type, config: Any) -> nn.Module:
    """``cls`` built from ``config`` the way the probes build it (float32, seeded); raises
    :class:`Unrunnable` when it does not build."""
    model = _build(cls, config)
    if model is None:
        raise Unrunnable(f"{cls.__name__} does not build from this config")
    return model


def _build(cls: type, config: Any) -> nn.Module | None:
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    extra = {"layer_idx": 0} if required[1:] == ["layer_idx"] else {}  # a decoder layer: the first one
    if len(required) != 1 + len(extra):
        return None

    def make() -> nn.Module:
        with warnings.catch_warnings(), quiet_transformers():
            warnings.simplefilter("ignore")
            if hasattr(cls, "_from_config") and hasattr(cls, "config_class"):
                return cls._from_config(config, dtype=torch.float32)
            return cls(config, **extra).float()

    try:
        with torch.device("meta"):
            size = sum(p.numel() for p in make().parameters())
        if size > MAX_PARAMETERS:
            return None
        torch.manual_seed(0)
        return make()
    except Exception:
        return None


def _layer_kwargs(module: types.ModuleType, config: Any, model: nn.Module, hidden: torch.Tensor) -> dict[str, Any]:
    """What a decoder layer's forward needs besides the hidden states: the module's own rotary
    embedding (cos, sin), position ids, no mask."""
    accepted = inspect.signature(model.forward).parameters
    kwargs: dict[str, Any] = {}
    positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
    if "position_ids" in accepted:
        kwargs["position_ids"] = positions
    if "position_embeddings" in accepted:
        rotary = next((v for n, v in vars(module).items() if n.endswith("RotaryEmbedding") and isinstance(v, type)
                       and v.__module__ == module.__name__), None)
        if rotary is None:
            return {}
        with quiet_transformers():
            kwargs["position_embeddings"] = rotary(config)(hidden, positions)
    return kwargs


def _input_candidates(config: Any, module: types.ModuleType, model: nn.Module) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    g = torch.Generator().manual_seed(11)
    text = text_config(config)
    found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    vocab = getattr(text, "vocab_size", None)
    if isinstance(vocab, int) and vocab > 3:
        ids = torch.randint(3, vocab, (BATCH, SEQ), generator=g)
        found += [((), {"input_ids": ids}), ((ids,), {})]
        if "decoder_input_ids" in inspect.signature(model.forward).parameters:  # encoder-decoder
            found.append(((), {"input_ids": ids, "decoder_input_ids": ids.flip(-1)}))
    width = getattr(text, "hidden_size", None) or getattr(config, "hidden_size", None)
    if isinstance(width, int):
        hidden = torch.randn(BATCH, SEQ, width, generator=g)
        found.append(((hidden,), {}))
        try:
            layer = _layer_kwargs(module, config, model, hidden)
        except Exception:  # the module's rotary embedding does not build from this config
            layer = {}
        if layer:
            found.append(((hidden,), layer))
    size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", 3)
    if isinstance(size, int) and isinstance(channels, int):
        pixels = torch.randn(BATCH, channels, size, size, generator=g)
        found += [((), {"pixel_values": pixels}), ((pixels,), {})]
    return found


Watch = Callable[[nn.Module], AbstractContextManager[Callable[[], bool]]]


def runnable_model(module: types.ModuleType, config: Any, watch: Watch) -> Runnable:
    """The cheapest model of ``module`` that runs and exercises what the caller probes.

    ``with watch(model) as used:`` wraps each trial forward; ``used()`` then says whether the model
    used what the caller probes (called an instance of a class, called a function). Raises
    :class:`Unrunnable` with what was tried.
    """
    config = module_config(module, config)
    if config is None:
        raise Unrunnable(f"no config to build {module.__name__}'s models from (pass config=)")
    tried: list[str] = []
    for cfg in smaller_copies(config):
        for cls in _model_classes(module):
            model = _build(cls, cfg)
            if model is None:
                continue
            model.train()
            for args, kwargs in _input_candidates(cfg, module, model):
                candidate = Runnable(model, args, kwargs, cfg)
                with watch(model) as used:
                    try:
                        with torch.no_grad():
                            candidate.loss()
                    except Exception:
                        continue
                    ok = used()
                if ok:
                    return candidate
                tried.append(f"{cls.__name__} runs but never uses it")
                break
    detail = "; ".join(dict.fromkeys(tried)) or "no model class of the module builds from the config and runs"
    raise Unrunnable(f"{module.__name__}: {detail}")
