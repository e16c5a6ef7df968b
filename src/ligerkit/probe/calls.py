"""The calls a whole model makes of the symbols being judged, recorded while it runs.

A probe on made-up inputs proves a function in isolation; a swap is about the calls the model makes:
a rotary called with ``unsqueeze_dim=2`` on (batch, seq, heads, dim) tensors, on a slice, with
position ids; a norm whose instances hold another ``eps``; an MLP called with an extra argument. So
the module's whole model runs once (:func:`ligerkit.probe.runnable.runnable_model`) and every call of
every watched symbol is recorded: where it was made, each argument and, for a class, the instance
called with its constructor's arguments (:mod:`~ligerkit.probe.call_text` writes them down).

Calls are grouped by :class:`Signature`: what the call passes and what it is called on, without the
call site, so a model of 28 identical layers makes one signature and a call site that differs in any
argument makes its own. Each signature keeps the first call's arguments (and a copy of its instance)
for the replay (:mod:`ligerkit.probe.replay`), and every call site it was seen at. The recordings
are kept for the process: the symbols judged together cost one run of the whole model.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ligerkit.naming import qualified_name, stands_for
from ligerkit.probe import verdict_cache
from ligerkit.probe.call_text import bound_call, describe, instance_state, site_of
from ligerkit.probe.runnable import NeverUsed, Unrunnable, no_class_caches, runnable_model
from ligerkit.probe.stand_ins import liger_stand_ins
from ligerkit.probe.top_model import config_fingerprint

__all__ = ["Recording", "Signature", "Unseen", "bare_copy", "constructions", "recorded_calls", "recording"]

_MISSING = object()


@dataclass
class Signature:
    """One distinct way the model calls a symbol, with the first such call kept for the replay.

    ``args``/``kwargs`` are detached copies of that call's arguments; ``instance`` a copy of the module
    it was made on (classes), ``constructed`` that instance's constructor arguments (``None`` when it
    was not built through its ``__init__``, e.g. a ``copy.deepcopy`` of another layer); ``sites`` counts
    the calls per call site.
    """

    key: str
    text: str  # the call as a reader sees it: argument names with shapes and values
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    instance: nn.Module | None = None
    constructed: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    sites: Counter[str] = field(default_factory=Counter)

    @property
    def calls(self) -> int:
        """How many calls had this signature."""
        return sum(self.sites.values())


@dataclass
class Recording:
    """Every call of one symbol in one run of the whole model, grouped by signature."""

    symbol: str
    model: str = ""
    signatures: dict[str, Signature] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        """How many calls were recorded."""
        return sum(s.calls for s in self.signatures.values())

    @property
    def sites(self) -> list[str]:
        """Every call site, in the order first seen."""
        return list(dict.fromkeys(site for s in self.signatures.values() for site in s.sites))


def _copy_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def one(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return type(value)(one(v) for v in value) if not hasattr(value, "_fields") else value
        return value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def bare_copy(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` without any hook (the recording's own included)."""
    found = copy.deepcopy(module)
    for sub in found.modules():
        for name in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks",
                     "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                     "_state_dict_hooks", "_load_state_dict_pre_hooks"):
            hooks = getattr(sub, name, None)
            if isinstance(hooks, dict):
                hooks.clear()
    return found


class _Recorder:
    """Records the calls of the watched symbols into one :class:`Recording` each."""

    def __init__(self, symbols: Sequence[object], made: weakref.WeakKeyDictionary):
        self.symbols = list(symbols)
        self.made = made
        self.recordings: dict[int, Recording] = {}
        self._states: dict[int, str] = {}
        self._by_state: dict[tuple[type, str], tuple[tuple[Any, ...], dict[str, Any]]] | None = None

    def reset(self) -> None:
        self.recordings = {id(s): Recording(qualified_name(s)) for s in self.symbols}
        self._states, self._by_state = {}, None

    def record(self, symbol: object, site: str, args: tuple, kwargs: dict, instance: nn.Module | None) -> None:
        target = instance.forward if instance is not None else symbol
        try:
            signature = inspect.signature(stands_for(target))
        except (TypeError, ValueError):
            signature = None
        text = ", ".join(f"{n}={describe(v)}" for n, v in bound_call(signature, args, kwargs))
        key, constructed = text, None
        if instance is not None:
            constructed = self.constructed(instance)
            state = self._states.get(id(instance))
            if state is None:
                state = self._states[id(instance)] = (f"{instance_state(instance)} | built with "
                                                      f"{describe(constructed) if constructed else 'no __init__ call'}")
            key = f"{state} | {text}"
        recording = self.recordings[id(symbol)]
        found = recording.signatures.get(key)
        if found is None:
            kept_args, kept_kwargs = _copy_args(args, kwargs)
            found = recording.signatures[key] = Signature(
                key, text, kept_args, kept_kwargs, bare_copy(instance) if instance is not None else None, constructed)
        found.sites[site] += 1

    def constructed(self, instance: nn.Module) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The constructor arguments ``instance`` was built with; for a copy (``copy.deepcopy`` of a layer
        runs no ``__init__``), those of a built instance of its class in the same state, which the patched
        model would have copied the same way; ``None`` when there is neither."""
        found = self.made.get(instance)
        if found is not None:
            return found
        if self._by_state is None:
            self._by_state = {}
            for other, ctor in list(self.made.items()):
                self._by_state.setdefault((type(other), instance_state(other)), ctor)
        return self._by_state.get((type(instance), instance_state(instance)))


@contextmanager
def constructions(classes: Sequence[type]) -> Iterator[weakref.WeakKeyDictionary]:
    """In the block, every instance of exactly one of ``classes`` built through its ``__init__`` is
    noted with its constructor's arguments (yielded: instance -> ``(args, kwargs)``); the classes are
    left as they were."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    saved = []
    try:
        for cls in classes:
            own = cls.__dict__.get("__init__", _MISSING)
            init = cls.__init__

            def noting(self: Any, *args: Any, _init: Callable[..., None] = init, _cls: type = cls,
                       **kwargs: Any) -> None:
                if type(self) is _cls and self not in made:
                    made[self] = (args, kwargs)
                _init(self, *args, **kwargs)

            functools.update_wrapper(noting, init)
            saved.append((cls, own))
            cls.__init__ = noting  # type: ignore[misc]
        yield made
    finally:
        for cls, own in reversed(saved):
            if own is _MISSING:
                delattr(cls, "__init__")
            else:
                cls.__init__ = own  # type: ignore[misc]


@contextmanager
def _watch_functions(recorder: _Recorder, module: types.ModuleType, functions: Sequence[Callable[..., Any]],
                     called: set[int]) -> Iterator[None]:
    namespace = vars(module)
    bound = [(name, fn) for fn in functions for name, value in list(namespace.items()) if value is fn]

    def wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            called.add(id(fn))
            recorder.record(fn, site_of(sys._getframe(1)), args, kwargs, None)
            return fn(*args, **kwargs)

        return recorded

    wrappers = {id(fn): wrapper(fn) for fn in functions}
    try:
        for name, fn in bound:
            namespace[name] = wrappers[id(fn)]
        yield
    finally:
        for name, fn in bound:
            namespace[name] = fn


@contextmanager
def recording(module: types.ModuleType, symbols: Sequence[object], made: weakref.WeakKeyDictionary,
              model: nn.Module) -> Iterator[tuple[_Recorder, set[int]]]:
    """In the block, every call ``model`` makes of ``symbols`` (classes: their exact instances in
    ``model``; functions: wherever ``module`` binds them) is recorded; yields the recorder (reset at
    entry) and the ids of the symbols called so far."""
    recorder = _Recorder(symbols, made)
    recorder.reset()
    called: set[int] = set()
    classes = {id(s): s for s in symbols if isinstance(s, type)}
    handles = []

    def hook(instance: nn.Module, args: tuple, kwargs: dict) -> None:
        symbol = classes[id(type(instance))]
        called.add(id(symbol))
        recorder.record(symbol, site_of(sys._getframe(1)), args, kwargs, instance)

    with ExitStack() as stack:
        for m in model.modules():
            if id(type(m)) in classes and type(m) is classes[id(type(m))]:
                handles.append(m.register_forward_pre_hook(hook, with_kwargs=True))
        stack.callback(lambda: [h.remove() for h in handles])
        stack.enter_context(_watch_functions(recorder, module, [s for s in symbols if not isinstance(s, type)
                                                                and callable(s)], called))
        yield recorder, called


# --- the recordings of a process -------------------------------------------------------------------
@dataclass(frozen=True)
class Unseen:
    """Why a symbol has no recorded calls: it was never called, or the whole model did not run."""

    never_called: bool
    reason: str


_RECORDINGS: dict[tuple[str, int, str, str, str], dict[int, Recording | Unseen]] = {}  # per model run


def recorded_calls(source: object, module: types.ModuleType, config: Any = None, device: str = "cpu",
                   together: Sequence[object] = ()) -> Recording | Unseen:
    """Every call ``module``'s whole model makes of ``source`` (a class or a function of the module), from
    one run of it (:func:`~ligerkit.probe.runnable.runnable_model`, from ``config``, else the module's own);
    ``together``'s calls are recorded in the same run. Kept per process and what the module binds now."""
    key = (module.__name__, id(module), config_fingerprint(config) if config is not None else "", str(device),
           verdict_cache.bindings_now(module) or "")
    if len(_RECORDINGS) > 16 and key not in _RECORDINGS:
        _RECORDINGS.clear()
    kept = _RECORDINGS.setdefault(key, {})
    if id(source) not in kept:
        symbols = [s for s in dict.fromkeys([source, *together]) if id(s) not in kept]
        kept.update(_record(source, symbols, module, config, device))
    return kept[id(source)]


def _record(source: object, symbols: list[object], module: types.ModuleType, config: Any,
            device: str) -> dict[int, Recording | Unseen]:
    last: list[Any] = []

    @contextmanager
    def watch(model: nn.Module) -> Iterator[Callable[[], bool]]:
        stand_ins(model)
        with recording(module, symbols, made, model) as (recorder, called):
            last[:] = [recorder]
            yield lambda: id(source) in called

    with no_class_caches(module), constructions([s for s in symbols if isinstance(s, type)]) as made, \
            liger_stand_ins(module, active=torch.device(device).type == "cpu") as stand_ins:  # swaps made there
        try:
            run = runnable_model(module, config, watch, device=device, symbol=qualified_name(source))
        except NeverUsed as exc:
            return {id(source): Unseen(not exc.inputs_failed, str(exc))}
        except Unrunnable as exc:
            return {id(source): Unseen(False, str(exc))}
    found: dict[int, Recording | Unseen] = {}
    model = type(run.model).__name__ + (f" ({run.label})" if run.label else "")
    for symbol in symbols:
        rec = last[0].recordings[id(symbol)]
        if rec.calls:
            rec.model = model
            found[id(symbol)] = rec
    return found
