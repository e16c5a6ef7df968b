"""``suggest`` itself: find the norm / MLP / rotary symbols of a modeling module, probe each against the
catalog, and write the ``custom_patches`` map of the matches. When unsure, leave it off.
"""

from __future__ import annotations

import inspect
import re
import types
from dataclasses import dataclass, field
from typing import Any

from ligerkit.errors import LigerKitError
from ligerkit.hf import SMALL_DIMS
from ligerkit.probe.aliasing import in_place_hazard
from ligerkit.probe.catalog import Replacement, by_kind, by_name, twin
from ligerkit.probe.probe import MATCH, UNPROBED, ProbeResult, probe
from ligerkit.probe.call_sites import DIFFERS, NEVER_CALLED, call_sites
from ligerkit.probe.symbols import discover
from ligerkit.suggest.construction import construction_problem
from ligerkit.suggest.target import SuggestError, load_config, load_module
from ligerkit.suggest.needs import check_config_keys
from ligerkit.suggest.official import OfficialHelper, official_helper

__all__ = ["Candidate", "Suggestion", "suggest"]

_CONFIG_ATTR = re.compile(r"config\.(\w+)")
@dataclass
class Candidate:
    """One source symbol, its verdict and why."""

    symbol: str
    kind: str
    verdict: str  # "match" | "leave_off"
    replacement: str | None
    reason: str
    module_name: str | None = None  # semantic key for custom_patches
    results: list[ProbeResult] = field(default_factory=list)
    in_place: dict[str, Any] | None = None  # the whole-model in-place check, when the match writes in place
    call_sites: dict[str, Any] | None = None  # the replay of the whole model's calls (CallSiteResult.to_dict())
    # replacements whose probe matched but that differ on a call the whole model makes: {name: CallSiteResult dict}
    differs_at_call_sites: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"symbol": self.symbol, "kind": self.kind, "verdict": self.verdict,
                "replacement": self.replacement, "reason": self.reason, "module": self.module_name,
                "in_place": self.in_place, "call_sites": self.call_sites,
                "differs_at_call_sites": self.differs_at_call_sites,
                "probes": [{"replacement": r.replacement, "verdict": r.verdict, "reasons": list(r.reasons)}
                           for r in self.results]}


@dataclass
class Suggestion:
    """What ``suggest`` found in one modeling module."""

    module: str
    config: str
    candidates: list[Candidate]
    module_object: types.ModuleType | None = field(default=None, repr=False, compare=False)
    config_object: Any = field(default=None, repr=False, compare=False)
    official: OfficialHelper | None = None  # the official route, when a Liger helper patches this module

    @property
    def matched(self) -> list[Candidate]:
        """The candidates whose probe matched."""
        return [c for c in self.candidates if c.verdict == MATCH]

    def groups(self) -> dict[str, list[Candidate]]:
        """The matched candidates by ``custom_patches`` key, in order."""
        groups: dict[str, list[Candidate]] = {}
        for c in self.matched:
            groups.setdefault(c.module_name or c.kind, []).append(c)
        return groups

    def patches_code(self) -> str:
        """A ready-to-paste ``custom_patches`` map of the matched candidates, as Python."""
        from ligerkit.probe.catalog import CATALOG

        used = {c.replacement for c in self.matched}
        lines = [f"from {r.module_path} import {r.name}" for r in CATALOG if r.name in used]
        lines += ["", "from ligerkit import LigerPatch", "", f'MODULE = "{self.module}"', "", "custom_patches = {"]
        for key, items in self.groups().items():  # MODULE keeps every line short (a file, a log: 100 columns)
            patches = [f'LigerPatch(MODULE, "{c.symbol}", {c.replacement})' for c in items]
            value = patches[0] if len(patches) == 1 else "[\n        " + ",\n        ".join(patches) + ",\n    ]"
            lines.append(f'    "{key}": {value},')
        lines.append("}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"module": self.module, "config": self.config,
                "official_helper": self.official.to_dict() if self.official else None,
                "candidates": [c.to_dict() for c in self.candidates], "custom_patches": self.patches_code()}


@dataclass(frozen=True)
class _Built:
    """What a meta-device build of the config's model instantiates."""

    model_class: str
    layouts: dict[type, set[tuple[str, ...]]]  # class -> the parameter layouts its instances have


def _build(config: Any) -> _Built | None:
    """Meta-build the config's model (transformers configs only) and note every class's instances."""
    from transformers import PretrainedConfig

    if not isinstance(config, PretrainedConfig):
        return None
    from ligerkit.hf import build_meta_model

    try:
        model = build_meta_model(config)
    except LigerKitError:
        return None
    layouts: dict[type, set[tuple[str, ...]]] = {}
    for m in model.modules():
        layouts.setdefault(type(m), set()).add(tuple(sorted(m.state_dict().keys())))
    return _Built(type(model).__name__, layouts)


def _layout_problem(obj: type, built: _Built | None, config: Any) -> str | None:
    """Why the probed instance does not stand for every instance the model builds, if it does not."""
    if built is None:
        return None
    layouts = built.layouts.get(obj)
    if layouts is None:
        return f"{built.model_class} built from this config never instantiates it"
    if len(layouts) > 1:
        shown = " vs ".join(str(list(layout)) for layout in sorted(layouts))
        return f"the model builds it with different parameters in different places ({shown}); left off"
    return None


def _config_terms(obj: object, config: Any) -> str:
    try:
        names = sorted(set(_CONFIG_ATTR.findall(inspect.getsource(obj))))
    except (OSError, TypeError):
        return ""
    shown = [f"{n}={getattr(config, n)!r}" for n in names if config is not None and hasattr(config, n)
             and not isinstance(getattr(config, n), (dict, list)) and n not in SMALL_DIMS]
    return f" (for this config: {', '.join(shown)})" if shown else ""


def _in_place_safe(candidate: Candidate, obj: object, replacement: Replacement, module: types.ModuleType,
                   config: Any, whole_config: Any, device: str, together: list[object]) -> Candidate:
    """A matched candidate whose replacement writes in place, checked in the module's whole model
    (built from ``whole_config``: the user's, or ``None`` for the family's own; ``config`` is the
    probes' small one).

    Where another consumer shares what it writes, the out-of-place twin (same math) is suggested, or
    the symbol is left off when there is none (rotary). Where the check cannot run in the whole model
    (it does not build or run from the config, or never uses the symbol), the write is *unproven*,
    which is not safe: a norm takes its twin, a rotary is left off with how to prove it.
    """
    if not replacement.in_place:
        return candidate
    found = in_place_hazard(obj, module, whole_config, replacement.in_place, device)
    candidate.in_place = found.to_dict(replacement.in_place)
    if found.safe:
        candidate.reason += f"; its in-place write is safe here ({found.reason})"
        return candidate
    why = f"{replacement.name} writes in place ({replacement.in_place}) and {found.reason}"
    alternative = twin(replacement)
    if alternative is not None:
        result = probe(obj, alternative, config, module)
        candidate.results.append(result)
        calls = call_sites(obj, alternative, module, whole_config, device, together) if result.verdict == MATCH else None
        if calls is not None and calls.verdict != DIFFERS:
            candidate.replacement, candidate.call_sites = alternative.name, calls.to_dict()
            candidate.reason = f"{candidate.reason}; out of place: {why}"
            return candidate
        if calls is not None:
            why += f"; its out-of-place twin {alternative.name} {calls.reason}"
    prove = "" if found.checked else (
        "; to prove it, pass a complete config (--config) whose whole model builds here, or run with --gpu "
        "(the whole model built on the GPU)")
    candidate.verdict, candidate.replacement, candidate.module_name = "leave_off", None, None
    candidate.call_sites = None
    candidate.reason = f"left off: {why}; no out-of-place Liger replacement has its math{prove}"
    return candidate


def _constructs(candidate: Candidate, module: types.ModuleType, config: Any, built: _Built | None) -> Candidate:
    """A matched class left off when the model (which builds unpatched) does not build with it."""
    if candidate.verdict != MATCH or built is None or candidate.replacement is None:
        return candidate
    problem = construction_problem(module, candidate.symbol, by_name(candidate.replacement).obj, config)
    if problem is None:
        return candidate
    candidate.verdict, candidate.module_name = "leave_off", None
    candidate.reason = (f"left off: {candidate.replacement} has its math, but {built.model_class} does not build "
                        f"with it ({problem}): the model constructs {candidate.symbol} with arguments the "
                        "replacement does not take")
    candidate.replacement = None
    return candidate


def _judge(name: str, obj: object, kind: str, module: types.ModuleType, config: Any, whole_config: Any, device: str,
           together: list[object], built: _Built | None) -> Candidate:
    """One candidate symbol against the catalog's replacements of its kind, in order: the first whose
    probe matches *and* that computes what the symbol computes on every call the whole model makes."""
    results: list[ProbeResult] = []
    misses: list[str] = []
    differs: dict[str, dict[str, Any]] = {}
    for replacement in by_kind(kind):
        result = probe(obj, replacement, config, module)
        results.append(result)
        if result.verdict != MATCH:
            misses.append(f"not {replacement.name}: {result.reasons[0]}")
            continue
        calls = call_sites(obj, replacement, module, whole_config, device, together)
        if calls.verdict == DIFFERS:
            misses.append(f"not {replacement.name}: on the calls the whole model makes, {calls.reason}")
            differs[replacement.name] = calls.to_dict()
            continue
        if calls.verdict == NEVER_CALLED:
            return Candidate(name, kind, "leave_off", None, f"left off: patching it changes nothing the model runs: "
                             f"{calls.reason}", None, results, call_sites=calls.to_dict(),
                             differs_at_call_sites=differs)
        seen = (f"on every call the whole model makes ({calls.summary().removeprefix('match on ')})"
                if calls.verdict == MATCH else f"on the probe's inputs; its calls in the whole model are {calls.reason}")
        candidate = Candidate(name, kind, MATCH, replacement.name,
                              f"computes what {replacement.name} computes {seen}{_config_terms(obj, config)}",
                              replacement.module, results, call_sites=calls.to_dict(), differs_at_call_sites=differs)
        return _constructs(_in_place_safe(candidate, obj, replacement, module, config, whole_config, device, together),
                           module, config, built)
    unprobed = [r for r in results if r.verdict == UNPROBED]
    if unprobed and len(misses) == len(unprobed):
        reason = f"not probed ({unprobed[0].reasons[0]}); left off"
    else:
        reason = "; ".join(misses)
    return Candidate(name, kind, "leave_off", None, reason + _config_terms(obj, config), None, results,
                     differs_at_call_sites=differs)


def suggest(module_spec: str, config_spec: str | None = None, overrides: dict[str, Any] | None = None,
            device: str = "cpu") -> Suggestion:
    """Probe every candidate symbol of a modeling module; see the module docstring.

    ``device`` is where the in-place checks build and run the module's whole model (``"cuda"``
    with ``--gpu``: larger models fit, built directly on the GPU).
    """
    module = load_module(module_spec)
    found = discover(module)
    if not found:
        raise SuggestError(
            f"nothing to probe in {module.__name__}: it defines no class named *Norm, *MLP, *FeedForward or *FFN "
            "and no apply_rotary_pos_emb / apply_multimodal_rotary_pos_emb function (names it imports are not "
            "probed: point suggest at the module that defines them)")
    config = load_config(config_spec, module, overrides)
    check_config_keys(found, module, config, config_spec)
    # the whole model for the in-place checks: the user's config as given, else the family's own
    whole_config = config if config_spec is not None or overrides else None
    built = _build(config)
    together = [obj for _, obj, _ in found]
    candidates = []
    for name, obj, kind in found:
        problem = _layout_problem(obj, built, config) if isinstance(obj, type) else None
        if problem:
            candidates.append(Candidate(name, kind, "leave_off", None, problem))
            continue
        candidates.append(_judge(name, obj, kind, module, config, whole_config, device, together, built))
    label = "none" if config is None else config_spec if isinstance(config, types.SimpleNamespace) else type(config).__name__
    return Suggestion(module.__name__, label, candidates, module, config, official_helper(module.__name__))
