"""The symbols of a modeling module that a Liger replacement may stand for: norms and MLPs (classes, by
name), rotary functions (by name). ``suggest`` probes them; the call-site proof records their calls
in one run of the whole model (``calls.py``)."""

from __future__ import annotations

import inspect
import re
import types

from torch import nn

from ligerkit.naming import stands_for

__all__ = ["discover"]

_NORM = re.compile(r"Norm$")
_MLP = re.compile(r"(MLP|FeedForward|FFN)$")
_ROPE = re.compile(r"^apply_(multimodal_)?rotary_pos_emb$")


def discover(module: types.ModuleType) -> list[tuple[str, object, str]]:
    """Candidate symbols: norms and MLPs by name or behaviour, rotary functions by name (a hub-kernel
    wrapper of one as its binding, :func:`~ligerkit.naming.stands_for`)."""
    found = []
    for name, obj in vars(module).items():
        if isinstance(obj, type) and obj.__module__ == module.__name__ and issubclass(obj, nn.Module):
            if getattr(obj, "_supports_sdpa", None) is not None or hasattr(obj, "config_class"):
                continue  # PreTrainedModel classes
            if _NORM.search(name):
                found.append((name, obj, "norm"))
            elif _MLP.search(name):
                found.append((name, obj, "mlp"))
        elif (inspect.isfunction(fn := stands_for(obj)) and fn.__module__ == module.__name__
              and _ROPE.match(name)):
            found.append((name, obj, "rope"))
    return found
