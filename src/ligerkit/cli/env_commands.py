"""``ligerkit env`` and ``ligerkit --version``: the installed versions against the tested stacks.

Both read :data:`ligerkit.environment.TESTED`, the one list of tested stacks. ``--version`` reads only
package metadata (no torch); ``env`` also asks torch for the accelerator.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ligerkit.cli.common import JsonOpt, app, command, emit_json, out, run


def version_lines() -> list[str]:
    """``ligerkit X.Y.Z``, then every tested stack, one line each."""
    from ligerkit import __version__
    from ligerkit.environment import tested_lines

    return [f"ligerkit {__version__}", "tested stacks:", *(f"  {line}" for line in tested_lines())]


def _print_version(value: bool) -> None:
    if value:
        for line in version_lines():
            out.print(line, markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print ligerkit's version and the tested stacks, then exit.")] = False,
) -> None:
    """Wire Liger Kernel into a training recipe before the model is built, and prove every swap."""


def environment_view() -> dict[str, Any]:
    """What ``ligerkit env --json`` prints: ligerkit's version, the accelerator, each package installed and
    tested, the tested stack this is (or what is outside them), the Liger helpers known to fail here."""
    from ligerkit import __version__
    from ligerkit.environment import PACKAGES, TESTED, accelerator, installed, tested_stack, tested_versions, untested

    found = installed()
    stack = tested_stack(found)
    kind = accelerator()
    device = None
    if kind == "cuda":
        import torch

        device = torch.cuda.get_device_name(0)
    return {
        "ligerkit": __version__,
        "accelerator": kind,
        "device": device,
        "packages": {p: {"installed": found[p], "tested": list(tested_versions(p))} for p in PACKAGES},
        "tested_stack": stack.where if stack is not None else None,
        "untested": untested(found),
        "failing_helpers": {"helpers": list(stack.failing_helpers), "why": stack.why} if stack is not None else None,
        "tested": [{"where": s.where, "versions": dict(s.versions), "failing_helpers": list(s.failing_helpers),
                    "why": s.why} for s in TESTED],
    }


def environment_lines(view: dict[str, Any]) -> list[str]:
    """The plain text of ``ligerkit env``."""
    from ligerkit.environment import tested_lines

    kind = view["accelerator"]
    lines = [f"ligerkit {view['ligerkit']}",
             f"accelerator: {kind} ({view['device']})" if view["device"] else f"accelerator: {kind}" if kind else
             "accelerator: none (Liger's kernels need a CUDA GPU or an Ascend NPU: patching and builds only here)",
             f"{'package':<14}{'installed':<14}tested"]
    for name, row in view["packages"].items():
        lines.append(f"{name:<14}{row['installed'] or '-':<14}{', '.join(row['tested'])}")
    if view["tested_stack"] is not None:
        lines.append(f"this stack: tested ({view['tested_stack']})")
        failing = view["failing_helpers"]
        if failing["helpers"]:
            lines.append(f"known to fail here: Liger's {', '.join(failing['helpers'])} ({failing['why']})")
    else:
        lines.append(f"this stack: untested: {view['untested']} (ligerkit warns once and carries on)")
    return [*lines, "tested stacks:", *(f"  {line}" for line in tested_lines())]


@command("Installed versions against the tested ones, and the accelerator.")
def env(as_json: JsonOpt = False) -> None:
    """Print ligerkit's version, the accelerator (CUDA, NPU or none), each package's installed and tested
    versions (torch, transformers, liger-kernel, peft, trl), whether this is a tested stack and which of
    Liger's helpers are known to fail on it, then every tested stack.

    A stack outside the tested ones is not refused: ligerkit warns once per process, where it first
    applies kernels, and carries on. Exit 0 either way.
    """

    def body() -> None:
        view = environment_view()
        if as_json:
            emit_json(view)
            return
        for line in environment_lines(view):
            out.print(line, markup=False, highlight=False)

    run(body)
