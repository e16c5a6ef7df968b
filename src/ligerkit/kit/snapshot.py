"""Before/after snapshots of the namespaces a route can touch, tables of classes included.

Liger's helpers return nothing, so the kit never trusts what a flag *should* have done: it copies
the bindings of every namespace a route can reach (a modeling module's globals, the attribute
dicts of the classes defined there, process-wide modules such as ``torch.nn.functional``, and the
tables of classes or functions those modules hold, such as ``ACT2FN`` or a model's ``NORM2FN``),
runs the route, and diffs by identity. Whatever the diff shows is what happened.

A route undoes from its snapshot whatever is raised (``KeyboardInterrupt`` included):
:meth:`Snapshot.undo` re-reads and puts back every changed binding, so it may run again after an
interrupt stopped it half-way.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import sys
import types
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass

from ligerkit.naming import MISSING

# Process-wide namespaces Liger's helpers rebind (``nn.LayerNorm``, ``nn.CrossEntropyLoss``,
# ``nn.functional.cross_entropy``, ``ACT2FN["relu2"]``), watched on every official route.
PROCESS_WIDE_MODULES: tuple[str, ...] = (
    "torch.nn",
    "torch.nn.functional",
    "transformers.loss.loss_utils",
    "transformers.activations",
)

# Dunder names change for reasons unrelated to patching (``__warningregistry__``); these few
# are real behaviour and are watched.
_WATCHED_DUNDERS = frozenset({"__init__", "__call__", "__new__"})


class Table:
    """A module-level mapping of names to classes or functions (``ACT2FN``, ``NORM2FN``), as an owner.

    One ``Table`` exists per mapping object (see :func:`table`), so identity comparisons of owners
    work as for modules and classes. Items are read and written with ``dict``'s own methods, since
    some tables (``ACT2FN``) instantiate what they hold on ``[]``.
    """

    def __init__(self, module: str, name: str, mapping: MutableMapping[object, object]):
        self.module = module
        self.name = name
        self.mapping = mapping

    def items(self) -> dict[object, object]:
        """The raw entries, as stored."""
        if isinstance(self.mapping, dict):
            return dict(dict.items(self.mapping))
        return dict(self.mapping.items())

    def set(self, key: object, value: object) -> None:
        """Store ``value`` under ``key`` (``MISSING`` deletes the entry)."""
        if value is MISSING:
            if isinstance(self.mapping, dict):
                dict.__delitem__(self.mapping, key)
            else:
                del self.mapping[key]
        elif isinstance(self.mapping, dict):
            dict.__setitem__(self.mapping, key, value)
        else:
            self.mapping[key] = value

    def get(self, key: object) -> object:
        """The raw entry under ``key``, or ``MISSING``."""
        return self.items().get(key, MISSING)

    def __repr__(self) -> str:
        return f"<table {self.module}.{self.name}>"


_TABLES: dict[int, Table] = {}


def table(module: str, name: str, mapping: MutableMapping[object, object]) -> Table:
    """The one :class:`Table` for ``mapping`` (the first name it was found under labels it)."""
    found = _TABLES.get(id(mapping))
    if found is None or found.mapping is not mapping:
        found = _TABLES[id(mapping)] = Table(module, name, mapping)
    return found


def _is_table(value: object) -> bool:
    """A mutable mapping that holds at least one class or function (or a ``(class, kwargs)`` pair)."""
    if not isinstance(value, MutableMapping) or isinstance(value, types.MappingProxyType):
        return False
    try:
        values = list(dict.values(value)) if isinstance(value, dict) else list(value.values())
    except Exception:  # a mapping that cannot be listed is not one the kit can watch
        return False
    if not values or len(values) > 10_000:
        return False
    return any(inspect.isclass(v) or inspect.isroutine(v)
               or (isinstance(v, tuple) and v and inspect.isclass(v[0])) for v in values)


def _watched(name: object) -> bool:
    if not isinstance(name, str):
        return True
    return not (name.startswith("__") and name.endswith("__")) or name in _WATCHED_DUNDERS


def owner_label(owner: object, attr: object) -> tuple[str, str]:
    """Return ``(module, attr)`` strings naming a binding: ``Class.attr`` for a class attribute,
    ``TABLE['key']`` for a table entry."""
    if isinstance(owner, Table):
        return owner.module, f"{owner.name}[{attr!r}]"
    if isinstance(owner, types.ModuleType):
        return owner.__name__, str(attr)
    assert isinstance(owner, type)
    return owner.__module__, f"{owner.__qualname__}.{attr}"


def tables_of(module: types.ModuleType) -> list[Table]:
    """The tables of classes or functions a module holds in its globals (public names only)."""
    return [table(module.__name__, name, value) for name, value in list(vars(module).items())
            if not name.startswith("_") and _is_table(value)]


def owners_of(modules: Iterable[types.ModuleType]) -> list[object]:
    """The modules, every class defined in them, and every table they hold (all watched)."""
    owners: list[object] = []
    for module in modules:
        owners.append(module)
        for value in list(vars(module).values()):
            if inspect.isclass(value) and value.__module__ == module.__name__:
                owners.append(value)
        owners.extend(tables_of(module))
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
    attr: object
    before: object
    after: object


def _read(owner: object) -> dict[object, object]:
    """Every binding of ``owner`` as it is now (unwatched dunders included: :meth:`Snapshot.changes`
    drops them, so that reading stays one copy)."""
    if isinstance(owner, Table):
        return owner.items()
    return dict(vars(owner))


class Snapshot:
    """The bindings of a fixed set of owners (modules, classes, tables) at one moment."""

    def __init__(self, owners: Iterable[object]):
        unique: dict[int, object] = {}
        for owner in owners:
            unique.setdefault(id(owner), owner)
        self.owners: list[object] = list(unique.values())
        self._values = [_read(owner) for owner in self.owners]

    def changes(self) -> list[Change]:
        """Re-read the same owners and return every binding that now holds another object."""
        found = []
        for owner, before in zip(self.owners, self._values, strict=True):
            now = _read(owner)
            if list(now) == list(before) and all(map(operator.is_, now.values(), before.values())):
                continue  # nothing rebound here (the common case, checked without a Python loop)
            for attr in [*before, *(k for k in now if k not in before)]:
                old, new = before.get(attr, MISSING), now.get(attr, MISSING)
                if old is not new and _watched(attr):
                    found.append(Change(owner, attr, old, new))
        return found

    def undo(self) -> None:
        """Put every binding that changed since the snapshot back, newest listed first."""
        for change in reversed(self.changes()):
            restore(change.owner, change.attr, change.before)


def restore(owner: object, attr: object, value: object) -> None:
    """Put ``value`` back as ``owner.attr`` (``MISSING`` deletes the binding)."""
    if isinstance(owner, Table):
        owner.set(attr, value)
    elif value is MISSING:
        delattr(owner, str(attr))
    else:
        setattr(owner, str(attr), value)


def current(owner: object, attr: object) -> object:
    """The object bound right now in ``owner``'s own namespace (not inherited)."""
    if isinstance(owner, Table):
        return owner.get(attr)
    return vars(owner).get(attr, MISSING)


def holders(objects: Iterable[object]) -> dict[int, list[str]]:
    """For each object, the loaded modules whose globals hold it itself (by identity): one pass."""
    wanted = {id(o) for o in objects}
    found: dict[int, list[str]] = {i: [] for i in wanted}
    for name, module in list(sys.modules.items()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for key in wanted.intersection(map(id, list(namespace.values()))):
            found[key].append(name)
    return found


def scope_of(owner: object, home: Iterable[str], held_by: dict[int, list[str]] | None = None) -> str:
    """``family`` when ``owner`` belongs to one of the ``home`` modules only, else ``process``.

    Measured, not assumed: a module outside ``home`` (``torch.nn`` reached as ``modeling_x.nn``), a
    class defined outside it, or a table some other loaded module also holds (``ACT2FN``) is shared
    by every later user in the process. ``held_by`` (from :func:`holders`) saves a pass over the
    loaded modules when many tables are asked about.
    """
    home = set(home)
    if isinstance(owner, Table):
        held = (held_by or holders([owner.mapping])).get(id(owner.mapping), [])
        return "family" if set(held) <= home else "process"
    if isinstance(owner, types.ModuleType):
        return "family" if owner.__name__ in home else "process"
    return "family" if getattr(owner, "__module__", None) in home else "process"
