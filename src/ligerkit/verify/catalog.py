"""The catalog: every Liger replacement the kit may map a source symbol to, in one place.

Each entry says which semantic module it serves, what it computes (a pure-PyTorch reference in
``reference.py``), and how to import it. The probe, ``suggest``, the kit's custom route and
``docs/guide.md`` (rendered by ``render_table``) all read this list; it is the decision table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ligerkit.verify import reference as R


@dataclass(frozen=True)
class Replacement:
    """One Liger replacement and the math it stands for."""

    name: str
    import_path: str  # "package.module:attr"
    kind: str  # "norm" | "mlp" | "rope"
    module: str  # semantic module name used in custom_patches keys
    computes: str
    source_looks_like: str
    reference: Callable[..., object]

    @property
    def obj(self) -> object:
        """The Liger class or function itself."""
        module, attr = self.import_path.split(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def module_path(self) -> str:
        """Dotted module to import it from."""
        return self.import_path.split(":")[0]


CATALOG: tuple[Replacement, ...] = (
    Replacement("LigerRMSNorm", "liger_kernel.transformers.rms_norm:LigerRMSNorm", "norm", "rms_norm",
                "x * rsqrt(mean(x^2) + eps) in float32, cast back to the input dtype, then * w; w init ones",
                "standard RMSNorm (Llama, Qwen, Mistral), weight applied after casting back", R.rms_norm_llama),
    Replacement("LigerRMSNormForGemma2", "liger_kernel.transformers.rms_norm:LigerRMSNormForGemma2", "norm",
                "rms_norm", "float32 throughout: normed * (1 + w), then cast back; w init zeros; out-of-place",
                "Gemma-style RMSNorm (1 + w) with float32 upcast; safe for back-to-back norms",
                R.rms_norm_gemma),
    Replacement("LigerRMSNormForGemma4", "liger_kernel.transformers.rms_norm:LigerRMSNormForGemma4", "norm",
                "rms_norm", "float32 throughout: normed * w (no offset), then cast back; w init ones",
                "RMSNorm that multiplies the weight in float32 before casting back (no offset)",
                R.rms_norm_gemma),
    Replacement("LigerLayerNorm", "liger_kernel.transformers.layer_norm:LigerLayerNorm", "norm", "layer_norm",
                "affine LayerNorm with a weight and an always-present trainable bias",
                "nn.LayerNorm with weight and bias (not bias-free or parameter-free ones)", R.layer_norm),
    Replacement("LigerSwiGLUMLP", "liger_kernel.transformers.swiglu:LigerSwiGLUMLP", "mlp", "swiglu",
                "down(silu(gate(x)) * up(x)), gate_proj/up_proj/down_proj without bias",
                "gated MLP with SiLU, no bias", R.swiglu),
    Replacement("LigerGEGLUMLP", "liger_kernel.transformers.geglu:LigerGEGLUMLP", "mlp", "geglu",
                "down(gelu_tanh(gate(x)) * up(x)), no bias (tanh GELU only)",
                "gated MLP with tanh-approximated GELU, no bias (exact-erf GELU is not a match)", R.geglu),
    Replacement("LigerPhi3SwiGLUMLP", "liger_kernel.transformers.swiglu:LigerPhi3SwiGLUMLP", "mlp", "swiglu",
                "gate, up = gate_up_proj(x).chunk(2); down(up * silu(gate)), no bias",
                "gated SiLU MLP whose gate and up projections are one fused matrix (gate first)",
                R.phi3_swiglu),
    Replacement("liger_rotary_pos_emb", "liger_kernel.transformers.rope:liger_rotary_pos_emb", "rope", "rope",
                "q*cos + rotate_half(q)*sin with rotate_half = cat(-x2, x1) over the first cos.shape[-1] dims",
                "standard rotary (full, or partial with the rotated dims first)", R.rotary),
    Replacement("liger_multimodal_rotary_pos_emb",
                "liger_kernel.transformers.qwen2vl_mrope:liger_multimodal_rotary_pos_emb", "rope", "rope",
                "Qwen2-VL M-RoPE: per-section temporal/height/width cos/sin, then standard rotary",
                "multimodal rotary with an mrope_section argument (3-D positions)", R.multimodal_rotary),
)

# Source shapes that no Liger replacement matches: the table says "leave off" for these.
LEAVE_OFF = (
    ("interleaved rotary, or a rotate_half with another sign convention", "leave off"),
    ("non-gated MLP, MLP with biases, ReLU^2 or another activation", "leave off"),
    ("dropout inside the module, extra scaling multipliers", "leave off"),
    ("LayerNorm without a bias, or without parameters", "leave off (LigerLayerNorm would add a trainable bias)"),
)


def by_kind(kind: str) -> list[Replacement]:
    """Catalog entries for one kind, in order of preference."""
    return [r for r in CATALOG if r.kind == kind]


@cache
def lookup(obj: object) -> Replacement | None:
    """The catalog entry for a Liger object, if the catalog has it."""
    for entry in CATALOG:
        if entry.obj is obj:
            return entry
    return None


def render_table() -> str:
    """The decision table as markdown (``docs/guide.md`` includes it verbatim)."""
    lines = ["| source looks like | replacement | what the replacement computes |", "| --- | --- | --- |"]
    lines += [f"| {r.source_looks_like} | `{r.name}` | {r.computes} |" for r in CATALOG]
    lines += [f"| {source} | {verdict} | - |" for source, verdict in LEAVE_OFF]
    return "\n".join(lines)
