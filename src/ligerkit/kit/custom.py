"""The custom route: swap symbols of a model's own modeling module from a ``custom_patches`` map.

Every patch is resolved and checked before anything is swapped (the module imports, the symbol
exists, the replacement is of the same kind and in the catalog, its math matches the source's, its
in-place writes are safe in the whole model the module builds, or named in ``in_place_proven`` when
that model could not be checked), so a bad map leaves the process untouched.
The swap itself is then measured like the official route: snapshot, set, diff; and whatever is
raised in the middle of it (``KeyboardInterrupt`` included), every binding is put back.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import types
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ligerkit.errors import (
    ConflictingPatchError,
    InvalidPatchError,
    KindMismatchError,
    MissingSymbolError,
    ModuleConflictError,
    NoEffectError,
    PatchImportError,
)
from ligerkit.kit.ledger import Entry, Ledger
from ligerkit.kit.report import ROUTE_CUSTOM, Application, Swap
from ligerkit.kit.snapshot import Snapshot, owners_of, scope_of
from ligerkit.naming import qualified_name


@dataclass(frozen=True)
class LigerPatch:
    """Replace ``module.attr`` with ``replacement`` before the model is built.

    Attributes:
        module: dotted name of the modeling module, e.g. ``"my_pkg.modeling_encoder"``.
        attr: the symbol to replace, e.g. ``"EncoderRMSNorm"``; ``"Class.method"`` reaches a
            class attribute.
        replacement: the Liger class or function to bind there.
    """

    module: str
    attr: str
    replacement: object

    def __post_init__(self) -> None:
        if not isinstance(self.module, str) or not self.module:
            raise InvalidPatchError(f"LigerPatch.module must be a dotted module name, got {self.module!r}.")
        if not isinstance(self.attr, str) or not self.attr:
            raise InvalidPatchError(f"LigerPatch.attr must be a symbol name, got {self.attr!r}.")
        if not callable(self.replacement):
            raise InvalidPatchError(
                f"LigerPatch replacement for {self.module}.{self.attr} must be a class or a function, "
                f"got {self.replacement!r}."
            )


CustomPatches = Mapping[str, "LigerPatch | Sequence[LigerPatch]"]


@dataclass(frozen=True)
class _Resolved:
    name: str
    patch: LigerPatch
    module: types.ModuleType
    owner: object
    attr: str
    original: object


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return "class"
    if inspect.isroutine(obj) or callable(obj):
        return "function"
    return "value"


def _is_module_class(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, nn.Module)


def normalize(custom_patches: object) -> list[tuple[str, LigerPatch]]:
    """Flatten ``{name: patch | [patch, ...]}`` into ``(name, patch)`` pairs, checking its shape."""
    if not isinstance(custom_patches, Mapping) or not custom_patches:
        raise InvalidPatchError(
            "custom_patches must be a non-empty mapping {name: LigerPatch(module, attr, replacement)} "
            f"(a value may be a list of LigerPatch); got {custom_patches!r}."
        )
    pairs = []
    for name, value in custom_patches.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidPatchError(f"custom_patches keys must be non-empty strings, got {name!r}.")
        patches = [value] if isinstance(value, LigerPatch) else value
        if not isinstance(patches, Sequence) or not patches or not all(
            isinstance(p, LigerPatch) for p in patches
        ):
            raise InvalidPatchError(
                f"custom_patches[{name!r}] must be a LigerPatch or a non-empty list of them, got {value!r}."
            )
        pairs.extend((name, p) for p in patches)
    return pairs


def _resolve(name: str, patch: LigerPatch) -> _Resolved:
    try:
        module = importlib.import_module(patch.module)
    except (Exception, SystemExit) as exc:  # any import failure is the user's to fix, with its cause shown
        raise PatchImportError(
            f"custom_patches[{name!r}]: module {patch.module!r} does not import ({type(exc).__name__}: "
            f"{exc}). It must be importable before the model is built: check the dotted path and that "
            "its package is on sys.path."
        ) from exc
    *path, attr = patch.attr.split(".")
    owner: object = module
    for part in path:
        if not hasattr(owner, part):
            raise _missing(name, patch, owner, part)
        owner = getattr(owner, part)
    if not isinstance(owner, (types.ModuleType, type)):
        raise InvalidPatchError(
            f"custom_patches[{name!r}]: {patch.module}.{'.'.join(path)} is not a module or class, so "
            f"{attr!r} cannot be patched on it."
        )
    if not hasattr(owner, attr):
        raise _missing(name, patch, owner, attr)
    original = getattr(owner, attr)
    if _kind(original) != _kind(patch.replacement) or _is_module_class(original) != _is_module_class(patch.replacement):
        raise KindMismatchError(
            f"custom_patches[{name!r}]: {patch.module}.{patch.attr} is a {_kind(original)} "
            f"({qualified_name(original)}) but the replacement {qualified_name(patch.replacement)} is a "
            f"{_kind(patch.replacement)}. Replace a class with a class (an nn.Module for an nn.Module) and a "
            "function with a function."
        )
    return _Resolved(name, patch, module, owner, attr, original)


def _missing(name: str, patch: LigerPatch, owner: object, attr: str) -> MissingSymbolError:
    candidates = [n for n in dir(owner) if not n.startswith("__")]
    close = difflib.get_close_matches(attr, candidates, n=3, cutoff=0.5)
    hint = f" Similar names there: {', '.join(close)}." if close else ""
    return MissingSymbolError(
        f"custom_patches[{name!r}]: {patch.module} has no symbol {patch.attr!r} (renamed upstream?)."
        f"{hint} Update the LigerPatch to the symbol the modeling file defines now."
    )


def _undo_swaps(snap: Snapshot, ledger: Ledger, keep: int) -> None:
    """Put back every binding the swap loop changed (recorded or not) and drop its ledger entries."""
    snap.undo()
    ledger.revert(keep)


def apply_custom(
    label: str | None,
    custom_patches: object,
    excluded: Sequence[str],
    ledger: Ledger,
    config: Any = None,
    probe: bool = True,
    skip_probe: Collection[str] = (),
    in_place_proven: Collection[str] = (),
) -> Application:
    """Check every patch (import, symbol, kind, conflicts, the math probe, in-place writes), then swap
    them all, measured, recording each in ``ledger``. Nothing stays changed if anything is raised."""
    pairs = normalize(custom_patches)
    both = {name for name, _ in pairs if name in excluded}
    if both:
        raise ModuleConflictError(both)
    resolved = [_resolve(name, patch) for name, patch in pairs]

    todo: list[_Resolved] = []
    noop: list[str] = []
    joined: list[tuple[_Resolved, Entry]] = []
    targets: dict[tuple[int, str], _Resolved] = {}
    for item in resolved:
        key = (id(item.owner), item.attr)
        earlier = targets.get(key)
        if earlier is not None and earlier.patch.replacement is not item.patch.replacement:
            _raise_conflict(item, earlier.patch.replacement)
        entry = ledger.active(item.owner, item.attr)
        if entry is not None and entry.replacement is not item.patch.replacement:
            _raise_conflict(item, entry.replacement)
        if item.original is item.patch.replacement or earlier is not None:
            other = ledger.made_elsewhere(item.owner, item.attr, item.patch.replacement)
            if other is not None and entry is None and earlier is None:
                joined.append((item, other))  # another kit made this very swap: hold it too
            else:
                noop.append(item.name)  # the same replacement again: nothing to do
            continue
        targets[key] = item
        todo.append(item)

    from ligerkit.kit.swap_checks import probe_patches  # the probes load only when a kit applies
    from ligerkit.probe.training_form import form_note

    probed, unprobed, unproven = probe_patches(todo, config, probe, skip_probe, in_place_proven)
    home = {i.patch.module for i in resolved}
    owners = owners_of({id(i.module): i.module for i in todo}.values())
    owners += [i.owner for i in todo]
    snap = Snapshot(owners)
    keep = len(ledger.entries)
    patched: list[Swap] = []
    try:
        for item in todo:
            setattr(item.owner, item.attr, item.patch.replacement)
        by_target = {(id(i.owner), i.attr): i.name for i in todo}
        order = {key: i for i, key in enumerate(by_target)}
        changes = sorted(snap.changes(), key=lambda c: order.get((id(c.owner), c.attr), len(order)))
        ledger.check_no_conflict(changes)
        for change in changes:
            name = by_target.get((id(change.owner), change.attr), "(side effect)")
            patched.append(ledger.record(change, name, scope_of(change.owner, home)))
        landed = {(id(c.owner), c.attr) for c in changes}
        silent = [i.name for i in todo if (id(i.owner), i.attr) not in landed]
        if silent:
            raise NoEffectError(label or "custom", silent, route="custom")
        patched += [ledger.join(other, item.name) for item, other in joined]
    except BaseException:
        _undo_swaps(snap, ledger, keep)
        raise
    names = list(dict.fromkeys(name for name, _ in pairs))
    notes = []
    if any(s.scope == "process" for s in patched):
        notes.append("a patch reaches a process-wide binding: every later user of it (any model) gets the "
                     "replacement until revert()")
    notes += filter(None, [form_note()])
    return Application(
        route=ROUTE_CUSTOM,
        family=label,
        helper=None,
        modules=dict.fromkeys(names, True),
        requested={n: True for n in names},
        excluded=tuple(excluded),
        noop=tuple(dict.fromkeys(n for n in noop if n not in {i.name for i in todo})),
        patched=tuple(patched),
        notes=tuple(notes),
        probed=tuple(probed),
        unprobed=tuple(unprobed),
        unproven=tuple(unproven),
    )


def _raise_conflict(item: _Resolved, existing: object) -> None:
    """Raise :class:`ConflictingPatchError` for two different replacements of one symbol."""
    raise ConflictingPatchError(
        f"{item.patch.module}.{item.patch.attr} is already patched with {qualified_name(existing)}; "
        f"custom_patches[{item.name!r}] would replace it with {qualified_name(item.patch.replacement)}. "
        "Keep one replacement per symbol, or revert() first."
    )
