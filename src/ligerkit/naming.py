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


def stands_for(obj: object) -> object:
    """The function a hub-kernel wrapper stands for, else ``obj`` itself.

    Where the ``kernels`` package is installed (transformers requires it from 5.25 on), transformers binds
    some modeling functions, ``apply_rotary_pos_emb`` among them, as an instance of a ``Func`` module whose
    ``forward`` calls the function. ligerkit names, probes and caches such a binding as that function; a
    swap still replaces the binding itself, and revert puts that same instance back."""
    if isinstance(obj, type) or not hasattr(type(obj), "kernel_layer_name"):
        return obj
    forward = vars(type(obj)).get("forward")
    code, cells = getattr(forward, "__code__", None), getattr(forward, "__closure__", None) or ()
    if code is None or "func" not in code.co_freevars:
        return obj
    try:
        func = cells[code.co_freevars.index("func")].cell_contents
    except (IndexError, ValueError):  # an empty cell
        return obj
    return func if inspect.isfunction(func) else obj


def qualified_name(obj: object) -> str:
    """A readable dotted name for a class, function, partial or table entry (``module.Qualname``); a
    hub-kernel wrapper is named as the function it stands for (:func:`stands_for`)."""
    if obj is MISSING:
        return "<missing>"
    obj = stands_for(obj)
    if isinstance(obj, tuple) and obj and inspect.isclass(obj[0]):  # a table's (class, kwargs) entry
        return f"{qualified_name(obj[0])}{obj[1:]!r}"
    target = getattr(obj, "func", obj)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if name is None:
        return repr(obj)
    return f"{module}.{name}"

FALLBACKS = ("error", "custom")
"""What a kit does when a family's Liger helper fails (``model.liger_kernel.fallback``, ``--fallback``): raise
the helper's error (default), or apply ligerkit's proven map of the family instead (``ligerkit.kit.fallback``)."""
