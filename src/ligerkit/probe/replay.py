"""Does a replacement compute what the source computes on one call the model made?

One recorded call (:class:`~ligerkit.probe.calls.Signature`) is replayed: the source (the recorded
instance, or the function) against the replacement, built with the instance's own constructor
arguments and given the attributes the model set on the instance after construction; its pure-PyTorch
reference reads its arguments the way the kernel does (``reference.py``). Forward and backward, in
float32 and bfloat16, once as recorded and once with every integer argument rolled (position ids,
indices: a replacement that ignores them shows). On a CUDA GPU a call that matches also runs through
Liger's real kernel. A module call is replayed on its input's first rows (:func:`first_rows`: the
replacements are row-wise), which keeps a call of a recipe's full-width model cheap on a CPU in
bfloat16. :func:`replay_call` says ``match``, ``differs`` (with why, and what sets the
call apart) or ``unproven`` (the call could not be compared).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch import nn

from ligerkit.naming import stands_for
from ligerkit.probe.call_text import bound_call, describe, is_plain
from ligerkit.probe.calls import Signature
from ligerkit.probe.catalog import Replacement
from ligerkit.probe.compare import close, module_outputs, out_shape, randomize_alike, structure_differences
from ligerkit.probe.kernel import call_outputs, kernel_available, kernel_check_call, kernel_check_module

__all__ = ["DIFFERS", "MATCH", "UNPROVEN", "replay_call"]

MATCH, DIFFERS, UNPROVEN = "match", "differs", "unproven"
_ABSENT = object()


def _tensors_to(value: Any, device: str, dtype: torch.dtype | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if dtype is not None and value.is_floating_point() else value
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_tensors_to(v, device, dtype) for v in value)
    return value


def _rolled(value: Any) -> Any:
    """Integer and boolean tensors rolled by one along their last dimension (same values, other places)."""
    if isinstance(value, torch.Tensor) and not value.is_floating_point() and value.dim() and value.shape[-1] > 1:
        return value.roll(1, dims=-1)
    return value


def _variants(args: tuple, kwargs: dict) -> list[tuple[str, tuple, dict]]:
    """The call as recorded, and with its integer arguments rolled when it has any."""
    found = [("", args, kwargs)]
    rolled = tuple(_rolled(a) for a in args), {k: _rolled(v) for k, v in kwargs.items()}
    if any(r is not a for r, a in zip(rolled[0], args)) or any(rolled[1][k] is not v for k, v in kwargs.items()):
        found.append((" (integer arguments rolled)", *rolled))
    return found


def _compare(got: list[torch.Tensor], want: list[torch.Tensor], names: list[str], dtype: torch.dtype,
             tag: str) -> list[str]:
    if len(got) != len(want):
        return [f"{tag}: the source returns {len(got)} tensor(s), the replacement {len(want)}"]
    reasons = []
    for name, a, b in zip(names, got, want):
        if a.shape != b.shape:
            reasons.append(f"{tag} {name}: shape {tuple(a.shape)} in the source, {tuple(b.shape)} in the replacement")
            continue
        ok, worst = close(a, b, dtype)
        if not ok:
            reasons.append(f"{tag} {name} differs (max abs diff {worst:.3g})")
    return reasons


def _replay_function(fn: Any, entry: Replacement, sig: Signature) -> tuple[str, list[str]]:
    """``(verdict, reasons)`` of one recorded call of a function against ``entry``."""
    kernel = entry.obj
    try:
        params = list(inspect.signature(kernel).parameters)
        inspect.signature(kernel).bind(*sig.args, **sig.kwargs)
    except TypeError as exc:
        return DIFFERS, [f"the model's call does not fit {entry.name} ({exc})"]
    wrt = [f"#{i}" if i < len(sig.args) else params[i] for i in range(2)]
    wrt = [w for w in wrt if w.startswith("#") or w in sig.kwargs]
    labels = [params[int(w[1:])] if w.startswith("#") else w for w in wrt]
    reasons: list[str] = []
    for label, args, kwargs in _variants(_tensors_to(sig.args, "cpu"), _tensors_to(sig.kwargs, "cpu")):
        for dtype in (torch.float32, torch.bfloat16):
            tag = f"{'float32' if dtype == torch.float32 else 'bfloat16'}{label}"
            a, k = _tensors_to(args, "cpu", dtype), _tensors_to(kwargs, "cpu", dtype)
            try:
                src_out, src_grads = call_outputs(fn, a, k, wrt)
            except Exception as exc:  # the source itself fails on a copy of its own call
                return UNPROVEN, [f"the source does not run again on a copy of this call ({type(exc).__name__}: {exc})"]
            try:
                ref_out, ref_grads = call_outputs(entry.reference, a, k, wrt)
            except ValueError as exc:  # the reference refuses what the kernel would misread
                return DIFFERS, [str(exc)]
            except Exception as exc:
                return UNPROVEN, [f"{entry.name}'s reference does not model this call ({type(exc).__name__}: {exc})"]
            outputs = [f"result {i + 1}" for i in range(len(src_out))]
            reasons += _compare(src_out + src_grads, ref_out + ref_grads, outputs + [f"grad {n}" for n in labels],
                                dtype, tag)
            if reasons:
                return DIFFERS, reasons
    if kernel_available():
        reasons = kernel_check_call(fn, kernel, _tensors_to(sig.args, "cpu"), _tensors_to(sig.kwargs, "cpu"), wrt, {})
    return (DIFFERS, reasons) if reasons else (MATCH, [])


def _built_like(sig: Signature, cls: type, entry: Replacement) -> nn.Module | str:
    """The replacement as the patched model would build it at this call's instance (the instance's own
    constructor arguments, then the plain attributes set on it after construction), or why not."""
    if sig.constructed is None:
        return "its instance was not built through its __init__ (a copy of another layer?), so how the patched model " \
               "would build the replacement there is not known"
    args, kwargs = _tensors_to(sig.constructed[0], "cpu"), _tensors_to(sig.constructed[1], "cpu")
    torch.manual_seed(0)
    try:
        with torch.device("cpu"):
            candidate = entry.obj(*args, **kwargs)  # type: ignore[operator]
    except Exception as exc:
        return f"the replacement cannot be built the way the model builds it here ({type(exc).__name__}: {exc})"
    for name, value in _late_attributes(cls, sig).items():
        setattr(candidate, name, value)  # set after construction: the model sets it on the replacement too
    return candidate


ROWS = 16  # rows of a module call's input replayed: every module replacement in the catalog is row-wise


def first_rows(x: torch.Tensor, rows: int = ROWS) -> torch.Tensor:
    """The first ``rows`` rows of ``x`` (its leading dimensions narrowed in order, the last one whole),
    as a view: the same layout and strides, a fraction of the work. A norm or gated MLP computes each
    row alone (the probe checked that on inputs it made), so its rows compare as the whole call does."""
    left = rows
    for dim in range(x.dim() - 1):
        keep = max(1, min(x.shape[dim], left))
        x = x.narrow(dim, 0, keep)
        left = max(1, left // keep)
    return x


def _replay_class(cls: type, entry: Replacement, sig: Signature) -> tuple[str, list[str]]:
    """``(verdict, reasons)`` of one recorded call of a module class against ``entry``."""
    built = _built_like(sig, cls, entry)
    if isinstance(built, str):
        return (UNPROVEN if sig.constructed is None else DIFFERS), [built]
    try:
        forward = inspect.signature(built.forward)
        forward.bind(*sig.args, **sig.kwargs)
    except TypeError as exc:
        return DIFFERS, [f"the model's call does not fit {entry.name}.forward ({exc})"]
    named = bound_call(inspect.signature(sig.instance.forward), sig.args, sig.kwargs)
    tensors = [(n, v) for n, v in named if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if len(named) != 1 or len(tensors) != 1:
        return UNPROVEN, [f"the model passes {', '.join(n for n, _ in named)}; {entry.name}'s reference takes one input"]
    source = copy.deepcopy(sig.instance).to("cpu")
    reasons = structure_differences(source, built)
    if reasons:
        return DIFFERS, reasons
    x = first_rows(_tensors_to(tensors[0][1], "cpu"))
    names = sorted(n for n, _ in source.named_parameters())
    for dtype in (torch.float32, torch.bfloat16):
        tag = "float32" if dtype == torch.float32 else "bfloat16"
        s, c = source.to(dtype), built.to(dtype)
        randomize_alike(s, c)
        xd = x.to(dtype)
        try:
            grad = torch.randn(out_shape(s, xd), generator=torch.Generator().manual_seed(3))
            got = module_outputs(s, s, xd, grad)
        except Exception as exc:
            return UNPROVEN, [f"the source does not run again on a copy of this call ({type(exc).__name__}: {exc})"]
        try:
            want = module_outputs(c, lambda t: entry.reference(c, t), xd, grad)
        except ValueError as exc:  # the reference refuses what the kernel would misread
            return DIFFERS, [str(exc)]
        except Exception as exc:  # e.g. an instance without a weight: the reference does not model it
            return UNPROVEN, [f"{entry.name}'s reference does not model this instance ({type(exc).__name__}: {exc})"]
        reasons += _compare(got, want, ["forward", "grad input", *("grad " + n for n in names)], dtype, tag)
        if reasons:
            return DIFFERS, reasons
    if kernel_available():
        reasons = kernel_check_module(s.float(), c.float(), x, {})
    return (DIFFERS, reasons) if reasons else (MATCH, [])


def _late_attributes(cls: type, sig: Signature) -> dict[str, Any]:
    """The plain attributes of the recorded instance that differ from a fresh one built with the same
    constructor arguments: set after construction (by the model's own code)."""
    if sig.constructed is None or sig.instance is None:
        return {}
    args, kwargs = _tensors_to(sig.constructed[0], "cpu"), _tensors_to(sig.constructed[1], "cpu")
    try:
        with torch.device("cpu"):
            fresh = cls(*args, **kwargs)
    except Exception:
        return {}
    return {name: value for name, value in vars(sig.instance).items()
            if is_plain(value) and not name.startswith("_")
            and name != "training" and vars(fresh).get(name, _ABSENT) != value}


def _instance_standout(cls: type, sig: Signature) -> str:
    """What sets a call of a module apart: arguments beyond its input, attributes set after
    construction, else the constructor's arguments and the input's layout."""
    named = bound_call(inspect.signature(sig.instance.forward), sig.args, sig.kwargs)
    extra = [f"{n}={describe(v)}" for n, v in named[1:]]
    late = [f"{n}={v!r} (set after construction)" for n, v in _late_attributes(cls, sig).items()]
    if extra or late:
        return "; ".join(extra + late)
    built = "" if sig.constructed is None else f"an instance built with {describe(sig.constructed)}, "
    return built + sig.text


def _standout(fn: Any, sig: Signature) -> str:
    """What sets a call apart: the arguments it passes with a value other than their default, else
    its tensors' layouts."""
    fn = stands_for(fn)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    named = bound_call(inspect.signature(fn) if params else None, sig.args, sig.kwargs)
    odd = [f"{n}={v!r} (default {params[n].default!r})" for n, v in named
           if n in params and not isinstance(v, torch.Tensor) and params[n].default is not inspect.Parameter.empty
           and v != params[n].default]
    return "; ".join(odd) if odd else sig.text


def replay_call(source: object, entry: Replacement, sig: Signature) -> tuple[str, list[str], str]:
    """``(verdict, reasons, standout)`` of one recorded call of ``source`` (a module class or a function)
    against ``entry``: ``match``, ``differs`` or ``unproven``, why, and what sets the call apart (its
    non-default arguments, attributes set after construction, else its arguments' layouts)."""
    replay, standout_of = (_replay_class, _instance_standout) if isinstance(source, type) else \
        (_replay_function, _standout)
    try:
        verdict, reasons = replay(source, entry, sig)
        return verdict, reasons, standout_of(source, sig)
    except Exception as exc:  # a call the replay cannot take apart: not compared, never a match
        return UNPROVEN, [f"the replay failed ({type(exc).__name__}: {exc})"], sig.text
