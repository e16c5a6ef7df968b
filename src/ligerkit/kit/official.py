"""The official route: call Liger's own family helper, one semantic module at a time, measured.

The helper is called once with every module off (anything it swaps then is unconditional), then
once per enabled module with only that module on. Pre-build, Liger's helpers treat each flag in
its own ``if`` block, so this does exactly what one call with all the flags would, while the
snapshots around each call tell which module swapped what, and which enabled module did nothing.

Each module's swaps are then checked against the model they are for (``swap_checks.py``): a swap that
a table filled at import cannot see, or an in-place kernel where another consumer shares what it
writes, is left off when ``modules="auto"`` (the report says why) and refused when asked for
explicitly. The helper's swaps are undone as soon as they are measured and made again by the ledger,
each recorded before it is bound (``Ledger.rebind``), so whatever is raised on the way, a
``KeyboardInterrupt`` at any line included, every binding is put back as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from ligerkit.environment import environment_summary
from ligerkit.errors import (HelperFailedError, InvalidOptionError, LigerKitError, LossKernelConflictError,
                             ModuleConflictError, NoEffectError, UnknownModuleError, UnsupportedModuleError)
from ligerkit.kit.families import Family, known_module_names
from ligerkit.kit.ledger import Ledger, live_layers
from ligerkit.kit.report import ROUTE_OFFICIAL, Application, Swap
from ligerkit.naming import MISSING
from ligerkit.kit.snapshot import (PROCESS_WIDE_MODULES, Change, Snapshot, Table, current, holders, import_all,
                                   owners_of, scope_of)

UNCONDITIONAL = "(unconditional)"

Modules = Literal["auto"] | Mapping[str, bool]


def check_module_names(names: Sequence[str]) -> None:
    """Raise :class:`UnknownModuleError` for names no Liger helper knows."""
    unknown = set(names) - known_module_names()
    if unknown:
        raise UnknownModuleError(unknown, known_module_names())


def _explicit(modules: object) -> dict[str, bool]:
    """The explicit choices of a ``modules`` value (``{}`` for ``"auto"``), checked."""
    if modules == "auto":
        return {}
    if not isinstance(modules, Mapping) or not all(isinstance(v, bool) for v in modules.values()):
        raise InvalidOptionError(
            f"modules must be 'auto' or a mapping {{module: true/false}}, got {modules!r}."
        )
    if not modules:
        raise InvalidOptionError(
            "modules is an empty mapping, which would select nothing; pass 'auto' for Liger's per-family "
            "defaults, or name the modules, e.g. {'rope': True, 'rms_norm': True}."
        )
    if not all(isinstance(k, str) and k for k in modules):
        raise InvalidOptionError(f"modules keys must be module names, got {list(modules)!r}.")
    return dict(modules)


def resolve_modules(
    family: Family, modules: Modules, excluded: Sequence[str], strict: bool
) -> tuple[dict[str, bool], dict[str, bool], list[str]]:
    """Validate a module selection against a family.

    Returns ``(effective, explicit, dropped)``: the on/off of every module the helper accepts, the
    explicit choices, and the explicitly enabled modules dropped because the helper does not accept
    them (only when ``strict`` is false; strict raises instead). With ``"auto"``, ``effective`` is
    Liger's defaults with the exclusions forced off; with an explicit mapping it is exactly the
    mapping (a module it does not name is off: Liger's defaults never slip in).
    """
    explicit = _explicit(modules)
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
    if modules == "auto":
        effective = dict(family.defaults)
        for name in excluded:
            if name in effective:
                effective[name] = False
    else:
        effective = {name: explicit.get(name, False) for name in family.defaults}
    if effective.get("cross_entropy") and effective.get("fused_linear_cross_entropy"):
        raise LossKernelConflictError()
    return effective, explicit, dropped


class _Route:
    """One official application in progress: owners watched, swaps recorded, modules left off."""

    def __init__(self, family: Family, ledger: Ledger, tiled_mlp: bool = False):
        self.family = family
        self.ledger = ledger
        self.tiled_mlp = tiled_mlp
        self.tiled: list[str] = []  # the MLP swaps made tiled (tiled_mlp), in words
        self.home = family.modeling_modules
        self.owners = owners_of(import_all(self.home)) + owners_of(import_all(PROCESS_WIDE_MODULES))
        tables = [o for o in self.owners if isinstance(o, Table)]
        self.held_by = holders(t.mapping for t in tables)
        self.home_tables = [t for t in tables if scope_of(t, self.home, self.held_by) == "family"]
        self.patched: list[Swap] = []
        self.left_off: dict[str, str] = {}
        from ligerkit.kit.official_probe import OfficialFindings  # the probes load only when a kit applies

        self.findings = OfficialFindings()

    def run(self, name: str, flags: dict[str, bool], explicit: bool) -> int:
        """Call the helper with ``flags``, record its swaps under ``name``; return how many.

        A module whose swaps fail a check is undone: left off (``auto``) or refused (explicit).
        """
        snap = Snapshot(self.owners)
        try:
            self.family.helper(**flags)
            changes = snap.changes()
            # every binding back as it was: the checks build the model without this module's swaps,
            # and each swap is then remade by the ledger, recorded before it is bound
            snap.undo()
            changes, tiled = self._tiled(changes) if self.tiled_mlp else (changes, [])
            self.ledger.check_no_conflict(changes)
            if name != UNCONDITIONAL and changes:
                from ligerkit.kit.swap_checks import swap_problem

                problem = swap_problem(changes, self.home_tables, self.home)
                if problem is not None:
                    if explicit:
                        raise problem
                    self.left_off[name] = str(problem)
                    return 0
                self._probe(name, changes)
            for change in changes:
                scope = scope_of(change.owner, self.home, self.held_by)
                self.patched.append(self.ledger.rebind(change, name, scope, helper=self.family.helper_name))
            self.tiled += tiled  # noted once made (a module left off above made none)
        except BaseException as exc:  # KeyboardInterrupt included: nothing of this call may stay
            snap.undo()
            if isinstance(exc, Exception) and not isinstance(exc, LigerKitError):
                raise HelperFailedError(
                    f"Liger's helper {self.family.helper_name}({name}) failed: {type(exc).__name__}: {exc}. "
                    f"This is usually a liger-kernel / transformers version mismatch ({environment_summary()}); "
                    "install the tested versions or turn that module off, or have ligerkit apply its own proven "
                    "map of the family instead: kit.apply(..., fallback=ligerkit.suggest.proven_map), "
                    "model.liger_kernel.fallback: custom in a recipe config, ligerkit plan --fallback custom."
                ) from exc
            raise
        return len(changes)

    @staticmethod
    def _tiled(changes: list[Change]) -> tuple[list[Change], list[str]]:
        """``changes`` with Liger's MLP in its tiled form (the catalog's ``tiled``; checked and probed like any
        swap), and what was replaced, in words."""
        from ligerkit.probe.catalog import by_name, lookup  # the probes load only when a kit applies

        found, notes = [], []
        for change in changes:
            entry = lookup(change.after) if isinstance(change.after, type) else None
            if entry is not None and entry.tiled is not None:
                notes.append(f"{getattr(change.before, '__name__', change.attr)} -> {entry.tiled} (instead of "
                             f"{entry.name}: the same math over sequence tiles, each run again in backward)")
                change = replace(change, after=by_name(entry.tiled).obj)
            found.append(change)
        return found, notes

    def no_tiled_form(self) -> str:
        """Why ``tiled_mlp=True`` has nothing to tile here: the MLPs with a tiled form, and the ones swapped."""
        from ligerkit.probe.catalog import CATALOG

        mlps, last = {e.name: e for e in CATALOG if e.kind == "mlp"}, lambda q: q.rsplit(".", 1)[-1]
        kinds = {e.module for e in mlps.values()}  # swiglu, geglu: the experts swapped under them count too
        made = sorted({f"{last(s.original)} -> {last(s.replacement)}" for s in self.patched
                       if last(s.replacement) in mlps or s.name in kinds})
        can = sorted(self.family.accepted & kinds - set(self.left_off))  # a module left off is said below
        what = (f"{', '.join(made)}, {('which has', 'which have')[len(made) > 1]} none: drop tiled_mlp" if made else
                f"no MLP: turn {'/'.join(can)} on, or drop tiled_mlp" if can else "no MLP it could tile: drop it")
        return (f"tiled_mlp=True, but Liger's helper for {self.family.name!r} swapped no MLP that has a tiled form "
                f"({', '.join(n for n, e in mlps.items() if e.tiled)}); it swapped {what}"
                f"{''.join(f' (left {k} off: {why})' for k, why in self.left_off.items())}.")

    def _probe(self, name: str, changes: list) -> None:
        """Compare each swap with its source and note in-place writes the whole model could not check
        (reported, not refused: the choice is Liger's)."""
        from ligerkit.kit.official_probe import probe_official
        from ligerkit.kit.swap_checks import aliasing_of

        in_place = {}
        for change in changes:
            result = aliasing_of(change.before, change.after) if change.before is not MISSING else None
            if result is not None:
                in_place[id(change)] = result
        found = probe_official(name, changes, in_place)
        self.findings.probed += found.probed
        self.findings.differences += found.differences
        self.findings.unproven += found.unproven

    def join(self, name: str) -> int:
        """Hold the swaps another kit already made for ``name`` with this helper; return how many."""
        watched = {id(o) for o in self.owners}
        mine = {id(e) for e in self.ledger.entries}
        joined = 0
        for entry in live_layers():
            if (id(entry) not in mine and id(entry.owner) in watched and entry.swap.name == name
                    and entry.helper == self.family.helper_name
                    and current(entry.owner, entry.attr) is entry.replacement):
                self.patched.append(self.ledger.join(entry, name))
                joined += 1
        return joined


def apply_official(
    family: Family,
    modules: Modules,
    excluded: Sequence[str],
    ledger: Ledger,
    already_on: frozenset[str],
    strict: bool = True,
    left_to_inductor: Mapping[str, str] | None = None,
    tiled_mlp: bool = False,
) -> Application:
    """Run the family's Liger helper, measured, recording every swap in ``ledger``.

    ``already_on`` holds modules an earlier apply on the same kit already turned on for this
    helper: they are not called again (Liger would find nothing left to swap).
    ``left_to_inductor`` (compile mode) maps modules to leave off unless asked for by name, with why.
    ``tiled_mlp``: the helper's MLP in Liger's tiled form (:class:`InvalidOptionError` where it swaps none).
    """
    left_to_inductor = left_to_inductor or {}
    effective, explicit, dropped = resolve_modules(family, modules, excluded, strict)
    keep = len(ledger.entries)
    noop: list[str] = []
    try:
        route = _Route(family, ledger, tiled_mlp)
        off = dict.fromkeys(effective, False)
        route.run(UNCONDITIONAL, off, explicit=False)
        for name, on in effective.items():
            if not on:
                continue
            if name in already_on:
                noop.append(name)
                continue
            if name in left_to_inductor and name not in explicit:
                route.left_off[name] = left_to_inductor[name]
                continue
            if route.run(name, {**off, name: True}, explicit=name in explicit) == 0 and name not in route.left_off:
                if route.join(name) == 0:
                    noop.append(name)
        silent = [n for n in noop if explicit.get(n) and n not in already_on]
        if silent and strict:
            raise NoEffectError(family.name, silent)
        if tiled_mlp and not route.tiled:
            raise InvalidOptionError(route.no_tiled_form())
    except BaseException:
        ledger.revert(keep)
        raise
    for name in route.left_off:
        effective[name] = False
    return Application(
        route=ROUTE_OFFICIAL,
        family=family.name,
        helper=family.helper_name,
        modules=effective,
        requested=modules if isinstance(modules, str) else dict(explicit),
        excluded=tuple(n for n in excluded if n in family.accepted),
        noop=tuple(noop + dropped),
        patched=tuple(route.patched),
        notes=tuple(_notes(dropped, already_on, effective, route.patched, route.tiled)),
        left_off=dict(route.left_off),
        probed=tuple(route.findings.probed),
        differences=tuple(route.findings.differences),
        unproven=tuple(route.findings.unproven),
    )


def _notes(dropped: list[str], already_on: frozenset[str], effective: dict[str, bool], patched: list[Swap],
           tiled: list[str]) -> list[str]:
    notes = [f"tiled MLP: {t}" for t in tiled]
    if dropped:
        notes.append(f"strict=False: dropped {', '.join(dropped)} (not accepted by the helper)")
    already = sorted(already_on & {n for n, on in effective.items() if on})
    if already:
        notes.append(f"already applied on this kit: {', '.join(already)}")
    if any(s.scope == "process" for s in patched):
        notes.append("process-wide bindings were swapped: every later user of them (any model) gets the "
                     "Liger replacement until revert()")
    if any(s.shared for s in patched):
        notes.append("some swaps were already made by another kit: both kits hold them, either may revert first")
    from ligerkit.probe.training_form import form_note

    return [*notes, *filter(None, [form_note()])]

