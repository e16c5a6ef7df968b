"""The rules that read more than one config section, in one place.

Each section (``model``, ``data``, ``train.optim``, ``train.run``, ...) checks its own keys; a rule
here judges keys of several sections together and returns what is wrong (``None`` when nothing is).
:func:`cross_section_problems` runs them all, so one validation names every broken pair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ligerkit.naming import LOSS_MODULES
from ligerkit.train.config.compile_mode import TRACE_NEEDS_LIGER
from ligerkit.train.config.paths import check_run_folder

if TYPE_CHECKING:
    from ligerkit.train.config.schema import RecipeConfig


def warmup_within_steps(config: RecipeConfig) -> str | None:
    """``train.optim.warmup_steps`` is at most ``train.steps``."""
    t = config.train
    if t.optim.warmup_steps > t.steps:
        return f"train.optim.warmup_steps ({t.optim.warmup_steps}) is more than train.steps ({t.steps})"
    return None


def fused_loss_alone(config: RecipeConfig) -> str | None:
    """``train.loss.path: fused`` computes the loss itself: Liger's loss modules stay excluded and off."""
    lk = config.model.liger_kernel
    if config.train.loss.path != "fused":
        return None
    enabled = {k for k, v in lk.modules.items() if v} if isinstance(lk.modules, dict) else set()
    if not set(LOSS_MODULES) <= set(lk.excluded_modules) or enabled & set(LOSS_MODULES):
        return ("train.loss.path: fused computes the loss itself; keep cross_entropy and "
                "fused_linear_cross_entropy excluded and off in model.liger_kernel.modules (no double patching)")
    return None


def recomputes_see_liger(config: RecipeConfig) -> str | None:
    """``train.memory``'s recompute keys act on Liger's outputs only uncompiled and outside checkpointed
    layers (with Liger off there is nothing to recompute: the keys then change nothing)."""
    t = config.train
    if not config.model.liger_kernel.enabled:
        return None
    why = [k for k, v in {f"train.compile is {t.compile}": t.compile != "off",
                          "train.activation_checkpointing is on": t.activation_checkpointing}.items() if v]
    for key, on, what in (("train.memory.recompute_glu_product", t.memory.recompute_glu_product, "SwiGLU/GeGLU"),
                          ("train.memory.recompute_norm_output", t.memory.recompute_norm_output, "RMSNorm")):
        if on and why:
            return (f"{key} sees Liger's {what} only uncompiled and outside checkpointed layers, but "
                    f"{' and '.join(why)}; set it to false or change those keys")
    return None


def trace_needs_liger(config: RecipeConfig) -> str | None:
    """``train.compile: trace`` traces into Liger's functions, so it needs Liger on."""
    if config.train.compile == "trace" and not config.model.liger_kernel.enabled:
        return TRACE_NEEDS_LIGER
    return None


def tiled_mlp_needs_liger_uncompiled(config: RecipeConfig) -> str | None:
    """``model.liger_kernel.tiled_mlp`` picks the form of a Liger swap: Liger on, and not compiled (the tiled MLP
    has no compile-mode operator)."""
    lk = config.model.liger_kernel
    if not lk.tiled_mlp:
        return None
    if not lk.enabled:
        return "model.liger_kernel.tiled_mlp picks the form of Liger's MLP swap, but model.liger_kernel.enabled is false"
    if config.train.compile != "off":
        return (f"model.liger_kernel.tiled_mlp has no compile-mode operator, but train.compile is {config.train.compile}; "
                "set one of them off")
    return None


def offload_budget_needs_offload(config: RecipeConfig) -> str | None:
    """``train.memory.offload_budget_gib`` limits what offload keeps in host memory: without
    ``train.activation_checkpointing: offload`` it would change nothing."""
    t = config.train
    if t.memory.offload_budget_gib == "auto" or t.activation_checkpointing == "offload":
        return None
    return (f"train.memory.offload_budget_gib: {t.memory.offload_budget_gib:g} GiB limits what "
            "train.activation_checkpointing: offload keeps in host memory, but "
            f"train.activation_checkpointing={str(t.activation_checkpointing).lower()}; set it to offload, or leave "
            "the budget out")


def default_run_folder_fits(config: RecipeConfig) -> str | None:
    """Without ``train.run.output_dir`` the run folder is ``train.run.runs_dir/<name>/<stamp>``: it must fit."""
    if config.train.run.output_dir is not None:
        return None
    try:
        check_run_folder(f"{config.train.run.runs_dir}/{config.name}", "train.run.runs_dir with the run's name")
    except ValueError as exc:
        return str(exc)
    return None


RULES: tuple[Callable[[RecipeConfig], str | None], ...] = (
    warmup_within_steps, fused_loss_alone, recomputes_see_liger, trace_needs_liger, tiled_mlp_needs_liger_uncompiled,
    offload_budget_needs_offload, default_run_folder_fits)
"""Every cross-section rule, in the order their problems are listed."""


def cross_section_problems(config: RecipeConfig) -> list[str]:
    """What every rule in :data:`RULES` finds wrong with ``config`` (empty when nothing is)."""
    return [problem for rule in RULES if (problem := rule(config)) is not None]
