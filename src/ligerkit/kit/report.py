"""What an ``apply`` did, as measured: routes, module selection, and every real swap.

``LigerKernelReport`` aggregates one or more :class:`Application` records (one per ``apply``
call on a kit). Nothing appears in ``patched`` unless the kit saw the binding change.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ROUTE_OFFICIAL = "official"
ROUTE_CUSTOM = "custom"
ROUTE_COMPOSITE = "composite"
ROUTE_NONE = "none"


@dataclass(frozen=True)
class Swap:
    """One binding the kit saw change.

    Attributes:
        module: dotted module holding the binding (``torch.nn`` for a process-wide one).
        attr: the name bound there; ``Class.attr`` for a class attribute.
        original: qualified name of the object that was bound before.
        replacement: qualified name of the object bound now.
        name: semantic module that caused it (``rms_norm``, a custom_patches key, ...).
        scope: ``family`` for the family's own modules, ``process`` for process-wide bindings
            (every later user of that binding gets the replacement too); measured from who holds
            the binding, not assumed from the route. ``compile``: a name in Liger's own modules
            rebound in compile mode (``ligerkit.compile.routes``; process-wide too).
        shared: another kit had already made this very swap; this kit holds it too, so either
            kit may revert first.
    """

    module: str
    attr: str
    original: str
    replacement: str
    name: str
    scope: str = "family"
    shared: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Application:
    """The measured outcome of one ``apply`` call."""

    route: str
    family: str | None
    helper: str | None
    modules: Mapping[str, bool]
    requested: str | Mapping[str, bool]
    excluded: tuple[str, ...]
    noop: tuple[str, ...]
    patched: tuple[Swap, ...]
    notes: tuple[str, ...] = ()
    probed: tuple[str, ...] = ()
    unprobed: tuple[str, ...] = ()
    left_off: Mapping[str, str] = field(default_factory=dict)
    differences: tuple[str, ...] = ()  # official swaps whose math differs from the source's, with the size
    unproven: tuple[str, ...] = ()  # in-place writes not checked in the whole model; unprobeable replacements
    compile: bool = False  # applied for a compiled model (``apply(..., compile=True)``)
    compile_routes: tuple[Swap, ...] = ()  # names in Liger's modules rebound to ligerkit.compile.ops
    compile_inline: tuple[str, ...] = ()  # Liger replacements with no compile-mode operator
    fallback_from: str | None = None  # a custom map applied because this family's official helper failed: its error

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "compile": self.compile,
            "compile_routes": [s.to_dict() for s in self.compile_routes],
            "compile_inline": list(self.compile_inline),
            "route": self.route,
            "family": self.family,
            "helper": self.helper,
            "requested": self.requested if isinstance(self.requested, str) else dict(self.requested),
            "modules": dict(self.modules),
            "excluded": list(self.excluded),
            "noop": list(self.noop),
            "patched": [s.to_dict() for s in self.patched],
            "notes": list(self.notes),
            "probed": list(self.probed),
            "unprobed": list(self.unprobed),
            "differences": list(self.differences),
            "unproven": list(self.unproven),
            "left_off": dict(self.left_off),
            "fallback_from": self.fallback_from,
        }


@dataclass(frozen=True)
class LigerKernelReport:
    """Aggregated, measured report of every ``apply`` made on one kit (or of a single one)."""

    applications: tuple[Application, ...] = ()
    environment_gaps: tuple[str, ...] = field(default=())

    @property
    def route(self) -> str:
        """``official``, ``custom``, ``composite`` (both on one kit) or ``none``."""
        routes = {a.route for a in self.applications}
        if not routes:
            return ROUTE_NONE
        return routes.pop() if len(routes) == 1 else ROUTE_COMPOSITE

    @property
    def routes(self) -> tuple[str, ...]:
        """The route of each application, in order."""
        return tuple(a.route for a in self.applications)

    @property
    def families(self) -> tuple[str, ...]:
        """Families (or custom labels) in order of application, without repeats."""
        return tuple(dict.fromkeys(a.family for a in self.applications if a.family))

    @property
    def family(self) -> str | None:
        """The family when there is exactly one, else ``None``."""
        return self.families[0] if len(self.families) == 1 else None

    @property
    def helpers(self) -> tuple[str, ...]:
        """Liger helpers called (official applications only)."""
        return tuple(dict.fromkeys(a.helper for a in self.applications if a.helper))

    @property
    def helper(self) -> str | None:
        """The helper when exactly one was called, else ``None``."""
        return self.helpers[0] if len(self.helpers) == 1 else None

    @property
    def modules(self) -> dict[str, bool]:
        """Effective on/off of every module; on if any application turned it on."""
        merged: dict[str, bool] = {}
        for app in self.applications:
            for name, on in app.modules.items():
                merged[name] = merged.get(name, False) or on
        return merged

    @property
    def excluded(self) -> tuple[str, ...]:
        """Modules kept off by ``excluded_modules``."""
        return tuple(dict.fromkeys(n for a in self.applications for n in a.excluded))

    @property
    def noop_flags(self) -> tuple[str, ...]:
        """Flags that were on but changed nothing (qualified by family)."""
        return tuple(f"{a.family}:{n}" for a in self.applications for n in a.noop)

    @property
    def left_off(self) -> dict[str, str]:
        """Modules ``auto`` left off on purpose (qualified by family), with the reason."""
        return {f"{a.family}:{n}": why for a in self.applications for n, why in a.left_off.items()}

    @property
    def unprobed(self) -> tuple[str, ...]:
        """Custom patches whose math was not checked, with why."""
        return tuple(u for a in self.applications for u in a.unprobed)

    @property
    def differences(self) -> tuple[str, ...]:
        """Official swaps whose replacement computes something else than the source, with the size."""
        return tuple(d for a in self.applications for d in a.differences)

    @property
    def unproven(self) -> tuple[str, ...]:
        """Swaps no check could prove: in-place writes the whole model could not check, replacements
        the catalog has no reference for."""
        return tuple(u for a in self.applications for u in a.unproven)

    @property
    def patched(self) -> tuple[Swap, ...]:
        """Every real swap, in the order it happened."""
        return tuple(s for a in self.applications for s in a.patched)

    @property
    def compile_routes(self) -> tuple[Swap, ...]:
        """Names in Liger's modules rebound to ligerkit's compile-mode operators (compile mode)."""
        return tuple(s for a in self.applications for s in a.compile_routes)

    @property
    def compile_inline(self) -> tuple[str, ...]:
        """Liger replacements with no compile-mode operator (``torch.compile`` traces into them)."""
        return tuple(dict.fromkeys(x for a in self.applications for x in a.compile_inline))

    @property
    def fallbacks(self) -> dict[str, str]:
        """Families whose official helper failed and got ligerkit's proven map instead, with the error."""
        return {a.family or "(unnamed)": a.fallback_from for a in self.applications if a.fallback_from}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (``json.dumps(report.to_dict())`` works)."""
        return {
            "route": self.route,
            "families": list(self.families),
            "helpers": list(self.helpers),
            "modules": self.modules,
            "excluded": list(self.excluded),
            "noop_flags": list(self.noop_flags),
            "left_off": self.left_off,
            "unprobed": list(self.unprobed),
            "differences": list(self.differences),
            "unproven": list(self.unproven),
            "patched": [s.to_dict() for s in self.patched],
            "compile": any(a.compile for a in self.applications),
            "compile_routes": [s.to_dict() for s in self.compile_routes],
            "compile_inline": list(self.compile_inline),
            "applications": [a.to_dict() for a in self.applications],
            "environment_gaps": list(self.environment_gaps),
            "fallbacks": self.fallbacks,
        }

    def __str__(self) -> str:
        from rich.console import Console

        buffer = io.StringIO()
        console = Console(file=buffer, width=140, color_system=None, force_terminal=False)
        render_report(self, console)
        return buffer.getvalue().rstrip()


def render_report(report: LigerKernelReport, console: Any) -> None:
    """Print the report as tables on a rich console: the four facts every run must state."""
    from rich import box
    from rich.table import Table

    console.print(f"Route: {report.route}")
    for app in report.applications:
        how = f"helper {app.helper}" if app.helper else "custom_patches map"
        console.print(f"  - {app.route} {app.family or '(unnamed)'}: {how}")
        if app.fallback_from:
            console.print(f"    FALLBACK: Liger's official helper failed ({app.fallback_from}); applied instead: "
                          "ligerkit's proven map for the family, through the custom route", markup=False,
                          soft_wrap=True)
        for note in app.notes:
            console.print(f"    note: {note}", markup=False, soft_wrap=True)
        for name, why in app.left_off.items():
            console.print(f"    left off: {name}: {why}", markup=False, soft_wrap=True)
        for line in app.probed:
            console.print(f"    probe: {line}", markup=False, soft_wrap=True)
        for line in app.unprobed:
            console.print(f"    NOT probed: {line}", markup=False, soft_wrap=True)
        for line in app.differences:
            console.print(f"    DIFFERS: {line}", markup=False, soft_wrap=True)
        for line in app.unproven:
            console.print(f"    UNPROVEN: {line}", markup=False, soft_wrap=True)
    selection = Table(
        title="Module selection (as resolved, Liger defaults included)", title_justify="left", box=box.SIMPLE
    )
    for col in ("family", "module", "on", "swaps"):
        selection.add_column(col)
    for app in report.applications:
        counts: dict[str, int] = {}
        for swap in app.patched:
            counts[swap.name] = counts.get(swap.name, 0) + 1
        for name, on in app.modules.items():
            mark = "on" if on else ("excluded" if name in app.excluded else "off")
            if name in app.left_off:
                mark = "left off"
            if name in app.noop:
                mark += " (no effect)"
            selection.add_row(app.family or "-", name, mark, str(counts.get(name, 0)))
    console.print(selection)
    console.print(f"Swapped symbols ({len(report.patched)}):")
    for s in report.patched:
        where = f"{s.module}.{s.attr}"
        was = "" if s.original == where else f" (was {s.original})"
        scope = "  (process-wide)" if s.scope == "process" else ""
        scope += "  (shared with another kit)" if s.shared else ""
        console.print(f"  [swap] {s.name}: {where}{was} -> {s.replacement}{scope}", markup=False, soft_wrap=True)
    if any(a.compile for a in report.applications):
        kernels = ", ".join(f"{s.name} ({s.module}.{s.attr} -> {s.replacement})" for s in report.compile_routes)
        console.print(f"Compile mode: Liger's kernels run as ligerkit.compile operators: {kernels or 'none'}",
                      markup=False, soft_wrap=True)
        for line in report.compile_inline:
            console.print(f"  no compile-mode operator for {line}: torch.compile traces into Liger's function",
                          markup=False, soft_wrap=True)
    if report.environment_gaps:
        console.print("Environment gaps (what this machine cannot prove):")
        for gap in report.environment_gaps:
            console.print(f"  - {gap}", soft_wrap=True)
