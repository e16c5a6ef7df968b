"""An interrupt at any line of ``apply`` or ``revert`` leaves nothing half-done.

A ``KeyboardInterrupt`` (a ``BaseException``, what Ctrl-C raises) is raised at the line events of the
kit's modules and of Liger's helpers (``faults.interrupt_points``: every line that runs, a loop's body
on entry and on its last turn). After an interrupted ``apply`` every binding the routes can touch is as
it was, the kit holds exactly what it held, and the same kit then applies again, line for line as
before. After an interrupted ``revert`` every binding still swapped is still on the ledger, and a
second ``revert()`` puts every original back.

No model is built inside the sweeps: the official route's checks are cached after the first apply,
and the custom route runs with ``probe=False`` (its probe builds modules; it runs before anything is
swapped, and ``test_atomic.py`` injects failures into it).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

import faults
from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.kit import ledger as ledger_module
from ligerkit.kit.snapshot import Snapshot

ENC = "toy_models.modeling_encoder"
Step = Callable[[LigerKernelKit], object]


@pytest.fixture(autouse=True)
def _clean_after_a_failure():
    """A failing sweep leaves swaps no ledger holds (that is the failure it reports): put every binding
    and the process-wide layers back, so that the next test starts clean."""
    snap = Snapshot(faults.owners())
    yield
    snap.undo()
    ledger_module._LAYERS.clear()


def _official(kit: LigerKernelKit) -> None:
    kit.apply(model_family="qwen3")


def _custom(kit: LigerKernelKit) -> None:
    kit.apply(model_family="enc", probe=False, custom_patches={
        "rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
        "swiglu": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP),
    })


def _nothing(kit: LigerKernelKit) -> None:
    return None


# route -> (what the kit already holds, the apply call interrupted)
APPLIES: dict[str, tuple[Step, Step]] = {
    "official qwen3": (_nothing, _official),
    "custom, on a kit holding official qwen3 (composite)": (_official, _custom),
}


def _warm(setup: Step, apply: Step) -> None:
    """Run the route twice, so that first imports and the checks' caches do not move the line events."""
    for _ in range(2):
        kit = LigerKernelKit()
        setup(kit)
        apply(kit)
        kit.revert()


@pytest.mark.parametrize("route", list(APPLIES))
def test_an_interrupt_at_any_line_of_apply_leaves_every_binding_as_it_was(route):
    setup, apply = APPLIES[route]
    pristine = faults.bindings()
    _warm(setup, apply)
    counter = LigerKernelKit()
    setup(counter)
    events = faults.line_events(lambda: apply(counter))
    counter.revert()
    kit = LigerKernelKit()
    setup(kit)
    held, layers, apps = list(kit._ledger.entries), ledger_module.live_layers(), list(kit._applications)
    before = faults.bindings()
    points = faults.interrupt_points(events)
    assert len(points) > 100, len(points)
    for n in points:
        where = f"{route}: line event {n} of {len(events)} ({events[n - 1]})"
        escaped = faults.interrupting_at_line(n, KeyboardInterrupt, lambda: apply(kit), events)
        assert isinstance(escaped, KeyboardInterrupt), f"{where}: {escaped!r} escaped instead"
        changed = faults.differing(before, faults.bindings())
        assert not changed, f"{where} left {changed} changed"
        assert kit._ledger.entries == held and ledger_module.live_layers() == layers, where
        assert kit._applications == apps, f"{where} left a report of the interrupted apply"
    assert faults.line_events(lambda: apply(kit)) == events  # the same kit applies again, unchanged
    kit.revert()
    assert not faults.differing(pristine, faults.bindings()) and not ledger_module.live_layers()


def _shared(kit: LigerKernelKit) -> list[LigerKernelKit]:
    """``kit`` under another kit holding the same swaps: its revert hands each original up."""
    _official(kit)
    other = LigerKernelKit()
    _official(other)
    return [other]


def _composite(kit: LigerKernelKit) -> list[LigerKernelKit]:
    _official(kit)
    _custom(kit)
    return []


# route -> what applies the kit whose revert is interrupted (and the other kits it makes)
REVERTS: dict[str, Callable[[LigerKernelKit], list[LigerKernelKit]]] = {
    "composite (official qwen3, then custom)": _composite,
    "the older of two kits sharing qwen3's swaps": _shared,
}


@pytest.mark.parametrize("route", list(REVERTS))
def test_a_revert_interrupted_at_any_line_is_finished_by_reverting_again(route):
    prepare = REVERTS[route]
    pristine = faults.bindings()
    for _ in range(2):  # first imports and caches
        kit = LigerKernelKit()
        others = prepare(kit)
        for k in [kit, *others]:
            k.revert()
    kit = LigerKernelKit()
    others = prepare(kit)
    events = faults.line_events(kit.revert)
    target = faults.bindings()  # what a complete revert leaves (the other kits' swaps, if any)
    for other in others:
        other.revert()
    assert others or not faults.differing(pristine, target)
    assert len(events) > 20, len(events)
    for n in range(1, len(events) + 1):
        where = f"{route}: line event {n} of {len(events)} ({events[n - 1]})"
        kit = LigerKernelKit()
        others = prepare(kit)
        entries = list(kit._ledger.entries)
        escaped = faults.interrupting_at_line(n, KeyboardInterrupt, kit.revert, events)
        assert isinstance(escaped, KeyboardInterrupt), f"{where}: {escaped!r} escaped instead"
        if not others:  # whatever is still swapped is still on the ledger, for the second revert
            held = {faults.label(e.owner, e.attr) for e in kit._ledger.entries}
            assert set(faults.differing(target, faults.bindings())) <= held, where
        kit.revert()
        assert not faults.differing(target, faults.bindings()), f"{where}: the second revert left swaps behind"
        assert not kit._ledger.entries, where
        assert {id(e) for e in entries} <= {id(e) for e in kit._reverted}, f"{where}: lost track of a reverted swap"
        for other in others:
            other.revert()
        assert not ledger_module.live_layers(), where
        assert not others or not faults.differing(pristine, faults.bindings()), where
    _composite(kit)  # the kit is usable again
    kit.revert()
    assert not faults.differing(pristine, faults.bindings())
