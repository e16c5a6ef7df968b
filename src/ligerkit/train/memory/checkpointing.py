"""Activation checkpointing per decoder layer: the layer's forward runs again in backward instead of
its activations being kept (``torch.utils.checkpoint``, non-reentrant).

The layer's ``forward`` is wrapped on the instance, so module paths, parameter names and checkpoints
stay exactly what they are without it; FSDP2's hooks stay outside the recomputed call and
``torch.compile`` traces the wrapper with the layer. The random state is restored for the recompute,
so dropout draws the same masks twice.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ligerkit.errors import LigerKitError

_MARK = "_ligerkit_recomputed"


def recompute_layers(model: nn.Module, units: Iterable[str]) -> list[str]:
    """Wrap, in place, the forward of every submodule whose class name is in ``units`` (the recipe's
    FSDP units: decoder and encoder layers) in non-reentrant activation checkpointing; return their
    module paths. A layer already wrapped is left as it is; no such layer is a :class:`LigerKitError`."""
    names = set(units)
    found = [(path, m) for path, m in model.named_modules() if type(m).__name__ in names]
    if not found:
        raise LigerKitError(
            f"train.activation_checkpointing recomputes each decoder layer, but {type(model).__name__} has none of "
            f"the recipe's layer classes ({', '.join(sorted(names)) or 'none declared'}); declare them in the "
            "engine's fsdp_units, or set train.activation_checkpointing: false")
    for _, layer in found:
        if not getattr(layer, _MARK, False):
            layer.forward = _recomputed(layer.forward)
            setattr(layer, _MARK, True)
    return [path for path, _ in found]


def _recomputed(forward: Any) -> Any:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # nothing would be kept anyway
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


def is_recomputed(layer: nn.Module) -> bool:
    """Whether :func:`recompute_layers` wrapped ``layer``."""
    return bool(getattr(layer, _MARK, False))
