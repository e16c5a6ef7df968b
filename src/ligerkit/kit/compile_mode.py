"""The kit in compile mode (``apply(..., compile=True)``): Liger's kernels through compile-mode
operators, and modules Inductor runs faster left to Inductor.

After a route has swapped the model's classes and functions, ``route_kernels`` rebinds the names
those Liger classes call their kernels through (``ligerkit.compile.routes``), once per name per
process: recorded in the kit's ledger with scope ``compile``, reverted with everything else. A Liger
replacement with no compile-mode operator is named in the report (``compile_inline``): there
``torch.compile`` traces into Liger's own autograd function.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import replace

from ligerkit.compile.routes import Route, kernels_called
from ligerkit.environment import environment_summary
from ligerkit.errors import CompileModeError
from ligerkit.kit.custom import LigerPatch, normalize
from ligerkit.kit.ledger import Ledger
from ligerkit.kit.report import Application, Swap
from ligerkit.kit.snapshot import MISSING, Change, current

COMPILE_SCOPE = "compile"


def route_kernels(app: Application, ledger: Ledger) -> Application:
    """``app`` with its Liger kernels routed to the compile-mode operators (recorded in ``ledger``).

    What each swap runs is read from its replacement's code (``ligerkit.compile.routes.kernels_called``);
    a Liger replacement that calls a kernel no operator serves (or none that can be found) is listed in
    ``compile_inline``, with the kernels it calls."""
    objects = {id(e.swap): e.replacement for e in ledger.entries}
    wanted: dict[str, Route] = {}
    inline: list[str] = []
    for swap in app.patched:
        if not swap.replacement.startswith("liger_kernel."):
            continue
        calls = kernels_called(objects[id(swap)]) if id(swap) in objects else None
        for route in calls.routes if calls is not None else ():
            wanted.setdefault(route.kernel, route)
        if calls is None or not calls.fully_routed:
            runs = f" (runs {', '.join(calls.unrouted)})" if calls is not None and calls.unrouted else ""
            inline.append(f"{swap.name}: {swap.replacement}{runs}")
    routed: list[Swap] = []
    for route in wanted.values():
        swap = _rebind(route, ledger)
        if swap is not None:
            routed.append(swap)
    return replace(app, compile=True, compile_routes=tuple(routed), compile_inline=tuple(dict.fromkeys(inline)))


def _rebind(route: Route, ledger: Ledger) -> Swap | None:
    """Bind ``route.replacement`` at its name (or hold it, when another kit already did)."""
    module = importlib.import_module(route.module)
    if ledger.active(module, route.attr) is not None:
        return None  # an earlier apply on this kit routed it already
    now = current(module, route.attr)
    if now is MISSING:
        raise CompileModeError(
            f"compile mode rebinds {route.module}.{route.attr}, which this liger-kernel does not have "
            f"({environment_summary()}); install the tested liger-kernel, or set train.compile: off "
            "(outside a recipe: apply without compile=True) and do not compile the model"
        )
    if now is route.replacement:
        other = ledger.made_elsewhere(module, route.attr, route.replacement)
        return ledger.join(other, route.kernel) if other is not None else None
    return ledger.rebind(Change(module, route.attr, now, route.replacement), route.kernel, COMPILE_SCOPE)


def kernel_of(replacement: object) -> str | None:
    """The one compile-mode kernel a Liger replacement runs (``None``: none, several, or a kernel no
    operator serves)."""
    calls = kernels_called(replacement)
    return calls.routes[0].kernel if calls.fully_routed and len(calls.routes) == 1 else None


def leave_custom_to_inductor(custom_patches: object, wins: Mapping[str, str]
                             ) -> tuple[dict[str, list[LigerPatch]], dict[str, str]]:
    """Split a ``custom_patches`` map: the entries to apply, and ``{name: reason}`` for those whose
    every replacement runs a kernel Inductor wins (``wins``, from ``ligerkit.compile.table``)."""
    grouped: dict[str, list[LigerPatch]] = {}
    for name, patch in normalize(custom_patches):
        grouped.setdefault(name, []).append(patch)
    keep: dict[str, list[LigerPatch]] = {}
    left: dict[str, str] = {}
    for name, patches in grouped.items():
        kernels = {kernel_of(p.replacement) for p in patches}
        if len(kernels) == 1 and next(iter(kernels)) in wins:
            left[name] = wins[next(iter(kernels))]  # type: ignore[index]
        else:
            keep[name] = patches
    return keep, left
