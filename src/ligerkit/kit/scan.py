"""The post-build scan: did the swaps reach the model that was actually built?

A class swap only matters if the model's submodules are instances of the replacement. A submodule
still of an original class means the kit ran after the model was built, or another code path
built that module (a stale ``from modeling_x import XRMSNorm`` binding, say). The scan also lists
such stale bindings: loaded modules whose globals still hold an original the kit swapped out. It
refuses a model with transformers' hub kernels on (:func:`hub_kernels`): they swap forwards after the
build, outside the kit's ledger and its proof.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ligerkit.errors import HubKernelsError, LateApplyError
from ligerkit.hf import has_hub_kernels_switch
from ligerkit.kit.ledger import Entry
from ligerkit.naming import MISSING, qualified_name


@dataclass(frozen=True)
class StaleBinding:
    """A module global that still holds an object the kit swapped out elsewhere."""

    module: str
    attr: str
    original: str


@dataclass(frozen=True)
class ScanResult:
    """What the scan found in a built model.

    Attributes:
        counts: replacement class name -> number of submodules of that class.
        unused: class swaps whose replacement the model never instantiates (they changed nothing
            for this model).
        leftovers: original class name -> module paths still of that class (empty when the scan
            passed in strict mode).
        stale: stale bindings in other loaded modules.
        function_swaps: swapped functions (not visible as module classes; numerics are checked by
            a GPU smoke run).
        wrappers: filled at the model's first forward by the guard ``scan`` leaves: wrappers
            that changed the model's forward or a watched binding without touching the kit's
            swaps (an autocast wrapper, TRL's LM head), reported rather than refused.
    """

    counts: dict[str, int]
    unused: tuple[str, ...]
    leftovers: dict[str, tuple[str, ...]]
    stale: tuple[StaleBinding, ...]
    function_swaps: tuple[str, ...]
    wrappers: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "counts": dict(self.counts),
            "unused": list(self.unused),
            "leftovers": {k: list(v) for k, v in self.leftovers.items()},
            "stale": [s.__dict__ for s in self.stale],
            "function_swaps": list(self.function_swaps),
            "wrappers": list(self.wrappers),
        }

    def lines(self, model: str = "the model", source: str | None = None, unproven: int = 0) -> list[str]:
        """The scan as plain lines, one finding a line (what ``ligerkit plan`` and ``check`` print);
        ``unproven`` is how many of the report's swaps no check could prove."""
        built = f" built on the meta device from {source}" if source else ""
        lines = [f"Scan of {model}{built}:"]
        lines += [f"  {count:4d} x {name}" for name, count in self.counts.items()]
        lines += [f"  unused (no instance in this model): {swap}" for swap in self.unused]
        lines += [f"  function swap (not visible in the module tree): {fn}" for fn in self.function_swaps]
        lines += [f"  LEFTOVER of {name}: {', '.join(paths[:5])}{' ...' if len(paths) > 5 else ''}"
                  for name, paths in self.leftovers.items()]
        lines += [f"  stale binding: {b.module}.{b.attr} still holds {b.original}" for b in self.stale]
        lines += [f"  wrapper seen at the first forward: {w}" for w in self.wrappers]
        proven = ("in-place writes checked in the whole model" if not unproven else
                  f"{unproven} swap(s) UNPROVEN (see the report)")
        lines.append(f"Validated: swaps measured, {proven}, model scanned. Still to run on a GPU: "
                     "`ligerkit smoke RECIPE` (gradients per parameter, then the loss curve).")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _model_entries(entries: Iterable[Entry]) -> list[Entry]:
    """The swaps a model is built from (compile-mode rebinding of Liger's own names left out)."""
    return [e for e in entries if e.swap.scope != "compile"]


def _class_swaps(entries: Iterable[Entry]) -> list[Entry]:
    return [e for e in _model_entries(entries) if inspect.isclass(e.source) and inspect.isclass(e.replacement)]


def find_stale(entries: list[Entry]) -> tuple[StaleBinding, ...]:
    """Loaded modules whose globals still hold an original the kit swapped (outside the ledger)."""
    entries = _model_entries(entries)
    originals = {id(e.source): e.source for e in entries if e.source is not MISSING}
    patched_at = {(id(e.owner), e.attr) for e in entries}
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith("ligerkit"):
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            if id(value) in originals and originals[id(value)] is value:
                home = getattr(value, "__module__", None) == name  # where it is defined, not an alias
                if (id(module), attr) not in patched_at and not home:
                    found.append(StaleBinding(name, attr, qualified_name(value)))
    return tuple(sorted(set(found), key=lambda s: (s.module, s.attr)))


def hub_kernels(model: Any) -> list[str]:
    """What of transformers' hub kernels (the ``kernels`` package's ``kernelize``) ``model`` carries, one
    finding a line: the ``use_kernels`` switch of a transformers model in it, when on (transformers
    kernelizes the model again whenever it is set to train or to eval), and the submodules whose forward a
    hub kernel already replaced (``kernels`` marks each with ``_kernel_repo``). Empty for a model without
    them."""
    found: list[str] = []
    switched: list[str] = []
    replaced: list[str] = []
    for path, module in model.named_modules():  # one walk; a wrapper's transformers model too
        if has_hub_kernels_switch(type(module)) and getattr(module, "use_kernels", False) is True:
            switched.append(path or "model")
        if "_kernel_repo" in vars(module):
            replaced.append(path or "model")
    if switched:
        found.append("use_kernels=True" + ("" if switched == ["model"] else f" on {', '.join(switched[:3])}"))
    if replaced:
        found.append(f"a hub kernel's forward already on {len(replaced)} module(s): {', '.join(replaced[:4])}"
                     + (" ..." if len(replaced) > 4 else ""))
    return found


def refuse_hub_kernels(model: Any, when: str) -> None:
    """Raise :class:`~ligerkit.errors.HubKernelsError` if ``model`` carries hub kernels (:func:`hub_kernels`);
    ``when`` says where the check ran ("at the scan", "at its first forward")."""
    found = hub_kernels(model)
    if found:
        raise HubKernelsError(
            "Load the model with from_pretrained(..., use_kernels=False) (or set USE_HUB_KERNELS=0 in the "
            "environment before loading, or model.use_kernels = False before kit.scan(model)); "
            "ligerkit.integrations.load_model and ligerkit's own builds do. transformers' hub kernels are on for "
            f"this model {when} ({'; '.join(found)}): when it is loaded onto a GPU or set to train or eval there, "
            "they replace the forward of its norms, rotary and activations with kernels fetched from the Hugging Face "
            "Hub (what trains then depends on the network), after the kit's swaps and outside its proof. "
            "from_pretrained turns them on by default from transformers 5.25 where the `kernels` package is "
            "installed."
        )


def scan_model(model: Any, entries: list[Entry], strict: bool = True) -> ScanResult:
    """Check a built model against the kit's class swaps; raise on leftovers when ``strict`` and, always,
    on transformers' hub kernels (:func:`refuse_hub_kernels`)."""
    refuse_hub_kernels(model, "at the scan")
    swaps = _class_swaps(entries)
    originals = {id(e.source): e for e in swaps}
    replacements = {id(e.replacement): e for e in swaps}
    counts = {qualified_name(e.replacement): 0 for e in swaps}
    leftovers: dict[str, list[str]] = {}
    for path, submodule in model.named_modules():
        cls = type(submodule)
        if id(cls) in replacements and replacements[id(cls)].replacement is cls:
            counts[qualified_name(cls)] += 1
        elif id(cls) in originals and originals[id(cls)].source is cls:
            leftovers.setdefault(qualified_name(cls), []).append(path or "<root>")
    if leftovers and strict:
        detail = "; ".join(f"{cls}: {', '.join(paths[:5])}" + (" ..." if len(paths) > 5 else "")
                           for cls, paths in leftovers.items())
        stale = find_stale(entries)
        held = f" Stale bindings: {', '.join(f'{b.module}.{b.attr}' for b in stale[:5])}." if stale else ""
        raise LateApplyError(
            f"The model still contains original classes the kit replaced ({detail}). apply ran after "
            "the model was built? Call kit.apply(...) before building the model. If it did run first, "
            "the model reaches the original class another way (an import-time alias or a table of "
            f"classes) and this swap does not apply to it: turn that module off.{held}"
        )
    used = {name for name, n in counts.items() if n}
    unused = tuple(f"{e.swap.module}.{e.swap.attr} -> {e.swap.replacement}" for e in swaps
                   if qualified_name(e.replacement) not in used)
    functions = tuple(f"{e.swap.module}.{e.swap.attr}" for e in _model_entries(entries) if e not in swaps)
    return ScanResult(
        counts=counts,
        unused=unused,
        leftovers={k: tuple(v) for k, v in leftovers.items()},
        stale=find_stale(entries),
        function_swaps=functions,
    )
