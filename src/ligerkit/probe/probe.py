"""Probes: does a Liger replacement compute what the source symbol computes?

A class probe builds the source module and the candidate with the *same constructor call* (so a
constructor that would fail in the model fails here), checks that both have the same parameters
(names and shapes: state dicts load both ways, nothing added, nothing dropped) and the same
initial values where the source's are constant (``w`` ones vs zeros), gives both the same
non-trivial weights, and compares the source's forward and backward against the candidate's
pure-PyTorch reference, in float32 and in bfloat16 (casting order shows only there). It also runs
the source twice in training mode: a module with active dropout is not a match. A function probe
(rotary) feeds the source the cos/sin the family's own rotary embedding produces. On a CUDA GPU a
matching pair is also run through Liger's real kernel, against the source, in bfloat16.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import torch
from torch import nn

from ligerkit.hf import SMALL_DIMS
from ligerkit.naming import qualified_name
from ligerkit.probe import verdict_cache
from ligerkit.probe.part_config import constructed_config
from ligerkit.probe.catalog import Replacement, by_kind
from ligerkit.probe.compare import (
    MATCH,
    MISMATCH,
    UNPROBED,
    ProbeResult,
    Unprobeable,
    close,
    first_output,
    randomize_alike,
    structure_differences,
    module_outputs,
    out_shape,
)
from ligerkit.probe.kernel import kernel_available, kernel_check_module
from ligerkit.probe.rotary import probe_function

__all__ = ["MATCH", "MISMATCH", "UNPROBED", "ProbeResult", "best_alternative", "kernel_available", "kept_probe",
           "probe", "probe_class", "probe_function"]

_NORM_SIZE_NAMES = ("hidden_size", "dim", "d_model", "normalized_shape", "num_features", "embed_dim")


def _call_plan(cls: type, config: Any) -> tuple[tuple, dict]:
    """How the model would construct ``cls``: from its config, or from a size (and eps)."""
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in params]
    if names and names[0] == "config":
        if config is None:
            raise Unprobeable("its constructor takes the model config; pass config= to probe it")
        kwargs = {"layer_idx": 0} if "layer_idx" in {p.name for p in required} else {}
        return (config,), kwargs
    size = getattr(config, "hidden_size", None) or SMALL_DIMS["hidden_size"]
    if required and required[0].name in _NORM_SIZE_NAMES and len(required) == 1:
        return (size,), {}
    if not required:
        return ((size,), {}) if names and names[0] in _NORM_SIZE_NAMES else ((), {})
    raise Unprobeable(f"constructor arguments {[p.name for p in required]} are not understood")


def _build(cls: Any, args: tuple, kwargs: dict, dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    module = cls(*args, **kwargs)
    return module.to(dtype)


def _constant(t: torch.Tensor) -> float | None:
    flat = t.detach().flatten()
    return float(flat[0]) if flat.numel() and bool((flat == flat[0]).all()) else None


def _init(source: nn.Module, candidate: nn.Module) -> list[str]:
    """Parameters the source initializes to a constant that the replacement initializes otherwise."""
    reasons = []
    for name, value in source.state_dict().items():
        c_value = candidate.state_dict().get(name)
        if c_value is None or c_value.shape != value.shape:
            continue
        s_const, c_const = _constant(value), _constant(c_value)
        if s_const is not None and s_const != c_const:
            reasons.append(f"{name} initializes to {s_const:g} in the source but not in the replacement")
    return reasons


def _built_source(cls: type, config: Any) -> tuple[tuple, dict, nn.Module]:
    """``cls`` built the way the model builds it: from ``config``, or, where ``config`` is a composite
    model's and does not build it, from the part config the whole model constructs it with
    (:func:`ligerkit.probe.part_config.constructed_config`: a VLM gives its text MLP the text config)."""
    args, kwargs = _call_plan(cls, config)
    try:
        return args, kwargs, _build(cls, args, kwargs, torch.float32)
    except Exception:
        part = constructed_config(cls, config) if args and args[0] is config else None
        if part is None:
            raise
    args = (part, *args[1:])
    return args, kwargs, _build(cls, args, kwargs, torch.float32)


def probe_class(source_cls: type, replacement: Replacement, config: Any = None) -> ProbeResult:
    """Probe a module class against one catalog replacement."""
    src_name = qualified_name(source_cls)
    try:
        args, kwargs, source = _built_source(source_cls, config)
    except Unprobeable as exc:
        return ProbeResult(src_name, replacement.name, UNPROBED, (str(exc),))
    except Exception as exc:
        return ProbeResult(src_name, replacement.name, UNPROBED, (f"cannot build the source: {exc}",))
    try:
        candidate = _build(replacement.obj, args, kwargs, torch.float32)
    except Exception as exc:
        return ProbeResult(src_name, replacement.name, MISMATCH,
                           (f"the replacement cannot be built the way the model builds the source: {exc}",))
    reasons = structure_differences(source, candidate)
    if reasons:
        return ProbeResult(src_name, replacement.name, MISMATCH, tuple(reasons))
    reasons = _init(source, candidate)
    width = _input_width(source)
    source.train()
    x = torch.randn(2, 5, width, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        if not torch.equal(first_output(source(x)), first_output(source(x))):
            return ProbeResult(src_name, replacement.name, MISMATCH, ("the source is random in training (dropout?)",))
    source.eval()
    errors: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        s, c = source.to(dtype), candidate.to(dtype)
        randomize_alike(s, c)
        xd = x.to(dtype)
        grad = torch.randn(out_shape(s, xd), generator=torch.Generator().manual_seed(3))
        got = module_outputs(s, s, xd, grad)
        want = module_outputs(c, lambda t, c=c: replacement.reference(c, t), xd, grad)
        tag = "float32" if dtype == torch.float32 else "bfloat16"
        for what, a, b in zip(["forward", "grad input", *["grad " + n for n, _ in sorted(s.named_parameters())]],
                              got, want, strict=True):
            ok, worst = close(a, b, dtype)
            errors[f"{tag} {what}"] = worst
            if not ok:
                reasons.append(f"{tag} {what} differs (max abs diff {worst:.3g})")
        if any(r.startswith(tag) for r in reasons):
            break
    if not reasons and kernel_available():
        reasons += kernel_check_module(s, c, x, errors)
    verdict = MISMATCH if reasons else MATCH
    return ProbeResult(src_name, replacement.name, verdict, tuple(reasons), errors)


def _input_width(module: nn.Module) -> int:
    for child in module.modules():
        if isinstance(child, nn.Linear):
            return child.in_features
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 1:
        return weight.shape[0]
    for attr in ("hidden_size", "dim", "normalized_shape"):
        value = getattr(module, attr, None)
        if isinstance(value, int):
            return value
        if isinstance(value, tuple) and value:
            return int(value[-1])
    return SMALL_DIMS["hidden_size"]


def probe(source: object, replacement: Replacement, config: Any = None,
          module: types.ModuleType | None = None) -> ProbeResult:
    """Probe any source symbol (class or function) against a catalog replacement."""
    if replacement.kind == "rope":
        if isinstance(source, type):
            return ProbeResult(qualified_name(source), replacement.name, MISMATCH, ("a class cannot take a rotary function",))
        return probe_function(source, replacement, config, module)  # type: ignore[arg-type]
    if not isinstance(source, type) or not issubclass(source, nn.Module):
        return ProbeResult(qualified_name(source), replacement.name, MISMATCH, ("the source is not an nn.Module class",))
    return probe_class(source, replacement, config)


def best_alternative(source: object, kind: str, config: Any, module: types.ModuleType | None,
                     exclude: str) -> str | None:
    """The catalog replacement of ``kind`` that matches ``source``, other than ``exclude``."""
    for replacement in by_kind(kind):
        if replacement.name != exclude and probe(source, replacement, config, module).verdict == MATCH:
            return replacement.name
    return None


def kept_probe(source: object, replacement: Replacement, config: Any = None,
               module: types.ModuleType | None = None) -> ProbeResult:
    """:func:`probe`, its result kept on disk (:mod:`~ligerkit.probe.verdict_cache`): the kit's routes
    probe the same pairs in every process."""
    def key() -> dict[str, Any]:
        return {"source": verdict_cache.symbol(source), "config": verdict_cache.config_key(config),
                "module": None if module is None else verdict_cache.module_state(module),
                "replacement": {"name": replacement.name, "path": replacement.import_path, "kind": replacement.kind,
                                "reference": verdict_cache.describe(replacement.reference),
                                "object": verdict_cache.symbol(replacement.obj)},
                "kernel": kernel_available()}

    return verdict_cache.cached("probe", key, lambda: probe(source, replacement, config, module), _dump,
                                functools.partial(_load, qualified_name(source), replacement.name),
                                keep=lambda r: not any("MemoryError" in t or "out of memory" in t for t in r.reasons))


def _dump(result: ProbeResult) -> dict[str, Any]:
    return {"source": result.source, "replacement": result.replacement, "verdict": result.verdict,
            "reasons": list(result.reasons), "errors": dict(result.errors)}


def _load(source: str, replacement: str, data: Any) -> ProbeResult:
    """A :class:`ProbeResult` from stored fields, each checked (``ValueError`` for any not valid)."""
    f = verdict_cache.fields(data, {"source": str, "replacement": str, "verdict": str, "reasons": [str],
                                    "errors": {str: float}})
    if (f["source"], f["replacement"]) != (source, replacement) or f["verdict"] not in (MATCH, MISMATCH, UNPROBED) \
            or (f["verdict"] == MATCH) is bool(f["reasons"]):
        raise ValueError("the stored probe result does not hold together")
    return ProbeResult(source, replacement, f["verdict"], tuple(f["reasons"]),
                       {k: float(v) for k, v in f["errors"].items()})
