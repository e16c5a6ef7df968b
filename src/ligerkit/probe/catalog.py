"""The catalog: every Liger replacement the kit may map a source symbol to, in one place.

Each entry says which semantic module it serves, what it computes (a pure-PyTorch reference in
``reference.py``), how to import it, and what it writes in place: Liger's default RMSNorm writes
the input's gradient into the incoming gradient (``dY``), and its rotary writes the rotated q/k into
the storage it is given and their gradients into ``dq``/``dk``. An in-place entry names its
out-of-place twin (same math) for layouts where that write would corrupt another consumer's
gradient (``aliasing.py`` finds them). The probe, ``suggest``, the kit's routes and
``docs/guide.md`` (rendered by ``render_table``) all read this list; it is the decision table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ligerkit.probe import reference as R


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
    in_place: str = ""  # what it writes in place: "", "backward" (dX into dY), "forward+backward" (rope)
    out_of_place: str | None = None  # the twin with the same math and no in-place write
    primary: bool = True  # False: never suggested (a twin, reached through its in-place entry; a tiled MLP)
    tiled: str | None = None  # the same math over sequence tiles (``apply(tiled_mlp=True)`` takes it instead)

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
                "standard RMSNorm (Llama, Qwen, Mistral), weight applied after casting back", R.rms_norm_llama,
                in_place="backward", out_of_place="LigerRMSNormForOlmo2"),
    Replacement("LigerRMSNormForOlmo2", "liger_kernel.transformers.rms_norm:LigerRMSNormForOlmo2", "norm",
                "rms_norm", "LigerRMSNorm's math (llama casting, w init ones) with an out-of-place backward",
                "standard RMSNorm whose output is added straight to the residual (post-norm, sandwich)",
                R.rms_norm_llama, primary=False),
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
                "gated MLP with SiLU, no bias", R.swiglu, tiled="LigerTiledSwiGLUMLP"),
    Replacement("LigerGEGLUMLP", "liger_kernel.transformers.geglu:LigerGEGLUMLP", "mlp", "geglu",
                "down(gelu_tanh(gate(x)) * up(x)), no bias (tanh GELU only)",
                "gated MLP with tanh-approximated GELU, no bias (exact-erf GELU is not a match)", R.geglu,
                tiled="LigerTiledGEGLUMLP"),
    Replacement("LigerTiledSwiGLUMLP", "liger_kernel.transformers.tiled_mlp:LigerTiledSwiGLUMLP", "mlp", "swiglu",
                "LigerSwiGLUMLP's math over sequence tiles, each tile's MLP run again in backward",
                "long sequences: gated MLP with SiLU, no bias (opt-in: tiled_mlp=True, or a custom map)", R.swiglu,
                primary=False),
    Replacement("LigerTiledGEGLUMLP", "liger_kernel.transformers.tiled_mlp:LigerTiledGEGLUMLP", "mlp", "geglu",
                "LigerGEGLUMLP's math over sequence tiles, each tile's MLP run again in backward",
                "long sequences: gated MLP with tanh-approximated GELU, no bias "
                "(opt-in: tiled_mlp=True, or a custom map)",
                R.geglu, primary=False),
    Replacement("LigerPhi3SwiGLUMLP", "liger_kernel.transformers.swiglu:LigerPhi3SwiGLUMLP", "mlp", "swiglu",
                "gate, up = gate_up_proj(x).chunk(2); down(up * silu(gate)), no bias",
                "gated SiLU MLP whose gate and up projections are one fused matrix (gate first)",
                R.phi3_swiglu),
    Replacement("liger_rotary_pos_emb", "liger_kernel.transformers.rope:liger_rotary_pos_emb", "rope", "rope",
                "q*cos + rotate_half(q)*sin with rotate_half = cat(-x2, x1) over the first cos.shape[-1] dims",
                "standard rotary (full, or partial with the rotated dims first)", R.rotary,
                in_place="forward+backward"),
    Replacement("liger_multimodal_rotary_pos_emb",
                "liger_kernel.transformers.qwen2vl_mrope:liger_multimodal_rotary_pos_emb", "rope", "rope",
                "Qwen2-VL M-RoPE: per-section temporal/height/width cos/sin, then standard rotary",
                "multimodal rotary with an mrope_section argument (3-D positions)", R.multimodal_rotary,
                in_place="forward+backward"),
)

# Source shapes that no Liger replacement matches: the table says "leave off" for these.
LEAVE_OFF = (
    ("interleaved rotary, or a rotate_half with another sign convention", "leave off"),
    ("non-gated MLP, MLP with biases, ReLU^2 or another activation", "leave off"),
    ("dropout inside the module, extra scaling multipliers", "leave off"),
    ("LayerNorm without a bias, or without parameters", "leave off (LigerLayerNorm would add a trainable bias)"),
    ("a rotary whose q/k storage or gradient another consumer shares",
     "leave off (Liger's rotary writes in place and has no out-of-place variant)"),
)


def by_kind(kind: str) -> list[Replacement]:
    """The primary catalog entries for one kind, in order of preference (twins are reached through
    :func:`twin`)."""
    return [r for r in CATALOG if r.kind == kind and r.primary]


def by_name(name: str) -> Replacement:
    """The catalog entry called ``name``."""
    for entry in CATALOG:
        if entry.name == name:
            return entry
    raise KeyError(name)


def twin(entry: Replacement) -> Replacement | None:
    """The out-of-place entry with ``entry``'s math, if it has one."""
    return by_name(entry.out_of_place) if entry.out_of_place else None


@cache
def lookup(obj: object) -> Replacement | None:
    """The catalog entry for a Liger object, if the catalog has it."""
    for entry in CATALOG:
        if entry.obj is obj:
            return entry
    return None


def render_table() -> str:
    """The decision table as markdown (``docs/guide.md`` includes it verbatim)."""
    lines = ["| source looks like | replacement | what the replacement computes | writes in place |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r.source_looks_like} | `{r.name}` | {r.computes} | {_in_place_words(r)} |" for r in CATALOG]
    lines += [f"| {source} | {verdict} | - | - |" for source, verdict in LEAVE_OFF]
    return "\n".join(lines)


def _in_place_words(entry: Replacement) -> str:
    if entry.in_place == "backward":
        return (f"dX into the incoming dY: refused where dY is shared (residual + norm(h)); "
                f"use `{entry.out_of_place}` there")
    if entry.in_place == "forward+backward":
        return "rotated q/k into their storage, dq/dk into the incoming gradients: refused where shared"
    return "no"
