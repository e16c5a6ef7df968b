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

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ligerkit.naming import qualified_name
from ligerkit.probe.catalog import Replacement, by_kind
from ligerkit.probe.tolerance import GradTolerance, relative_error

MATCH, MISMATCH, UNPROBED = "match", "mismatch", "unprobed"
_NORM_SIZE_NAMES = ("hidden_size", "dim", "d_model", "normalized_shape", "num_features", "embed_dim")
_SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


@dataclass(frozen=True)
class ProbeResult:
    """The verdict of one (source symbol, replacement) pair, with the reasons."""

    source: str
    replacement: str
    verdict: str
    reasons: tuple[str, ...] = ()
    errors: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The replacement computes what the source computes."""
        return self.verdict == MATCH


class Unprobeable(Exception):
    """The probe cannot build or call the source symbol."""


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
    size = getattr(config, "hidden_size", None) or _SMALL["hidden_size"]
    if required and required[0].name in _NORM_SIZE_NAMES and len(required) == 1:
        return (size,), {}
    if not required:
        return ((size,), {}) if names and names[0] in _NORM_SIZE_NAMES else ((), {})
    raise Unprobeable(f"constructor arguments {[p.name for p in required]} are not understood")


def _build(cls: Any, args: tuple, kwargs: dict, dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    module = cls(*args, **kwargs)
    return module.to(dtype)


def _first(out: Any) -> torch.Tensor:
    """A module's output tensor (the first element when it returns a tuple)."""
    return out[0] if isinstance(out, tuple) else out


def _constant(t: torch.Tensor) -> float | None:
    flat = t.detach().flatten()
    return float(flat[0]) if flat.numel() and bool((flat == flat[0]).all()) else None


def _structure(source: nn.Module, candidate: nn.Module) -> list[str]:
    """Parameter names and shapes that differ (the state dict would not load both ways)."""
    reasons = []
    src = {k: tuple(v.shape) for k, v in source.state_dict().items()}
    cand = {k: tuple(v.shape) for k, v in candidate.state_dict().items()}
    if extra := sorted(cand.keys() - src.keys()):
        reasons.append(f"the replacement adds parameters {extra}")
    if missing := sorted(src.keys() - cand.keys()):
        reasons.append(f"the replacement drops parameters {missing}")
    for key in sorted(src.keys() & cand.keys()):
        if src[key] != cand[key]:
            reasons.append(f"{key} has shape {src[key]} in the source, {cand[key]} in the replacement")
    return reasons


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


def _randomize(source: nn.Module, candidate: nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in source.state_dict().items():
            value = torch.randn(param.shape, generator=g) * 0.5 + 0.3
            param.copy_(value)
            candidate.state_dict()[name].copy_(value)


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float]:
    a, b = a.float(), b.float()
    diff = (a - b).abs()
    worst = float(diff.max()) if diff.numel() else 0.0
    if dtype == torch.float32:
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5)), worst
    # bfloat16: the same math rounds the same way; a different casting order flips many elements
    off = float((diff > 1e-6 + 1e-6 * b.abs()).float().mean())
    return off <= 0.01, worst


def _module_outputs(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                    grad: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = _first(fn(x))
    params = [p for _, p in sorted(module.named_parameters())]
    grads = torch.autograd.grad(out, [x, *params], grad.to(out.dtype), allow_unused=True)
    return [out.detach(), *[g if g is not None else torch.zeros_like(p) for g, p in zip(grads, [x, *params],
                                                                                     strict=True)]]


def probe_class(source_cls: type, replacement: Replacement, config: Any = None) -> ProbeResult:
    """Probe a module class against one catalog replacement."""
    src_name = qualified_name(source_cls)
    try:
        args, kwargs = _call_plan(source_cls, config)
        source = _build(source_cls, args, kwargs, torch.float32)
    except Unprobeable as exc:
        return ProbeResult(src_name, replacement.name, UNPROBED, (str(exc),))
    except Exception as exc:
        return ProbeResult(src_name, replacement.name, UNPROBED, (f"cannot build the source: {exc}",))
    try:
        candidate = _build(replacement.obj, args, kwargs, torch.float32)
    except Exception as exc:
        return ProbeResult(src_name, replacement.name, MISMATCH,
                           (f"the replacement cannot be built the way the model builds the source: {exc}",))
    reasons = _structure(source, candidate)
    if reasons:
        return ProbeResult(src_name, replacement.name, MISMATCH, tuple(reasons))
    reasons = _init(source, candidate)
    width = _input_width(source)
    source.train()
    x = torch.randn(2, 5, width, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        if not torch.equal(_first(source(x)), _first(source(x))):
            return ProbeResult(src_name, replacement.name, MISMATCH, ("the source is random in training (dropout?)",))
    source.eval()
    errors: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        s, c = source.to(dtype), candidate.to(dtype)
        _randomize(s, c)
        xd = x.to(dtype)
        grad = torch.randn(_out_shape(s, xd), generator=torch.Generator().manual_seed(3))
        got = _module_outputs(s, s, xd, grad)
        want = _module_outputs(c, lambda t, c=c: replacement.reference(c, t), xd, grad)
        tag = "float32" if dtype == torch.float32 else "bfloat16"
        for what, a, b in zip(["forward", "grad input", *["grad " + n for n, _ in sorted(s.named_parameters())]],
                              got, want, strict=True):
            ok, worst = _close(a, b, dtype)
            errors[f"{tag} {what}"] = worst
            if not ok:
                reasons.append(f"{tag} {what} differs (max abs diff {worst:.3g})")
        if any(r.startswith(tag) for r in reasons):
            break
    if not reasons and kernel_available():
        reasons += _kernel_check_module(s, c, x, errors)
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
    return _SMALL["hidden_size"]


def _out_shape(module: nn.Module, x: torch.Tensor) -> torch.Size:
    with torch.no_grad():
        out = module(x)
    return _first(out).shape


def _rotary_inputs(module: types.ModuleType | None, config: Any, mrope: bool) -> dict[str, Any]:
    """q, k and the cos/sin the family's own rotary embedding makes (standard layout otherwise)."""
    g = torch.Generator().manual_seed(4)
    heads = getattr(config, "num_attention_heads", None) or _SMALL["num_attention_heads"]
    head_dim = getattr(config, "head_dim", None) or (
        (getattr(config, "hidden_size", 0) or 0) // heads if config is not None else 0) or _SMALL["head_dim"]
    batch, seq = 2, 6
    q = torch.randn(batch, heads, seq, head_dim, generator=g)
    k = torch.randn(batch, heads, seq, head_dim, generator=g)
    cos = sin = None
    rotary_cls = next((v for n, v in vars(module).items() if n.endswith("RotaryEmbedding") and isinstance(v, type)
                       and v.__module__ == module.__name__), None) if module is not None else None
    if rotary_cls is not None and config is not None:
        try:
            rotary = rotary_cls(config)
            if mrope:
                positions = torch.arange(seq).view(1, 1, seq).expand(3, batch, seq)
                positions = positions + torch.tensor([0, 1, 2]).view(3, 1, 1)
            else:
                positions = torch.arange(seq).unsqueeze(0).expand(batch, seq)
            cos, sin = rotary(q.transpose(1, 2), positions)
        except Exception:
            cos = sin = None
    if cos is None:
        factor = getattr(config, "partial_rotary_factor", 1.0) if config is not None else 1.0
        width = int(head_dim * factor)
        angles = torch.rand(batch, seq, width // 2, generator=g) * 6.28
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if mrope:
            cos, sin = cos.unsqueeze(0).expand(3, -1, -1, -1), sin.unsqueeze(0).expand(3, -1, -1, -1)
    return {"q": q, "k": k, "cos": cos, "sin": sin}


def probe_function(fn: Callable[..., Any], replacement: Replacement, config: Any = None,
                   module: types.ModuleType | None = None) -> ProbeResult:
    """Probe a rotary function against one catalog replacement."""
    src_name = qualified_name(fn)
    src_params = inspect.signature(fn).parameters
    cand_params = inspect.signature(replacement.obj).parameters
    required = [n for n, p in src_params.items() if p.default is inspect.Parameter.empty]
    unknown = [n for n in src_params if n not in cand_params]
    if unknown:
        return ProbeResult(src_name, replacement.name, MISMATCH,
                           (f"the model calls it with {unknown}, which the replacement does not take",))
    needed = [n for n, p in cand_params.items() if p.default is inspect.Parameter.empty and n not in src_params]
    if needed:
        return ProbeResult(src_name, replacement.name, MISMATCH,
                           (f"the replacement needs {needed}, which the model does not pass",))
    mrope = "mrope_section" in src_params
    if not {"q", "k", "cos", "sin"} <= set(src_params):
        return ProbeResult(src_name, replacement.name, UNPROBED, ("not a (q, k, cos, sin) rotary function",))
    inputs = _rotary_inputs(module, config, mrope)
    if mrope:
        section = _mrope_section(config, inputs["cos"].shape[-1])
        inputs["mrope_section"] = section
    if set(required) - set(inputs):
        return ProbeResult(src_name, replacement.name, UNPROBED, (f"needs arguments {required}",))
    try:
        fn(**inputs)
    except Exception:
        # The model splits off the rotated part itself (partial rotary): it passes q/k as wide as cos.
        width = inputs["cos"].shape[-1]
        inputs = {**inputs, "q": inputs["q"][..., :width], "k": inputs["k"][..., :width]}
        try:
            fn(**inputs)
        except Exception as exc:
            return ProbeResult(src_name, replacement.name, UNPROBED, (f"calling the source failed: {exc}",))
    errors: dict[str, float] = {}
    reasons: list[str] = []
    for dtype in (torch.float32, torch.bfloat16):
        args = {k: (v.to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        got = fn(**args)
        want = replacement.reference(**args)
        tag = "float32" if dtype == torch.float32 else "bfloat16"
        for what, a, b in zip(("q", "k"), got, want, strict=True):
            ok, worst = _close(a, b, dtype)
            errors[f"{tag} {what}"] = worst
            if not ok:
                reasons.append(f"{tag} rotated {what} differs (max abs diff {worst:.3g})")
        if reasons:
            break
    if not reasons and kernel_available():
        reasons += _kernel_check_function(fn, replacement.obj, inputs, errors)
    return ProbeResult(src_name, replacement.name, MISMATCH if reasons else MATCH, tuple(reasons), errors)


KERNEL_TOLERANCE = GradTolerance()  # Liger's kernel vs float32, against the source in bfloat16 vs float32


def kernel_available() -> bool:
    """Liger's real kernels can run here (a CUDA GPU)."""
    return torch.cuda.is_available()


def _kernel_verdicts(names: list[str], truth: list[torch.Tensor], eager: list[torch.Tensor],
                     kernel: list[torch.Tensor], errors: dict[str, float]) -> list[str]:
    """The gradient-parity rule per output and gradient: the kernel's relative error against the
    float32 source may be at most ``factor x`` the bfloat16 source's, plus ``slack``."""
    reasons = []
    for name, t, e, k in zip(names, truth, eager, kernel, strict=True):
        r_eager, r_kernel = relative_error(e, t), relative_error(k, t)
        errors[f"kernel {name}"] = r_kernel
        if not r_kernel <= KERNEL_TOLERANCE.bound(r_eager):
            reasons.append(f"Liger's kernel on the GPU: {name} is off by {r_kernel:.3g} relative to float32 "
                           f"(the source in bfloat16: {r_eager:.3g})")
    return reasons


def _kernel_check_module(source: nn.Module, candidate: nn.Module, x: torch.Tensor,
                         errors: dict[str, float]) -> list[str]:
    """Run the real Liger module on the GPU against the source: outputs and every gradient, the
    kernel in bfloat16 and the source in float32 (truth) and bfloat16 (what rounding costs)."""
    grad = torch.randn(_out_shape(source.float(), x.float()), generator=torch.Generator().manual_seed(5)).to("cuda")
    xs = x.to("cuda")
    truth = _module_outputs(source.to("cuda", torch.float32), source, xs.float(), grad)
    eager = _module_outputs(source.to(torch.bfloat16), source, xs.to(torch.bfloat16), grad)
    candidate = candidate.to("cuda", torch.bfloat16)
    candidate.load_state_dict(source.state_dict())
    kernel = _module_outputs(candidate, candidate, xs.to(torch.bfloat16), grad)
    names = ["forward", "grad input", *["grad " + n for n, _ in sorted(source.named_parameters())]]
    return _kernel_verdicts(names, truth, eager, kernel, errors)


def _kernel_check_function(fn: Callable[..., Any], kernel: Callable[..., Any], inputs: dict[str, Any],
                           errors: dict[str, float]) -> list[str]:
    """Run the real Liger rotary kernel on the GPU against the source (float32 truth, bfloat16 eager)."""
    def on(dtype: torch.dtype) -> dict[str, Any]:
        return {k: (v.to("cuda", dtype) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}

    truth, eager = fn(**on(torch.float32)), fn(**on(torch.bfloat16))
    got = kernel(**on(torch.bfloat16))  # Liger's rotary writes into the q/k it is given: fresh copies
    return _kernel_verdicts(["q", "k"], list(truth), list(eager), list(got), errors)


def _mrope_section(config: Any, width: int) -> list[int]:
    for holder in (config, getattr(config, "rope_scaling", None), getattr(config, "rope_parameters", None)):
        section = holder.get("mrope_section") if isinstance(holder, dict) else getattr(holder, "mrope_section", None)
        if section:
            return list(section)
    half = width // 2
    return [half - 2 * (half // 4), half // 4, half // 4]


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
