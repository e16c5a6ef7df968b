"""Would an in-place replacement corrupt the model around it? Found on the CPU, by emulation.

Liger's default RMSNorm writes the input's gradient into the incoming gradient ``dY`` to save
memory, and its rotary writes the rotated q/k into the storage it was given (and, in backward,
``dq``/``dk`` into the incoming gradients). That is safe only when nothing else holds those
tensors. Where a norm's output is added straight to the residual (``residual + norm(h)``:
post-norm and sandwich layouts), the add's backward hands one gradient tensor to both branches,
so the write corrupts the residual's gradient; the loss does not change, the gradients do (by
1e5x and more, measured on an H200).

Sharing shows where the symbol's output is consumed, so the detector builds the module's *whole*
model, its top class (``runnable.py``: causal LM, conditional generation, or the config's own
model), never a smaller block: a norm that is safe inside an MoE block can feed two branches of the
decoder layer around it. It runs one forward and backward twice with the symbol's *own* math
wrapped: once out of place, once with the replacement's writes emulated (``dY.copy_(dX)``;
``q.copy_(rotated)``). Identical gradients mean no other consumer shares what the replacement
writes; any difference is the hazard, with the parameters it reached. When the whole model cannot
be built or run, or never uses the symbol, the verdict is *unproven*, never safe.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ligerkit.naming import qualified_name
from ligerkit.probe import runnable, verdict_cache
from ligerkit.probe.emulate import emulated_module_forward, emulated_rotary
from ligerkit.probe.runnable import Runnable, Unrunnable, no_class_caches, runnable_model
from ligerkit.probe.stand_ins import liger_stand_ins
from ligerkit.probe.training_form import current_form
from ligerkit.probe.top_model import config_fingerprint

BACKWARD = "backward"  # dX written into dY
FORWARD_AND_BACKWARD = "forward+backward"  # rotated q/k into their storage, dq/dk into the gradients
_TOLERANCE = 1e-4  # relative; the emulated write changes gradients by orders of magnitude, or not at all


SAFE, HAZARD, UNPROVEN = "safe", "hazard", "unproven"


@dataclass(frozen=True)
class AliasingResult:
    """Whether an in-place write of a replacement for ``source`` is safe in its whole model.

    ``model`` names the class the check ran in (``None`` when it could not run): a verdict always
    says what it saw.
    """

    source: str
    checked: bool
    hazard: bool
    reason: str
    affected: tuple[str, ...] = ()
    model: str | None = None

    @property
    def safe(self) -> bool:
        """Checked in the whole model, and nothing else shares what the replacement writes."""
        return self.checked and not self.hazard

    @property
    def verdict(self) -> str:
        """``"safe"``, ``"hazard"`` or ``"unproven"`` (the check could not run in the whole model)."""
        return HAZARD if self.hazard else SAFE if self.checked else UNPROVEN

    def to_dict(self, writes: str = "") -> dict[str, Any]:
        """JSON-ready form (``whole_model``: the verdict comes from the module's top model)."""
        return {"writes": writes, "verdict": self.verdict, "model": self.model, "whole_model": self.checked,
                "reason": self.reason, "affected": list(self.affected)}


@contextmanager
def _rebound(module: types.ModuleType, obj: object, wrapper: Callable[..., Any]) -> Iterator[None]:
    """Bind ``wrapper`` wherever ``module`` binds ``obj``, for the block only (this probe's own model)."""
    namespace = vars(module)
    names = [name for name, value in list(namespace.items()) if value is obj]
    try:
        for name in names:
            namespace[name] = wrapper
        yield
    finally:
        for name in names:
            namespace[name] = obj


@contextmanager
def _watch_class(cls: type, model: nn.Module) -> Iterator[Callable[[], bool]]:
    calls: list[int] = []
    handles = [m.register_forward_hook(lambda *_: calls.append(1)) for m in model.modules() if type(m) is cls]
    try:
        yield lambda: bool(calls)
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _watch_function(module: types.ModuleType, fn: Callable[..., Any], model: nn.Module) -> Iterator[Callable[[], bool]]:
    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return fn(*args, **kwargs)

    with _rebound(module, fn, counting):
        yield lambda: bool(calls)


@contextmanager
def _emulating(run: Runnable, source: object, module: types.ModuleType, in_place: bool) -> Iterator[None]:
    if isinstance(source, type):
        patched = [m for m in run.model.modules() if type(m) is source]
        for m in patched:
            m.forward = functools.partial(emulated_module_forward, m, source.forward.__get__(m), in_place)
        try:
            yield
        finally:
            for m in patched:
                del m.forward
    else:
        with _rebound(module, source, functools.partial(emulated_rotary, source, in_place)):
            yield


def _gradients(run: Runnable, source: object, module: types.ModuleType, in_place: bool) -> dict[str, torch.Tensor]:
    run.model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with _emulating(run, source, module, in_place):
        loss = run.loss()
        loss.backward()
    found = {"<loss>": loss.detach().reshape(1)}
    found.update({name: p.grad.detach().clone() for name, p in run.model.named_parameters() if p.grad is not None})
    return found


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() > _TOLERANCE * max(float(a.abs().max()), 1e-12)) if a.numel() else False


_CACHE: dict[tuple[int, str, str, str, str, str], AliasingResult] = {}
_DEVICE: ContextVar[str] = ContextVar("ligerkit_in_place_device", default="cpu")


@contextmanager
def checked_on(device: str) -> Iterator[None]:
    """In the block, in-place checks that name no device build and run the whole model on ``device``
    (``suggest --gpu`` and its gradient proof: the kit's own checks then see what the GPU can build)."""
    token = _DEVICE.set(str(device))
    try:
        yield
    finally:
        _DEVICE.reset(token)


def current_device() -> str:
    """The device of the innermost :func:`checked_on`, else ``"cpu"``."""
    return _DEVICE.get()


def in_place_hazard(source: object, module: types.ModuleType, config: Any = None,
                    writes: str = BACKWARD, device: str | None = None, replacement: object = None) -> AliasingResult:
    """Whether an in-place replacement for ``source`` (a norm class, or a rotary function when
    ``writes`` is ``"forward+backward"``) would corrupt another consumer in ``module``'s whole model.

    ``config`` builds the model (the module's own config class at small dimensions when ``None``);
    ``device`` is where it is built and run (``"cuda"`` allows larger models; default: the CPU, or
    the device of an enclosing :func:`checked_on`). The result is cached per symbol, module, config,
    kind of write and device in the process, and on disk (:mod:`~ligerkit.probe.verdict_cache`, whose
    key also holds ``replacement``, the sources and the versions).
    """
    device, form = device or current_device(), current_form()
    bound = verdict_cache.bindings_now(module)  # what the module binds now is part of the model checked
    key = (id(source), module.__name__, config_fingerprint(config) if config is not None else "", writes, str(device),
           form.key if form else "", bound)
    if key not in _CACHE:
        result = verdict_cache.cached(
            "in-place", lambda: _disk_key(source, module, config, writes, str(device), replacement),
            lambda: _detect(source, module, config, device), _dump, functools.partial(_load, qualified_name(source)),
            keep=lambda r: "MemoryError" not in r.reason and "out of memory" not in r.reason)  # a lack, not a verdict
        if bound is None:
            return result
        _CACHE[key] = result
    return _CACHE[key]


def _disk_key(source: object, module: types.ModuleType, config: Any, writes: str, device: str,
              replacement: object) -> dict[str, Any]:
    return {"source": verdict_cache.symbol(source), "module": verdict_cache.module_state(module),
            "config": verdict_cache.config_key(config), "config_classes": verdict_cache.config_classes(module),
            "writes": writes, "device": device, "tolerance": _TOLERANCE,
            "replacement": None if replacement is None else verdict_cache.symbol(replacement),
            "budgets": [runnable.CPU_PARAMETER_BUDGET, runnable.CUDA_PARAMETER_BUDGET],
            "form": form.key if (form := current_form()) else None}


def _dump(result: AliasingResult) -> dict[str, Any]:
    return {"source": result.source, "checked": result.checked, "hazard": result.hazard, "reason": result.reason,
            "affected": list(result.affected), "model": result.model}


def _load(source: str, data: Any) -> AliasingResult:
    """An :class:`AliasingResult` from stored fields, each checked (``ValueError`` for any not valid)."""
    f = verdict_cache.fields(data, {"source": str, "checked": bool, "hazard": bool, "reason": str,
                                    "affected": [str], "model": (str, None)})
    if f["source"] != source or (f["hazard"] and not f["checked"]) or (f["model"] is None) is f["checked"] \
            or (f["affected"] and not f["hazard"]):
        raise ValueError("the stored verdict does not hold together")
    return AliasingResult(source, f["checked"], f["hazard"], f["reason"], tuple(f["affected"]), f["model"])


def _detect(source: object, module: types.ModuleType, config: Any, device: str) -> AliasingResult:
    with no_class_caches(module):
        return _detect_in(source, module, config, device)


def _detect_in(source: object, module: types.ModuleType, config: Any, device: str) -> AliasingResult:
    name, form = qualified_name(source), current_form()
    as_trained = f", as it trains: {form.key}" if form else ""
    with liger_stand_ins(module) as stand_ins:
        @contextmanager
        def watch(model: nn.Module) -> Iterator[Callable[[], bool]]:
            stand_ins(model)
            if isinstance(source, type):
                with _watch_class(source, model) as used:
                    yield used
            else:
                with _watch_function(module, source, model) as used:  # type: ignore[arg-type]
                    yield used

        try:
            run = runnable_model(module, config, watch, device=device)
            if form is not None:  # the model as it trains: adapters, recomputed layers
                form.adapt(run.model)
            run.model.eval()  # no dropout: both runs must differ only by the emulated write
            clean = _gradients(run, source, module, in_place=False)
            written = _gradients(run, source, module, in_place=True)
        except Unrunnable as exc:
            return AliasingResult(name, False, False, f"unproven: the whole model could not be checked ({exc})")
        except Exception as exc:  # the emulated model failed to run: the hazard stays unknown
            return AliasingResult(name, False, False, f"unproven: the emulated run of the whole model{as_trained} "
                                                      f"failed ({type(exc).__name__}: {_short(exc)})")
    affected = tuple(k for k in clean if k in written and _differs(clean[k], written[k]))
    model = type(run.model).__name__
    where = f"in {model} (the whole model{as_trained})"
    if affected:
        shown = ", ".join(affected[:4]) + (" ..." if len(affected) > 4 else "")
        return AliasingResult(name, True, True, f"{where}, another consumer shares what the in-place write "
                              f"overwrites (it changed {len(affected)} gradient(s): {shown})", affected, model)
    return AliasingResult(name, True, False, f"{where}, nothing else shares what it writes", (), model)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + " ..."
