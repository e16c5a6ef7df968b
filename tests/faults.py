"""Fault injection for the kit's routes: raise at the n-th binding change or import, anywhere in them.

A *fault point* is one of: a ``setattr``/``__import__``/``importlib.import_module`` call made from the
kit's own code or from Liger's, or an attribute/item store or delete executed in Liger's code (its
helpers assign ``modeling_x.Cls = LigerCls`` and ``ACT2FN["relu2"] = ...`` directly). ``count`` runs
an action once and counts its fault points; ``raising_at(n, exc)`` raises ``exc`` just before the
n-th one executes.

A *line event* is finer: every line the kit's modules (``ligerkit.kit.*``) or Liger's helpers execute,
as ``sys.settrace`` reports it. ``line_events`` runs an action once and lists where each one ran;
``interrupting_at_line(n, exc)`` raises ``exc`` (a ``KeyboardInterrupt``, as a Ctrl-C would) just before
the n-th one executes; ``interrupt_points`` picks the events a sweep interrupts at. ``bindings`` reads
every public binding the routes can touch, to compare before and after.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import operator
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from ligerkit.kit.families import all_families
from ligerkit.kit.ledger import live_layers
from ligerkit.kit.snapshot import PROCESS_WIDE_MODULES, Table, import_all, owners_of

_STORES = {"STORE_ATTR", "STORE_SUBSCR", "DELETE_ATTR", "DELETE_SUBSCR"}
_TRACED = ("liger_kernel.transformers.monkey_patch",)  # where the family helpers live
_CALLERS = ("liger_kernel.transformers.monkey_patch", "ligerkit.kit")
_LINES = ("ligerkit.kit.", "liger_kernel.transformers.monkey_patch")  # where line events are counted
TOY_MODULES = ("toy_models.modeling_encoder",)


class Injected(Exception):
    """The injected failure (an ordinary exception)."""


def _from_route(depth: int = 2) -> bool:
    frame = sys._getframe(depth)
    # a module's own top-level code runs once, at its first import: not a step of a route
    return frame.f_globals.get("__name__", "").startswith(_CALLERS) and frame.f_code.co_name != "<module>"


class _Faults:
    def __init__(self, at: int | None, exc: type[BaseException]):
        self.at, self.exc, self.seen = at, exc, 0

    def point(self) -> None:
        self.seen += 1
        if self.at is not None and self.seen == self.at:
            self.at = None  # one fault per run: the clean-up must run unhindered
            raise self.exc(f"injected at fault point {self.seen}")

    def trace(self, frame, event, arg):  # noqa: ANN001, ANN201
        if event == "call":
            if not frame.f_globals.get("__name__", "").startswith(_TRACED) or frame.f_code.co_name == "<module>":
                return None
            frame.f_trace_opcodes = True
            return self.trace
        if event == "opcode":
            op = dis.opname[frame.f_code.co_code[frame.f_lasti]]
            if op in _STORES:
                self.point()
        return self.trace


@contextmanager
def _injecting(at: int | None, exc: type[BaseException]) -> Iterator[_Faults]:
    faults = _Faults(at, exc)
    real_setattr, real_import, real_import_module = builtins.setattr, builtins.__import__, importlib.import_module

    def setattr_(obj, name, value):  # noqa: ANN001, ANN202
        if _from_route():
            faults.point()
        return real_setattr(obj, name, value)

    def import_(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if _from_route():
            faults.point()
        return real_import(name, *args, **kwargs)

    def import_module_(name, package=None):  # noqa: ANN001, ANN202
        if _from_route():
            faults.point()
        return real_import_module(name, package)

    builtins.setattr, builtins.__import__, importlib.import_module = setattr_, import_, import_module_
    old_trace = sys.gettrace()
    sys.settrace(faults.trace)
    try:
        yield faults
    finally:
        sys.settrace(old_trace)
        builtins.setattr, builtins.__import__, importlib.import_module = real_setattr, real_import, real_import_module


def count(action: Callable[[], object]) -> int:
    """How many fault points ``action`` passes through (run it once before, so that first imports and
    caches do not count)."""
    with _injecting(None, Injected) as faults:
        action()
    return faults.seen


def raising_at(n: int, exc: type[BaseException], action: Callable[[], object]) -> BaseException | None:
    """Run ``action`` with ``exc`` raised at its n-th fault point; return what escaped (or ``None``)."""
    with _injecting(n, exc):
        try:
            action()
        except BaseException as escaped:  # noqa: BLE001 - the test inspects whatever escapes
            return escaped
    return None


class Line(NamedTuple):
    """Where one line event ran: module, line number, and the code object running it."""

    module: str
    line: int
    code: types.CodeType

    def __str__(self) -> str:
        return f"{self.module}:{self.line}"


class _Recorder:
    """Lists the line events of the kit's and Liger's helpers' frames (not a module's import-time code)."""

    def __init__(self) -> None:
        self.events: list[Line] = []

    def trace(self, frame, event, arg):  # noqa: ANN001, ANN201
        if event == "call":
            counted = frame.f_globals.get("__name__", "").startswith(_LINES) and frame.f_code.co_name != "<module>"
            return self.trace if counted else None
        if event == "line":
            self.events.append(Line(frame.f_globals["__name__"], frame.f_lineno, frame.f_code))
        return self.trace


class _Interrupter:
    """Raises ``exc`` just before the ``runs``-th line event at ``where``. Only frames running
    ``where.code`` are line-traced, so a run is not slowed down everywhere else."""

    def __init__(self, where: Line, runs: int, exc: type[BaseException]):
        self.where, self.runs, self.exc = where, runs, exc

    def trace(self, frame, event, arg):  # noqa: ANN001, ANN201
        if event == "call":
            return self.trace if frame.f_code is self.where.code else None
        if event == "line" and frame.f_lineno == self.where.line:
            self.runs -= 1
            if self.runs == 0:  # raising here also ends the tracing (CPython unsets it)
                raise self.exc(f"interrupted at {self.where}")
        return self.trace


def _traced(trace: Callable[..., object], action: Callable[[], object]) -> BaseException | None:
    old_trace = sys.gettrace()
    sys.settrace(trace)
    try:
        action()
    except BaseException as escaped:  # noqa: BLE001 - the caller inspects whatever escapes
        return escaped
    finally:
        sys.settrace(old_trace)
    return None


def line_events(action: Callable[[], object]) -> list[Line]:
    """Every line event ``action`` makes in the kit's modules and Liger's helpers, in order (run it once
    before, so that first imports and caches do not count)."""
    recorder = _Recorder()
    escaped = _traced(recorder.trace, action)
    if escaped is not None:
        raise escaped
    return recorder.events


def interrupting_at_line(n: int, exc: type[BaseException], action: Callable[[], object],
                         events: Sequence[Line]) -> BaseException | None:
    """Run ``action`` with ``exc`` raised just before its n-th line event, as ``events`` (from
    :func:`line_events` on the same action) lists them; return what escaped (or ``None``: the run
    never reached that event, i.e. it no longer makes the events listed)."""
    where = events[n - 1]
    return _traced(_Interrupter(where, list(events[:n]).count(where), exc).trace, action)


def interrupt_points(events: Sequence[Line], first: int = 1) -> list[int]:
    """The line events (1-based) a sweep interrupts at: every line that runs, at its first ``first``
    runs and its last one. A line that runs more often is the body of a loop (over a snapshot's
    bindings, ``sys.modules``, the helper's flags, the swaps); taking every run of those would take
    some 20,000 applies per official route, so a loop is interrupted on entry and on its last turn."""
    runs: Counter[Line] = Counter()
    last: dict[Line, int] = {}
    chosen = set()
    for n, where in enumerate(events, 1):
        runs[where] += 1
        last[where] = n
        if runs[where] <= first:
            chosen.add(n)
    return sorted(chosen | set(last.values()))


def _label(owner: object) -> str:
    if isinstance(owner, Table):
        return f"{owner.module}.{owner.name}"
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    return f"{owner.__module__}.{owner.__qualname__}"  # type: ignore[attr-defined]


def label(owner: object, key: object) -> str:
    """``owner.key`` as :func:`differing` names a binding."""
    return f"{_label(owner)}.{key}"


_OWNERS: list[object] = []


def owners() -> list[object]:
    """The owners :func:`bindings` reads, found once while no kit holds a swap: a name rebound to a
    Liger class would hide the original class, and its attributes, from a later search."""
    if not _OWNERS:
        assert not live_layers(), "faults.bindings() is first called while a kit holds swaps"
        names = {m for f in all_families().values() for m in f.modeling_modules} | set(PROCESS_WIDE_MODULES)
        _OWNERS.extend(owners_of(import_all(sorted(names | set(TOY_MODULES)))))
    return _OWNERS


def bindings() -> dict[int, dict[object, object]]:
    """Every binding the routes can touch, per owner (by id): the globals of every family's modeling
    modules, of the process-wide modules and of the toy models, the attributes of the classes they
    define, and the entries of the tables they hold (``ACT2FN``, a model's ``NORM2FN``)."""
    return {id(owner): dict(owner.items() if isinstance(owner, Table) else vars(owner)) for owner in owners()}


def differing(before: dict[int, dict[object, object]], after: dict[int, dict[object, object]]) -> list[str]:
    """``owner.attr`` of every public binding that holds another object (or appeared, or went) in ``after``."""
    found = []
    for owner in owners():
        old, new = before[id(owner)], after[id(owner)]
        if list(old) == list(new) and all(map(operator.is_, old.values(), new.values())):
            continue
        found += [label(owner, key) for key in old.keys() | new.keys()
                  if not (isinstance(key, str) and key.startswith("_")) and old.get(key, ...) is not new.get(key, ...)]
    return sorted(found)
