"""Fault injection for the kit's routes: raise at the n-th binding change or import, anywhere in them.

A *fault point* is one of: a ``setattr``/``__import__``/``importlib.import_module`` call made from the
kit's own code or from Liger's, or an attribute/item store or delete executed in Liger's code (its
helpers assign ``modeling_x.Cls = LigerCls`` and ``ACT2FN["relu2"] = ...`` directly). ``count`` runs
an action once and counts its fault points; ``raising_at(n, exc)`` raises ``exc`` just before the
n-th one executes.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_STORES = {"STORE_ATTR", "STORE_SUBSCR", "DELETE_ATTR", "DELETE_SUBSCR"}
_TRACED = ("liger_kernel.transformers.monkey_patch",)  # where the family helpers live
_CALLERS = ("liger_kernel.transformers.monkey_patch", "ligerkit.kit")


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
