"""The official route probed like the others: each swap Liger's helper makes, against its source.

Liger chooses each family's replacements; the kit does not refuse them. It measures them all the
same, with the math the custom route uses: the source symbol and the replacement's pure-PyTorch
reference, forward and backward, in float32 and in bfloat16 (``ligerkit.probe``). A replacement the
catalog names is probed with its entry; one of Liger's own ``LigerRMSNorm`` subclasses (Gemma's,
Olmo2's, a helper's local class) with the reference its casting mode and offset select; a swap whose
probe matches is then compared on every call the family's whole model makes of the source
(``ligerkit.probe.call_sites``), so a call with another layout shows as a difference too. Anything
else a helper installs (fused-MoE experts, its loss forwards, other rotaries) has no reference here
and is reported as *unproven*, as is an in-place write whose whole-model check could not run.
"""

from __future__ import annotations

import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from ligerkit.kit.snapshot import Change, owner_label
from ligerkit.naming import MISSING, qualified_name, stands_for
from ligerkit.probe import reference as R
from ligerkit.probe import runnable
from ligerkit.probe.catalog import Replacement, lookup
from ligerkit.probe.probe import MATCH, MISMATCH, kept_probe
from ligerkit.probe.call_sites import DIFFERS, call_sites
from ligerkit.probe.call_sites import MATCH as CALLS_MATCH
from ligerkit.probe.symbols import discover


@dataclass(frozen=True)
class _Direct(Replacement):
    """A replacement probed through the object itself (a class that cannot be imported by path)."""

    target: object = None

    @property
    def obj(self) -> object:  # type: ignore[override]
        """The replacement object."""
        return self.target


@dataclass
class OfficialFindings:
    """What probing one module's official swaps found, as report lines."""

    probed: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    unproven: list[str] = field(default_factory=list)


def reference_for(replacement: object) -> Replacement | None:
    """The catalog entry for ``replacement``, or one built for a ``LigerRMSNorm`` subclass that keeps
    Liger's forward (its reference follows its ``casting_mode``); ``None`` when there is none."""
    entry = lookup(replacement)
    if entry is not None:
        return entry
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    if inspect.isclass(replacement) and issubclass(replacement, LigerRMSNorm) \
            and replacement.forward is LigerRMSNorm.forward:
        return _Direct(replacement.__qualname__, f"{replacement.__module__}:{replacement.__qualname__}", "norm",
                       "rms_norm",
                       "LigerRMSNorm with its own casting mode and offset", "", R.rms_norm_by_casting,
                       target=replacement)
    return None


_CACHE: dict[tuple[int, int], tuple[str, str]] = {}


def _verdict(before: object, after: object) -> tuple[str, str]:
    """``(kind, text)``: kind ``probed``, ``differs`` or ``unproven``; cached per pair (and the probe's
    result on disk: ``ligerkit.probe.verdict_cache``)."""
    key = (id(before), id(after))
    if key in _CACHE:
        return _CACHE[key]
    entry = reference_for(after)
    module = sys.modules.get(getattr(before, "__module__", "") or "")
    if entry is None or module is None:
        found = ("unproven", f"ligerkit's catalog holds no reference for {qualified_name(after)}, so its math "
                             "was not compared with the source")
    else:
        result = kept_probe(before, entry, runnable.module_config(module, None), module)
        if result.verdict == MATCH:
            found = _on_the_calls(before, entry, module)
        elif result.verdict == MISMATCH:
            found = ("differs", f"differs from the source: {'; '.join(result.reasons)}")
        else:
            found = ("unproven", f"not probed ({result.reasons[0] if result.reasons else 'no reason given'})")
    _CACHE[key] = found
    return found


def _on_the_calls(before: object, entry: Replacement, module: types.ModuleType) -> tuple[str, str]:
    """The verdict of a swap whose probe matched, on every call the module's whole model makes of it
    (the family's own config; the module's other candidate symbols recorded in the same run)."""
    together = [obj for _, obj, _ in discover(module)]
    calls = call_sites(before, entry, module, None, together=together)
    if calls.verdict == CALLS_MATCH:
        return "probed", (f"same math as the source (forward and backward, float32 and bfloat16) on every call the "
                          f"whole model makes ({calls.summary().removeprefix('match on ')})")
    if calls.verdict == DIFFERS:
        return "differs", f"differs from the source on the calls the whole model makes: {calls.reason}"
    return "unproven", (f"same math as the source on the probe's inputs; its calls in the whole model were not "
                        f"compared ({calls.summary()})")


def probe_official(name: str, changes: list[Change], in_place: dict[int, Any]) -> OfficialFindings:
    """Probe each of one module's swaps (``name``) against its source; ``in_place`` maps a change's id
    to its whole-model in-place verdict (``AliasingResult``), where the replacement writes in place."""
    found = OfficialFindings()
    for change in changes:
        source = stands_for(change.before)  # a hub-kernel wrapper is probed as the function it calls
        if change.before is MISSING or not (inspect.isclass(source) or inspect.isroutine(source)):
            continue
        where = ".".join(owner_label(change.owner, change.attr))
        label = f"{name}: {where} -> {qualified_name(change.after)}"
        kind, text = _verdict(change.before, change.after)
        {"probed": found.probed, "differs": found.differences, "unproven": found.unproven}[kind].append(
            f"{label}: {text}")
        aliasing = in_place.get(id(change))
        if aliasing is not None and not aliasing.checked:
            found.unproven.append(f"{label}: writes in place and that write is {aliasing.reason}")
    return found
