"""A replacement judged on every call the module's whole model makes of the source symbol.

The probe (``probe.py``) compares a source symbol with a replacement on inputs it makes up, with the
default arguments. A model may call the symbol otherwise: a rotary with ``unsqueeze_dim=2`` over
(batch, seq, heads, dim) tensors (Liger's kernel reads them as (batch, heads, seq, dim): measured on
an H200, 9x eager's gradient error with the loss unchanged), a norm whose instances hold another
``eps``, an MLP given an extra argument. So the whole model is run once and every call of every
symbol being judged recorded (``calls.py``), and each distinct signature replayed (``replay.py``).

The verdict (:class:`CallSiteResult`) says what it saw: ``match`` (every signature compared and
equal), ``differs`` (naming each call site, the call and what differs), ``unproven`` (the whole model
could not run, or a call could not be compared), or ``never called`` (the whole model runs but its
forward never calls the symbol: patching it changes nothing). It is cached like every verdict
(:mod:`~ligerkit.probe.verdict_cache`).
"""

from __future__ import annotations

import functools
import types
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ligerkit.naming import qualified_name
from ligerkit.probe import runnable, verdict_cache
from ligerkit.probe.calls import Recording, Unseen, recorded_calls
from ligerkit.probe.catalog import Replacement
from ligerkit.probe.replay import DIFFERS, MATCH, UNPROVEN, replay_call
from ligerkit.probe.top_model import config_fingerprint

__all__ = ["DIFFERS", "MATCH", "NEVER_CALLED", "UNPROVEN", "CallSiteResult", "Difference", "call_sites"]

NEVER_CALLED = "never called"


@dataclass(frozen=True)
class Difference:
    """One signature whose replay differs: where the model makes that call, the call, the arguments
    that set it apart (non-default values; tensor layouts otherwise) and what differed."""

    sites: tuple[str, ...]
    call: str
    argument: str
    detail: str

    def __str__(self) -> str:
        where = ", ".join(self.sites[:3]) + (f" (+{len(self.sites) - 3} more)" if len(self.sites) > 3 else "")
        return f"at {where}, called with {self.argument}: {self.detail}"


@dataclass(frozen=True)
class CallSiteResult:
    """The verdict of one (source, replacement) pair over every call the whole model makes.

    ``sites`` maps each call site to its number of calls; ``signatures`` counts the distinct calls,
    ``compared`` those replayed to a verdict; ``model`` names the whole model that ran."""

    source: str
    replacement: str
    verdict: str
    reason: str
    model: str | None = None
    sites: dict[str, int] = field(default_factory=dict)
    signatures: int = 0
    compared: int = 0
    differences: tuple[Difference, ...] = ()

    @property
    def calls(self) -> int:
        """How many calls the whole model made."""
        return sum(self.sites.values())

    @property
    def ok(self) -> bool:
        """Every recorded call compared, and the replacement computed what the source computes."""
        return self.verdict == MATCH

    def summary(self) -> str:
        """One line: the verdict and its coverage, or why there is none."""
        if self.verdict in (MATCH, DIFFERS) or (self.verdict == UNPROVEN and self.signatures):
            seen = (f"{self.calls} call(s) from {len(self.sites)} call site(s), {self.compared} of {self.signatures} "
                    f"signature(s) compared, in {self.model}")
            return f"{self.verdict} on {seen}" + ("" if self.verdict == MATCH else f": {self.reason}")
        return f"{self.verdict}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"verdict": self.verdict, "model": self.model, "calls": self.calls, "sites": len(self.sites),
                "signatures": self.signatures, "compared": self.compared, "reason": self.reason,
                "call_sites": dict(self.sites),
                "differences": [{"sites": list(d.sites), "call": d.call, "argument": d.argument, "detail": d.detail}
                                for d in self.differences]}


def _verdict(source: object, entry: Replacement, rec: Recording) -> CallSiteResult:
    """Every signature of ``rec`` replayed, one verdict over them."""
    differences, unproven, compared = [], [], 0
    for sig in rec.signatures.values():
        verdict, reasons, standout = replay_call(source, entry, sig)
        compared += verdict != UNPROVEN
        if verdict == DIFFERS:
            differences.append(Difference(tuple(sig.sites), sig.text, standout, "; ".join(reasons[:3])))
        elif verdict == UNPROVEN:
            unproven.append(f"at {', '.join(list(sig.sites)[:2])}: {reasons[0]}")
    name, sites = qualified_name(source), Counter()
    for sig in rec.signatures.values():
        sites.update(sig.sites)
    count = len(rec.signatures)
    if differences:
        verdict, reason = DIFFERS, (f"{entry.name} differs from {name} on {len(differences)} of {count} signature(s): "
                                    + "; ".join(map(str, differences[:2])))
    elif unproven:
        verdict, reason = UNPROVEN, f"{len(unproven)} of {count} signature(s) not compared: " + "; ".join(unproven[:2])
    else:
        verdict, reason = MATCH, f"computes what {name} computes on every call {rec.model} makes"
    return CallSiteResult(name, entry.name, verdict, reason, rec.model, dict(sites), count, compared,
                          tuple(differences))


_CACHE: dict[tuple[int, int, str, str, str], CallSiteResult] = {}


def call_sites(source: object, entry: Replacement, module: types.ModuleType, config: Any = None,
               device: str | None = None, together: Sequence[object] = ()) -> CallSiteResult:
    """Whether ``entry`` computes what ``source`` computes on every call ``module``'s whole model makes
    of it (built from ``config``, else the module's own; on ``device``, default: the CPU or the device
    of an enclosing :func:`ligerkit.probe.aliasing.checked_on`). ``together`` are the other symbols
    being judged in the same module: their calls are recorded in the same run of the model."""
    from ligerkit.probe.aliasing import current_device

    device = device or current_device()
    bound = verdict_cache.bindings_now(module)  # another swap made there changes the model the calls come from
    key = (id(source), id(entry.obj), module.__name__, config_fingerprint(config) if config is not None else "",
           str(device), bound)
    if key not in _CACHE:
        result = verdict_cache.cached(
            "calls", lambda: _disk_key(source, entry, module, config, str(device)),
            lambda: _compute(source, entry, module, config, str(device), together), _dump,
            functools.partial(_load, qualified_name(source), entry.name),
            keep=lambda r: "MemoryError" not in r.reason and "out of memory" not in r.reason)
        if bound is None:
            return result
        _CACHE[key] = result
    return _CACHE[key]


def _compute(source: object, entry: Replacement, module: types.ModuleType, config: Any, device: str,
             together: Sequence[object]) -> CallSiteResult:
    name = qualified_name(source)
    found = recorded_calls(source, module, config, device, together)
    if isinstance(found, Unseen):
        if found.never_called:
            return CallSiteResult(name, entry.name, NEVER_CALLED, f"the whole model's forward never calls it ({found.reason})")
        return CallSiteResult(name, entry.name, UNPROVEN, f"its calls were not seen: the whole model could not be run "
                                                          f"({found.reason})")
    return _verdict(source, entry, found)


def _disk_key(source: object, entry: Replacement, module: types.ModuleType, config: Any, device: str) -> dict[str, Any]:
    return {"source": verdict_cache.symbol(source), "module": verdict_cache.module_state(module),
            "config": verdict_cache.config_key(config), "config_classes": verdict_cache.config_classes(module),
            "replacement": {"name": entry.name, "object": verdict_cache.describe(entry.obj),
                            "reference": verdict_cache.describe(entry.reference)},
            "device": device, "budgets": [runnable.CPU_PARAMETER_BUDGET, runnable.CUDA_PARAMETER_BUDGET]}


def _dump(result: CallSiteResult) -> dict[str, Any]:
    return {"source": result.source, "replacement": result.replacement, "verdict": result.verdict,
            "reason": result.reason, "model": result.model, "sites": {k: float(v) for k, v in result.sites.items()},
            "signatures": float(result.signatures), "compared": float(result.compared),
            "differences": [[*d.sites, "|", d.call, d.argument, d.detail] for d in result.differences]}


def _load(source: str, replacement: str, data: Any) -> CallSiteResult:
    """A :class:`CallSiteResult` from stored fields, each checked (``ValueError`` for any not valid)."""
    f = verdict_cache.fields(data, {"source": str, "replacement": str, "verdict": str, "reason": str,
                                    "model": (str, None), "sites": {str: float}, "signatures": float,
                                    "compared": float, "differences": [[str]]})
    if (f["source"], f["replacement"]) != (source, replacement) or f["verdict"] not in (MATCH, DIFFERS, UNPROVEN,
                                                                                       NEVER_CALLED) \
            or (f["verdict"] == DIFFERS) is not bool(f["differences"]) or f["compared"] > f["signatures"]:
        raise ValueError("the stored call-site verdict does not hold together")
    differences = []
    for row in f["differences"]:
        cut = row.index("|")
        call, argument, detail = row[cut + 1:]
        differences.append(Difference(tuple(row[:cut]), call, argument, detail))
    return CallSiteResult(source, replacement, f["verdict"], f["reason"], f["model"],
                          {k: int(v) for k, v in f["sites"].items()}, int(f["signatures"]), int(f["compared"]),
                          tuple(differences))
