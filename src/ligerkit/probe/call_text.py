"""How a recorded call is written down: where the model made it, and what it passes.

A call site is the first frame outside torch's module call, transformers' wrappers and ligerkit
(``file.py:line (Qualname)``); an argument is described by what a replacement could depend on: a
tensor by shape, strides and dtype, a plain value by itself, a config by its class and a digest of its
values; a module instance by its class, plain attributes and parameter shapes, submodules included.
Two calls with the same text compute alike for any replacement that reads only what the text holds.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ligerkit.naming import qualified_name

__all__ = ["bound_call", "describe", "instance_state", "is_plain", "site_of"]

_PLUMBING = [Path(torch.__file__).parent, Path(__file__).resolve().parents[1], Path(functools.__file__).parent]


def _transformers_plumbing() -> list[Path]:
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a dependency
        return []
    root = Path(transformers.__file__).parent
    return [root / "utils", root / "modeling_layers.py", root / "integrations"]


def _is_plumbing(filename: str) -> bool:
    path = Path(filename)
    return any(path == p or p in path.parents for p in _PLUMBING + _transformers_plumbing()) \
        or filename.startswith("<")


def site_of(frame: types.FrameType | None) -> str:
    """The first frame from ``frame`` outwards that is the model's own code (not torch's module call,
    transformers' wrappers or ligerkit), as ``file.py:line (Qualname)``."""
    while frame is not None and _is_plumbing(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{frame.f_lineno} ({getattr(code, 'co_qualname', code.co_name)})"


def describe(value: Any, depth: int = 0) -> str:
    """``value`` as text for a signature: a tensor by shape, strides and dtype; numbers, strings and
    ``None`` by value; containers item by item; a config by class and values; anything else by type."""
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}{value.dtype}".replace("torch.", "") + f"/stride{value.stride()}"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return repr(value)
    if depth > 3:
        return type(value).__name__
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(v, depth + 1) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in value.items()) + "}"
    if _is_config(value):
        from ligerkit.probe.top_model import config_fingerprint

        digest = hashlib.sha256(config_fingerprint(value).encode()).hexdigest()[:10]
        return f"{type(value).__name__}(#{digest})"
    if inspect.isclass(value) or inspect.isroutine(value) or isinstance(value, functools.partial):
        return qualified_name(value)
    return type(value).__qualname__


def _is_config(value: Any) -> bool:
    try:
        from transformers import PretrainedConfig
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, PretrainedConfig) or (type(value).__name__.endswith("Config")
                                                    and isinstance(getattr(value, "__dict__", None), dict))


def is_plain(value: Any) -> bool:
    """A value a signature holds as it is: ``None``, a bool, a number or a string."""
    return value is None or isinstance(value, (bool, int, float, str))


def instance_state(module: nn.Module) -> str:
    """What a module instance computes with, beyond its constructor: for it and every submodule, its
    class, its plain attributes (``eps``, ``offset``, a stored activation function) and its parameters'
    and buffers' shapes and dtypes."""
    parts = []
    for name, sub in module.named_modules():
        attrs = sorted((k, repr(v) if is_plain(v) else qualified_name(v)) for k, v in vars(sub).items()
                       if not k.startswith("_") and k != "training"
                       and (is_plain(v) or inspect.isroutine(v) or isinstance(v, functools.partial)))
        tensors = [(n, tuple(t.shape), str(t.dtype)) for n, t in
                   [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)] if t is not None]
        parts.append(f"{name or '.'}:{type(sub).__qualname__}{attrs}{tensors}")
    return "; ".join(parts)


def bound_call(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` for every argument of a call: named by ``signature`` where it binds, else by
    position (``#0``) and keyword."""
    if signature is not None:
        try:
            return list(signature.bind(*args, **kwargs).arguments.items())
        except TypeError:
            pass
    return [*((f"#{i}", v) for i, v in enumerate(args)), *kwargs.items()]
