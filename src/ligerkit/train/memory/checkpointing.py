"""Activation checkpointing per decoder layer: the layer's forward runs again in backward instead of
its activations being kept (``torch.utils.checkpoint``, non-reentrant).

The layer's ``forward`` is wrapped on the instance, so module paths, parameter names and checkpoints
stay exactly what they are without it; FSDP2's hooks stay outside the recomputed call and
``torch.compile`` traces the wrapper with the layer. The random state is restored for the recompute,
so dropout draws the same masks twice. With a :class:`~ligerkit.train.memory.offload.HostOffload`
(``train.activation_checkpointing: offload``) the one input each layer keeps lives in host memory
until backward; a layer given its hidden states by keyword gets them positionally, the form
checkpointing saves.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ligerkit.errors import LigerKitError
from ligerkit.train.memory.offload import HostOffload

_MARK = "_ligerkit_recomputed"


def recompute_layers(model: nn.Module, units: Iterable[str], offload: HostOffload | None = None) -> list[str]:
    """Wrap, in place, the forward of every submodule whose class name is in ``units`` (the recipe's
    FSDP units: decoder and encoder layers) in non-reentrant activation checkpointing, its kept input
    in host memory through ``offload`` when one is given; return their module paths. A layer already
    wrapped is left as it is; no such layer is a :class:`LigerKitError`."""
    names = set(units)
    found = [(path, m) for path, m in model.named_modules() if type(m).__name__ in names]
    if not found:
        raise LigerKitError(
            f"train.activation_checkpointing recomputes each decoder layer, but {type(model).__name__} has none of "
            f"the recipe's layer classes ({', '.join(sorted(names)) or 'none declared'}); declare them in the "
            "engine's fsdp_units, or set train.activation_checkpointing: false")
    for _, layer in found:
        if not getattr(layer, _MARK, False):
            layer.forward = _recomputed(layer.forward, offload)
            setattr(layer, _MARK, True)
    return [path for path, _ in found]


def _recomputed(forward: Any, offload: HostOffload | None) -> Any:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # nothing would be kept anyway
            return forward(*args, **kwargs)
        if offload is None:
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        if not args and isinstance(kwargs.get("hidden_states"), torch.Tensor):  # saved only when positional
            hidden = kwargs.pop("hidden_states")
            return _offloaded(_by_keyword(forward), offload, (hidden,), kwargs)
        return _offloaded(forward, offload, args, kwargs)
    return run


def _by_keyword(forward: Any) -> Any:
    return lambda hidden_states, **kwargs: forward(hidden_states=hidden_states, **kwargs)


def _offloaded(forward: Any, offload: HostOffload, args: tuple, kwargs: dict) -> Any:
    with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def is_recomputed(layer: nn.Module) -> bool:
    """Whether :func:`recompute_layers` wrapped ``layer``."""
    return bool(getattr(layer, _MARK, False))
