"""How ligerkit names the objects it swaps and probes, in reports, errors and JSON."""

from __future__ import annotations

import inspect

# The label value ignored by the loss: transformers' convention, shared by every recipe.
IGNORE_INDEX = -100
# Liger's loss kernels: they change how the loss is computed and normalized, so they stay off by default.
LOSS_MODULES: tuple[str, ...] = ("cross_entropy", "fused_linear_cross_entropy")


class _Missing:
    """Marker for "this name was not bound"."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def qualified_name(obj: object) -> str:
    """A readable dotted name for a class, function, partial or table entry (``module.Qualname``)."""
    if obj is MISSING:
        return "<missing>"
    if isinstance(obj, tuple) and obj and inspect.isclass(obj[0]):  # a table's (class, kwargs) entry
        return f"{qualified_name(obj[0])}{obj[1:]!r}"
    target = getattr(obj, "func", obj)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if name is None:
        return repr(obj)
    return f"{module}.{name}"
