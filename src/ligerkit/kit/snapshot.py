"""Before/after snapshots of the namespaces a route can touch.

Liger's helpers return nothing, so the kit never trusts what a flag *should* have done: it copies
the bindings of every namespace a route can reach (a modeling module's globals, the attribute
dicts of the classes defined there, process-wide modules such as ``torch.nn.functional``), runs
the route, and diffs by identity. Whatever the diff shows is what happened.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Iterable
from dataclasses import dataclass

# Process-wide namespaces Liger's helpers rebind (``nn.LayerNorm``, ``nn.CrossEntropyLoss``,
# ``nn.functional.cross_entropy``), watched on every official route.
PROCESS_WIDE_MODULES: tuple[str, ...] = (
    "torch.nn",
    "torch.nn.functional",
    "transformers.loss.loss_utils",
)

# Dunder names change for reasons unrelated to patching (``__warningregistry__``); these few
# are real behaviour and are watched.
_WATCHED_DUNDERS = frozenset({"__init__", "__call__", "__new__"})


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


def _watched(name: str) -> bool:
    return not (name.startswith("__") and name.endswith("__")) or name in _WATCHED_DUNDERS


def owner_label(owner: object, attr: str) -> tuple[str, str]:
    """Return ``(module, attr)`` strings naming a binding, ``Class.attr`` for class attributes."""
    if isinstance(owner, types.ModuleType):
        return owner.__name__, attr
    assert isinstance(owner, type)
    return owner.__module__, f"{owner.__qualname__}.{attr}"


def qualified_name(obj: object) -> str:
    """A readable dotted name for a patched object (class, function, partial, ...)."""
    if obj is MISSING:
        return "<missing>"
    target = getattr(obj, "func", obj)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if name is None:
        return repr(obj)
    return f"{module}.{name}"


def owners_of(modules: Iterable[types.ModuleType]) -> list[object]:
    """The modules plus every class defined in them (their attribute dicts are watched too)."""
    owners: list[object] = []
    for module in modules:
        owners.append(module)
        for value in list(vars(module).values()):
            if inspect.isclass(value) and value.__module__ == module.__name__:
                owners.append(value)
    return owners


def import_all(names: Iterable[str]) -> list[types.ModuleType]:
    """Import modules by dotted name, skipping names that do not exist in this install."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError:
            continue
    return modules


@dataclass(frozen=True)
class Change:
    """One binding whose object changed between two snapshots."""

    owner: object
    attr: str
    before: object
    after: object


class Snapshot:
    """The bindings of a fixed set of owners (modules and classes) at one moment."""

    def __init__(self, owners: Iterable[object]):
        self.owners: list[object] = list(dict.fromkeys(owners, None))
        self._values = [self._read(owner) for owner in self.owners]

    @staticmethod
    def _read(owner: object) -> dict[str, object]:
        return {k: v for k, v in list(vars(owner).items()) if _watched(k)}

    def changes(self) -> list[Change]:
        """Re-read the same owners and return every binding that now holds another object."""
        found = []
        for owner, before in zip(self.owners, self._values, strict=True):
            now = self._read(owner)
            for attr in [*before, *(k for k in now if k not in before)]:
                old, new = before.get(attr, MISSING), now.get(attr, MISSING)
                if old is not new:
                    found.append(Change(owner, attr, old, new))
        return found


def restore(owner: object, attr: str, value: object) -> None:
    """Put ``value`` back as ``owner.attr`` (``MISSING`` deletes the binding)."""
    if value is MISSING:
        delattr(owner, attr)
    else:
        setattr(owner, attr, value)


def current(owner: object, attr: str) -> object:
    """The object bound right now in ``owner``'s own namespace (not inherited)."""
    return vars(owner).get(attr, MISSING)
