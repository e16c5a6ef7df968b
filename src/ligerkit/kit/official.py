"""The official route: call Liger's own family helper, one semantic module at a time, measured.

The helper is called once with every module off (anything it swaps then is unconditional), then
once per enabled module with only that module on. Pre-build, Liger's helpers treat each flag in
its own ``if`` block, so this does exactly what one call with all the flags would, while the
snapshots around each call tell which module swapped what, and which enabled module did nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from ligerkit.environment import environment_summary
from ligerkit.errors import (
    HelperFailedError,
    InvalidOptionError,
    LigerKitError,
    LossKernelConflictError,
    ModuleConflictError,
    NoEffectError,
    UnknownModuleError,
    UnsupportedModuleError,
)
from ligerkit.kit.families import Family, known_module_names
from ligerkit.kit.ledger import Ledger
from ligerkit.kit.report import ROUTE_OFFICIAL, Application, Swap
from ligerkit.kit.snapshot import PROCESS_WIDE_MODULES, Snapshot, import_all, owners_of, restore

UNCONDITIONAL = "(unconditional)"

Modules = Literal["auto"] | Mapping[str, bool]


def check_module_names(names: Sequence[str]) -> None:
    """Raise :class:`UnknownModuleError` for names no Liger helper knows."""
    unknown = set(names) - known_module_names()
    if unknown:
        raise UnknownModuleError(unknown, known_module_names())


def resolve_modules(
    family: Family, modules: Modules, excluded: Sequence[str], strict: bool
) -> tuple[dict[str, bool], dict[str, bool], list[str]]:
    """Validate a module selection against a family.

    Returns ``(effective, explicit, dropped)``: the on/off of every module the helper accepts
    (Liger's defaults, then exclusions, then explicit choices), the explicit choices, and the
    explicitly enabled modules dropped because the helper does not accept them (only when
    ``strict`` is false; strict raises instead).
    """
    if modules == "auto":
        explicit: dict[str, bool] = {}
    elif isinstance(modules, Mapping) and all(isinstance(v, bool) for v in modules.values()):
        explicit = dict(modules)
    else:
        raise InvalidOptionError(
            f"modules must be 'auto' or a mapping {{module: true/false}}, got {modules!r}."
        )
    check_module_names([*explicit, *excluded])
    dropped: list[str] = []
    unsupported = set(explicit) - family.accepted
    if unsupported:
        if strict:
            raise UnsupportedModuleError(family.name, unsupported, family.accepted)
        dropped = sorted(name for name in unsupported if explicit[name])
        explicit = {k: v for k, v in explicit.items() if k in family.accepted}
    both = {name for name, on in explicit.items() if on and name in excluded}
    if both:
        raise ModuleConflictError(both)
    effective = dict(family.defaults)
    for name in excluded:
        if name in effective:
            effective[name] = False
    effective.update(explicit)
    if effective.get("cross_entropy") and effective.get("fused_linear_cross_entropy"):
        raise LossKernelConflictError()
    return effective, explicit, dropped


def apply_official(
    family: Family,
    modules: Modules,
    excluded: Sequence[str],
    ledger: Ledger,
    already_on: frozenset[str],
    strict: bool = True,
) -> Application:
    """Run the family's Liger helper, measured, recording every swap in ``ledger``.

    ``already_on`` holds modules an earlier apply on the same kit already turned on for this
    helper: they are not called again (Liger would find nothing left to swap).
    """
    effective, explicit, dropped = resolve_modules(family, modules, excluded, strict)
    family_modules = import_all(family.modeling_modules)
    owners = owners_of(family_modules)
    process_modules = import_all(PROCESS_WIDE_MODULES)
    process_ids = {id(m) for m in process_modules}
    owners += process_modules

    keep = len(ledger.entries)
    patched: list[Swap] = []
    noop: list[str] = []

    def run(name: str, flags: dict[str, bool]) -> int:
        snap = Snapshot(owners)
        try:
            family.helper(**flags)
            changes = snap.changes()
            ledger.check_no_conflict(changes)
        except Exception as exc:
            for change in reversed(snap.changes()):  # undo whatever this call did, recorded or not
                restore(change.owner, change.attr, change.before)
            if isinstance(exc, LigerKitError):
                raise
            raise HelperFailedError(
                f"Liger's helper {family.helper_name}({name}) failed: {type(exc).__name__}: {exc}. "
                f"This is usually a liger-kernel / transformers version mismatch ({environment_summary()}); "
                "install the tested versions or turn that module off."
            ) from exc
        for change in changes:
            scope = "process" if id(change.owner) in process_ids else "family"
            patched.append(ledger.record(change, name, scope))
        return len(changes)

    try:
        off = dict.fromkeys(effective, False)
        run(UNCONDITIONAL, off)
        for name, on in effective.items():
            if not on:
                continue
            if name in already_on:
                noop.append(name)
                continue
            if run(name, {**off, name: True}) == 0:
                noop.append(name)
        silent = [n for n in noop if explicit.get(n) and n not in already_on]
        if silent and strict:
            raise NoEffectError(family.name, silent)
    except BaseException:
        ledger.revert(keep)
        raise

    notes = []
    if dropped:
        notes.append(f"strict=False: dropped {', '.join(dropped)} (not accepted by the helper)")
    already = sorted(already_on & {n for n, on in effective.items() if on})
    if already:
        notes.append(f"already applied on this kit: {', '.join(already)}")
    if any(s.scope == "process" for s in patched):
        notes.append(
            "process-wide bindings were swapped: every later user of them (any model) gets the "
            "Liger replacement until revert()"
        )
    return Application(
        route=ROUTE_OFFICIAL,
        family=family.name,
        helper=family.helper_name,
        modules=effective,
        requested=modules if isinstance(modules, str) else dict(explicit),
        excluded=tuple(n for n in excluded if n in family.accepted),
        noop=tuple(noop + dropped),
        patched=tuple(patched),
        notes=tuple(notes),
    )
