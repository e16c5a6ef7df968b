"""Checks of a route's swaps against the model they are for, before the model is built.

The custom route's patches are probed first (``probe_patches``: in the catalog, the same math as the
source on the probe's inputs, then on every call the module's whole model makes:
``ligerkit.probe.call_sites``; a difference at any call site is refused, naming it). Then two ways
a swap (Liger's helper's or a custom map's) can still be wrong for the model:

- **It cannot reach every use.** A table filled at import (``NORM2FN = {"layer_norm":
  nn.LayerNorm}``) or a module-level alias keeps the original, so the model would be built from a
  mix of Liger's class and the original. The scan finds this after the build; here it is found
  before, from the tables and globals of the modules the route watches.
- **It writes in place where another consumer reads.** Liger's default RMSNorm writes dX into the
  incoming dY; its rotary writes into q/k. ``ligerkit.probe.aliasing`` emulates those writes in the
  module's whole model and compares gradients. A write the check could not see (the whole model does
  not build or run) is *unproven*: the custom route refuses it unless the caller names it in
  ``in_place_proven``; the official route (Liger's own choice) keeps it and the report says so.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ligerkit.errors import (
    InPlaceBackwardError,
    LigerKitError,
    ProbeMismatchError,
    ReplacementMismatchError,
    UncataloguedReplacementError,
    UnreachableSwapError,
)
from ligerkit.kit.snapshot import Change, Table, owner_label
from ligerkit.naming import MISSING, qualified_name, stands_for
from ligerkit.probe.aliasing import BACKWARD, FORWARD_AND_BACKWARD, AliasingResult, in_place_hazard
from ligerkit.probe import runnable
from ligerkit.probe.catalog import CATALOG, lookup, twin
from ligerkit.probe.probe import MISMATCH, UNPROBED, best_alternative, kept_probe
from ligerkit.probe.call_sites import DIFFERS, MATCH, call_sites


def _holds(value: object, original: object) -> bool:
    return value is original or (isinstance(value, tuple) and bool(value) and value[0] is original)


def unreached(changes: Sequence[Change], home_tables: Iterable[Table], home: Sequence[str]) -> list[str]:
    """Places in the route's own modules that still hold an original these changes swapped out.

    A table only those modules hold (``home_tables``), or a global of theirs bound under another
    name, that holds the original: the model builds from it, and the swap never reaches it.
    """
    changed = {(id(c.owner), c.attr) for c in changes}
    originals = [c.before for c in changes if c.before is not MISSING
                 and (inspect.isclass(c.before) or inspect.isroutine(stands_for(c.before)))]
    found = []
    namespaces: list[tuple[object, Iterable[tuple[object, object]]]] = [
        (t, t.items().items()) for t in home_tables]
    namespaces += [(m, vars(m).items()) for m in (sys.modules.get(n) for n in home) if m is not None]
    for owner, entries in namespaces:
        for key, value in list(entries):
            if (id(owner), key) in changed:
                continue
            for original in originals:
                if _holds(value, original):
                    module, attr = owner_label(owner, key)
                    found.append(f"{module}.{attr} still holds {qualified_name(original)}")
    return found


def writes_in_place(replacement: object) -> str:
    """What a Liger replacement writes in place: ``""``, ``"backward"`` or ``"forward+backward"``.

    A class is built once and asked (``LigerRMSNorm(..., in_place=...)``, partials included);
    a function is read from the catalog, or recognized as one of Liger's rotary kernels.
    """
    entry = lookup(replacement)
    if inspect.isclass(getattr(replacement, "func", replacement)):
        try:
            built = replacement(8)  # type: ignore[operator]
        except Exception:  # a constructor that needs a config: read the catalog instead
            return entry.in_place if entry is not None else ""
        return BACKWARD if getattr(built, "in_place", False) is True else ""
    if entry is not None:
        return entry.in_place
    module = getattr(getattr(replacement, "func", replacement), "__module__", "") or ""
    if module.startswith("liger_kernel.") and ("rope" in module or "mrope" in module):
        return FORWARD_AND_BACKWARD
    return ""


def aliasing_of(original: object, replacement: object, config: object = None) -> AliasingResult | None:
    """The detector's verdict for replacing ``original`` with ``replacement`` (``None``: nothing
    written in place, nothing to check)."""
    writes = writes_in_place(replacement)
    module = sys.modules.get(getattr(original, "__module__", "") or "")
    if not writes or module is None:
        return None
    return in_place_hazard(original, module, config, writes, replacement=replacement)


def in_place_advice(replacement: object) -> str:
    """What to use instead of an in-place replacement where its write is unsafe."""
    entry = lookup(replacement)
    alternative = twin(entry) if entry is not None else None
    if alternative is not None:
        return f"Use {alternative.name} instead: the same math with an out-of-place backward."
    if writes_in_place(replacement) == FORWARD_AND_BACKWARD:
        return "Liger's rotary has no out-of-place variant: leave this module off."
    return "Use an out-of-place variant (in_place=False) of the same class, or leave this module off."


def in_place_error(where: str, replacement: object, result: AliasingResult) -> InPlaceBackwardError:
    """The error for an unsafe in-place swap, naming what to use instead."""
    return InPlaceBackwardError(
        f"{where} -> {qualified_name(replacement)}: the replacement writes in place "
        f"({writes_in_place(replacement)}), and {result.reason}. The loss would look right while those "
        f"gradients are wrong. {in_place_advice(replacement)}"
    )


def unproven_error(where: str, name: str, replacement: object, result: AliasingResult) -> InPlaceBackwardError:
    """The error for an in-place swap whose check could not run in the whole model."""
    return InPlaceBackwardError(
        f"{where} -> {qualified_name(replacement)}: the replacement writes in place "
        f"({writes_in_place(replacement)}) and that write is {result.reason}. Unproven is not safe: where "
        f"another consumer shares the tensor, the loss looks right while gradients are wrong. "
        f"{in_place_advice(replacement)} To check it, pass config= with the model's complete config (its "
        f"whole model must build and run on this machine), or prove it on a GPU (`ligerkit suggest MODULE "
        f"--gpu`) and then opt in with in_place_proven=[{name!r}]."
    )


def swap_problem(changes: Sequence[Change], home_tables: Iterable[Table], home: Sequence[str]) -> LigerKitError | None:
    """The first reason these changes (one module's swaps) must not stand, or ``None``."""
    missed = unreached(changes, home_tables, home)
    if missed:
        swapped = ", ".join(f"{'.'.join(owner_label(c.owner, c.attr))}" for c in changes)
        return UnreachableSwapError(
            f"the swap of {swapped} cannot reach every use of the original: {'; '.join(missed[:4])}. "
            "The model would be built from a mix of Liger's class and the original. Leave this module "
            "off (modules='auto' does)."
        )
    for change in changes:
        if change.before is MISSING:
            continue
        result = aliasing_of(change.before, change.after)
        if result is not None and result.hazard:
            return in_place_error(".".join(owner_label(change.owner, change.attr)), change.after, result)
    return None


def _skipped(item: Any, enabled: bool, skip: Collection[str]) -> bool:
    where = f"{item.patch.module}.{item.patch.attr}"
    return not enabled or item.name in skip or item.patch.attr in skip or where in skip


def _on_the_calls(item: Any, entry: Any, config: Any, together: list[object]) -> str:
    """A matched patch on every call its module's whole model makes: the words added to its probe line,
    or ``"unproven: ..."`` (the calls were not seen or not all compared). Raises
    :class:`ReplacementMismatchError` where the replacement differs at a call site."""
    where = f"{item.patch.module}.{item.patch.attr}"
    calls = call_sites(item.original, entry, item.module, config, together=together)
    if calls.verdict == DIFFERS:
        raise ReplacementMismatchError(
            f"custom_patches[{item.name!r}]: {where} -> {entry.name}: on the calls the whole model makes, "
            f"{calls.reason}. The loss can look right while training computes something else: leave this patch "
            f"off. If you proved it on your model yourself, take responsibility with skip_probe=[{item.name!r}] "
            "(the report then lists it as unprobed).")
    if calls.verdict == MATCH:
        return f" on every call the whole model makes ({calls.summary().removeprefix('match on ')})"
    return f"unproven: its calls in the whole model were not compared ({calls.summary()})"


def probe_patches(todo: Sequence[Any], config: Any, enabled: bool, skip: Collection[str],
                  in_place_proven: Collection[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """Probe every resolved custom patch against the catalog before anything is swapped, then check its
    in-place writes in the whole model its module builds.

    Returns ``(probed, unprobed, unproven)`` lines for the report. Raises
    :class:`UncataloguedReplacementError` for a replacement the catalog does not know (unless the
    caller turned its probe off), :class:`ProbeMismatchError` for one whose math differs from the
    source's, :class:`ReplacementMismatchError` for one that differs on a call the module's whole model
    makes (:func:`ligerkit.probe.call_sites.call_sites`; calls it could not see are listed as unproven), and
    :class:`InPlaceBackwardError` for one that writes in place where the model shares that tensor, or
    whose write could not be checked in the whole model (unless its key, attr or ``module.attr`` is in
    ``in_place_proven``: the caller proved it; the report lists it as unproven).
    """
    probed, unprobed, unproven = [], [], []
    for item in todo:
        where = f"{item.patch.module}.{item.patch.attr}"
        label = f"{item.name}: {where} -> {qualified_name(item.patch.replacement)}"
        entry = lookup(item.patch.replacement)
        if _skipped(item, enabled, skip):
            unprobed.append(f"{label} (probe and in-place check turned off by the caller)")
            continue
        if entry is None:
            raise UncataloguedReplacementError(
                f"custom_patches[{item.name!r}]: {qualified_name(item.patch.replacement)} is not in ligerkit's "
                f"catalog, so nothing can check that it computes what {where} computes. Use a catalog "
                f"replacement ({', '.join(r.name for r in CATALOG)}), or take responsibility explicitly with "
                f"skip_probe=[{item.name!r}] (or probe=False); the report then lists it as unprobed."
            )
        module_config = config if config is not None else runnable.module_config(item.module, None)
        result = kept_probe(item.original, entry, module_config, item.module)
        if result.verdict == UNPROBED:
            unprobed.append(f"{label} ({result.reasons[0]})")
        elif result.verdict == MISMATCH:
            alternative = best_alternative(item.original, entry.kind, module_config, item.module, entry.name)
            advice = (f"Use {alternative} instead: it matches." if alternative
                      else "No Liger replacement in the catalog matches it: leave it off.")
            raise ProbeMismatchError(
                f"custom_patches[{item.name!r}]: {where} does not compute what {entry.name} computes "
                f"({'; '.join(result.reasons)}). {entry.name} computes: {entry.computes}. {advice} "
                "(`ligerkit suggest` probes every symbol of a module.)"
            )
        else:
            probed.append(f"{label}: match")
        unseen = []  # what the checks could not see, in one unproven line
        if result.verdict == MATCH:
            seen = _on_the_calls(item, entry, config, [i.original for i in todo if i.module is item.module])
            if seen.startswith("unproven: "):
                unseen.append(seen.removeprefix("unproven: "))
            else:
                probed[-1] += seen
        aliasing = aliasing_of(item.original, item.patch.replacement, config)  # the user's config, else the family's
        if aliasing is not None and aliasing.hazard:
            raise in_place_error(f"custom_patches[{item.name!r}]: {where}", item.patch.replacement, aliasing)
        if aliasing is not None and not aliasing.checked:
            if not _skipped(item, True, in_place_proven):
                raise unproven_error(f"custom_patches[{item.name!r}]: {where}", item.name, item.patch.replacement,
                                     aliasing)
            unseen.append(f"in-place write not checked by ligerkit ({aliasing.reason}); the caller vouches for it "
                          "(in_place_proven)")
        elif aliasing is not None and result.verdict != UNPROBED:
            probed[-1] += f"; in-place write safe ({aliasing.reason})"
        if unseen:
            unproven.append(f"{label}: {'; '.join(unseen)}")
    return probed, unprobed, unproven
