"""The whole model of a modeling module, built cheaply and run, for model-level probes.

A symbol's math can be probed alone, but how its output is *used* (added straight to the residual,
read again after a rotary wrote over it) shows only where it is consumed, which can be anywhere in
the model: a norm safe inside an MoE block can feed two branches of the decoder layer around it.
So the probes run the module's **top model** (:func:`top_model_class`: the class that holds every
other one, e.g. the causal LM or the conditional-generation model) and nothing smaller: built from
consistently shrunk copies of the config (:mod:`ligerkit.shrink`), each counted on the meta device
against a parameter budget first, then built directly on the device, float32, seeded, with inputs
long enough to route every expert (images with their placeholder tokens where the model takes them).
When the top model cannot be built, run, or never uses the symbol, :class:`Unrunnable` says which
class, which configs were tried and why: there is no fallback to a block.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ligerkit.probe import verdict_cache
from ligerkit.probe.inputs import BATCH, input_candidates
from ligerkit.probe.top_model import (base_config, config_fingerprint, make_model, meta_build_error, meta_model,
                                      top_model_class)
from ligerkit.probe.top_model import class_references, module_config
from ligerkit.shrink import iter_whole_model_configs, whole_model_configs


CPU_PARAMETER_BUDGET = 250_000_000  # three float32 copies with gradients fit a 24 GiB, 2-core machine
CUDA_PARAMETER_BUDGET = 2_000_000_000

__all__ = ["NeverUsed", "Runnable", "Unrunnable", "build_model_class", "class_references", "first_tensor",
           "module_config", "no_class_caches", "parameter_budget", "runnable_model", "top_model_class",
           "whole_model_configs"]


class Unrunnable(Exception):
    """The module's top model could not be built, run, or made to use the probed symbol."""


class NeverUsed(Unrunnable):
    """The top model ran but never used the probed symbol. ``inputs_failed``: some inputs it was given
    failed inside its forward (richer ones, e.g. images), so those paths were not seen."""

    def __init__(self, message: str, inputs_failed: bool):
        super().__init__(message)
        self.inputs_failed = inputs_failed


@dataclass
class Runnable:
    """A built model, the inputs its forward takes, and a scalar loss over its output."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    config: Any = None
    label: str = ""  # which shrunk config built it (``shrink.whole_model_configs``)

    def loss(self) -> torch.Tensor:
        """A scalar with a non-trivial gradient for every parameter that reaches the output: a fixed
        random projection of the output (the same on every device)."""
        out = first_tensor(self.model(*self.args, **self.kwargs))
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.device)
        return (out.float() * weights).sum()


def first_tensor(out: Any) -> torch.Tensor:
    """The main tensor of a model output: logits, last hidden state, or the first floating tensor
    found (inside tuples, lists and dicts too, e.g. a backbone's feature maps)."""
    if isinstance(out, torch.Tensor):
        return out
    for name in ("logits", "last_hidden_state"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return value
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for value in items:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
        if isinstance(value, (tuple, list, dict)):
            try:
                return first_tensor(value)
            except Unrunnable:
                continue
    raise Unrunnable(f"the model returned {type(out).__name__}, with no tensor to take a loss of")


def parameter_budget(device: str | torch.device) -> int:
    """The most parameters a probe model may have on ``device`` (counted on the meta device first)."""
    return CUDA_PARAMETER_BUDGET if torch.device(device).type == "cuda" else CPU_PARAMETER_BUDGET


def build_model_class(cls: type, config: Any, device: str | torch.device = "cpu") -> nn.Module:
    """``cls`` built from ``config`` the way the probes build it (float32, seeded, directly on
    ``device``); raises :class:`Unrunnable` when it does not build."""
    torch.manual_seed(0)
    try:
        with torch.device(device):
            return make_model(cls, config)
    except Exception as exc:
        raise Unrunnable(f"{cls.__name__} does not build from this config ({_short(exc)})") from exc


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


Watch = Callable[[nn.Module], AbstractContextManager[Callable[[], bool]]]


def runnable_model(module: types.ModuleType, config: Any, watch: Watch, device: str | torch.device = "cpu",
                   symbol: str = "it") -> Runnable:
    """The module's top model (:func:`top_model_class`), built and run so that it uses what the
    caller probes.

    ``config`` is the caller's config (honoured first at its own widths), else ``None`` for the
    module's default. ``with watch(model) as used:`` wraps each trial forward; ``used()`` then says
    whether the model used what the caller probes (``symbol`` names it in messages). The configs of
    :func:`ligerkit.shrink.whole_model_configs` are tried cheapest first, each counted on the meta
    device against :func:`parameter_budget`. Raises :class:`Unrunnable` naming the class, the
    configs tried and the last error; never falls back to a smaller class.
    """
    given_config, given = base_config(module, config)
    top = top_model_class(module, given_config if given else None)
    if top is None:
        raise Unrunnable(f"{module.__name__} has no model class that takes a config")
    base = given_config if given else base_config(module, None, top)[0]
    if base is None:
        raise Unrunnable(f"no config to build {top.__name__} from (pass config=)")
    budget = parameter_budget(device)
    tried: list[str] = []
    ran = inputs_failed = False
    for label, cfg in _trials(top, base, given):
        meta = meta_model(top, cfg)
        if meta is None:
            tried.append(f"{label}: {_build_error(top, cfg)}")
            continue
        size = sum(p.numel() for p in meta.parameters())
        del meta
        if size > budget:
            tried.append(f"{label}: {size / 1e6:,.0f}M parameters, over the {budget / 1e6:,.0f}M budget")
            continue
        try:
            model = build_model_class(top, cfg, device)
        except Unrunnable as exc:
            tried.append(f"{label}: {exc}")
            continue
        model.train()
        error, binding = "no inputs its forward takes", True
        for args, kwargs in input_candidates(cfg, model, BATCH, device):
            candidate = Runnable(model, args, kwargs, cfg, label)
            with watch(model) as used:
                try:
                    with torch.no_grad():
                        candidate.loss()
                except Exception as exc:
                    inputs_failed = inputs_failed or not _is_binding_error(exc)
                    if binding:  # the first error past argument binding says most
                        error, binding = _short(exc), _is_binding_error(exc)
                    continue
                ok = used()
            if ok:
                return candidate
            ran = True
            failed = "" if binding or error.startswith("runs but") else f" (richer inputs failed: {error})"
            error, binding = f"runs but never uses {symbol}{failed}", False
        tried.append(f"{label}: {error}")
    if ran:
        raise NeverUsed(f"{top.__name__} runs but never uses {symbol} (tried: {'; '.join(tried)})", inputs_failed)
    raise Unrunnable(f"{top.__name__} could not be built and run (tried: {'; '.join(tried) or 'no config'})")


@contextmanager
def no_class_caches(module: types.ModuleType) -> Iterator[None]:
    """Building models caches private class attributes on every modeling module's classes (and
    ``module``'s): in the block they may, after it none stay."""
    loaded = {m for name, m in list(sys.modules.items()) if m is not None and name.startswith("transformers.models.")}
    before = [(v, set(vars(v))) for m in loaded | {module} for v in list(vars(m).values())
              if isinstance(v, type) and v.__module__ == m.__name__]
    try:
        yield
    finally:
        for cls, attrs in before:
            for name in set(vars(cls)) - set(attrs):
                delattr(cls, name)


class _Lazy:
    """An iterator's items, made once and replayed to every later reader."""

    def __init__(self, items: Iterator[tuple[str, Any]]):
        self._items, self._made = items, []

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        i = 0
        while True:
            if i == len(self._made):
                try:
                    self._made.append(next(self._items))
                except StopIteration:
                    return
            yield self._made[i]
            i += 1


_TRIALS: dict[tuple[str, str, bool, str], _Lazy] = {}


def _trials(top: type, base: Any, given: bool) -> _Lazy:
    """The shrunk configs for ``top`` (:func:`ligerkit.shrink.iter_whole_model_configs`), made once per
    class and config (the in-place check asks once per symbol)."""
    key = (f"{top.__module__}.{top.__qualname__}", config_fingerprint(base), given,
           verdict_cache.bindings_now(sys.modules[top.__module__]) or "")  # what builds depends on what it binds
    if key not in _TRIALS:
        if len(_TRIALS) > 32:
            _TRIALS.clear()
        _TRIALS[key] = _Lazy(iter_whole_model_configs(base, given, lambda c: meta_model(top, c),
                                                      lambda c: meta_build_error(top, c)))
    return _TRIALS[key]


def _is_binding_error(exc: BaseException) -> bool:
    """A forward refused its arguments (missing, unexpected) rather than failing inside."""
    text = str(exc)
    return isinstance(exc, TypeError) and ("argument" in text and ("missing" in text or "unexpected" in text
                                                                    or "positional" in text))


def _build_error(cls: type, config: Any) -> str:
    exc = meta_build_error(cls, config)
    return f"does not build ({_short(exc)})" if exc is not None else "does not build"
