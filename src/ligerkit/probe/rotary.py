"""Probing a rotary function: fed the cos/sin the family's own rotary embedding makes."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from ligerkit.hf import SMALL_DIMS
from ligerkit.naming import qualified_name, stands_for
from ligerkit.probe.catalog import Replacement
from ligerkit.probe.compare import MATCH, MISMATCH, UNPROBED, ProbeResult, close
from ligerkit.probe.kernel import kernel_available, kernel_check_call

def _rotary_inputs(module: types.ModuleType | None, config: Any, mrope: bool) -> dict[str, Any]:
    """q, k and the cos/sin the family's own rotary embedding makes (standard layout otherwise)."""
    g = torch.Generator().manual_seed(4)
    heads = getattr(config, "num_attention_heads", None) or SMALL_DIMS["num_attention_heads"]
    head_dim = getattr(config, "head_dim", None) or (
        (getattr(config, "hidden_size", 0) or 0) // heads if config is not None else 0) or SMALL_DIMS["head_dim"]
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
    src_params = inspect.signature(stands_for(fn)).parameters
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
            ok, worst = close(a, b, dtype)
            errors[f"{tag} {what}"] = worst
            if not ok:
                reasons.append(f"{tag} rotated {what} differs (max abs diff {worst:.3g})")
        if reasons:
            break
    if not reasons and kernel_available():
        reasons += kernel_check_call(fn, replacement.obj, (), inputs, list(inputs)[:2], errors)
    return ProbeResult(src_name, replacement.name, MISMATCH if reasons else MATCH, tuple(reasons), errors)


def _mrope_section(config: Any, width: int) -> list[int]:
    for holder in (config, getattr(config, "rope_scaling", None), getattr(config, "rope_parameters", None)):
        section = holder.get("mrope_section") if isinstance(holder, dict) else getattr(holder, "mrope_section", None)
        if section:
            return list(section)
    half = width // 2
    return [half - 2 * (half // 4), half // 4, half // 4]
