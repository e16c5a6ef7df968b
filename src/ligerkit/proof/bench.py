"""``ligerkit bench``: eager, Liger, Liger + fused loss and torch.compile arms, side by side, and a pick.

Each arm (``ligerkit.train.arms``) is its own training process from the same config, seed and data;
warm-up steps are excluded; the median step gives tokens/s, and the run's peak memory and median MFU
are reported, with ratios against the eager arm measured in the same invocation. Then, in the bench
process, every arm's step-1 gradients are compared with a float32 run (``ligerkit.proof.arm_grads``,
skipped with ``--no-grads``), and ``ligerkit.proof.recommend`` picks the fastest arm within the loss
and gradient tolerances.

Each arm's process gets the arm's lines and ``train.arm=<arm>`` after the user's ``--set`` lines, so
the arm wins over a ``train.arm`` the recipe config sets, and each run's config.yaml names its arm.
The gradient pass clears ``train.arm`` (``train.arm=null``): its float32 truth is no arm.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ligerkit.errors import InvalidOptionError, LigerKitError
from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof.arms import Runner, summarize
from ligerkit.proof.recommend import (
    GradErrors,
    Recommendation,
    check_gradients,
    gradient_arms,
    recommend,
)
from ligerkit.train.arms import ARMS, DEFAULT_ARMS, is_compiled
from ligerkit.train.config import ConfigError, load_recipe_config

__all__ = ["ARMS", "DEFAULT_ARMS", "DEFAULT_LOSS_TOLERANCE", "GradientsFn", "add_ratios", "arm_overrides", "bench",
           "check_arm_configs", "check_loss_tolerance", "check_run_options", "parse_arms", "recipe_gradients",
           "to_markdown", "write_outputs"]

DEFAULT_LOSS_TOLERANCE = 1e-2
"""``--loss-tolerance``: the largest per-step absolute loss gap against eager an arm may have (bf16's
tolerance in ``ligerkit smoke``)."""

GradientsFn = Callable[[Sequence[str]], Mapping[str, GradErrors]]
"""Arm names -> each arm's step-1 gradient errors against float32 (``ligerkit.proof.arm_grads``)."""


def parse_arms(spec: str) -> list[str]:
    """``eager,liger`` -> arm names, eager first (the ratios are against it); unknown, empty or repeated
    names are errors."""
    arms = [a.strip() for a in spec.split(",")]
    if not any(arms) or not all(arms):
        raise LigerKitError(f"--arms {spec!r} has an empty name; choose from {', '.join(ARMS)}")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise LigerKitError(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    repeated = sorted({a for a in arms if arms.count(a) > 1})
    if repeated:
        raise LigerKitError(f"--arms names {', '.join(repeated)} twice; each arm runs once")
    return ["eager", *[a for a in arms if a != "eager"]]


def check_run_options(steps: int, warmup: int, nproc: int) -> None:
    """Refuse step, warm-up and process counts that cannot give a measurement."""
    if steps < 1 or nproc < 1 or warmup < 0:
        raise LigerKitError(f"--steps ({steps}) and --nproc ({nproc}) must be at least 1, --warmup ({warmup}) at least 0")
    if warmup >= steps:
        raise LigerKitError(f"--warmup {warmup} must be smaller than --steps {steps}")


def check_loss_tolerance(value: float) -> float:
    """Refuse a ``--loss-tolerance`` that is negative, infinite or NaN."""
    if not (math.isfinite(value) and value >= 0):
        raise InvalidOptionError(f"--loss-tolerance {value}: give a finite number >= 0 (default "
                                 f"{DEFAULT_LOSS_TOLERANCE:g}, an absolute per-step loss gap against eager)")
    return value


def arm_overrides(arm: str, overrides: Sequence[str], steps: int) -> list[str]:
    """One arm's ``--set`` lines: the user's, then the arm's and ``train.arm=<arm>`` (the arm wins,
    whatever ``train.arm`` the config sets), then the bench's own."""
    return [*overrides, *ARMS[arm], f"train.arm={arm}", f"train.steps={steps}", "train.progress=false"]


def check_arm_configs(config: Path, arms: Sequence[str], overrides: Sequence[str], steps: int) -> None:
    """Load every arm's config (a :class:`ConfigError` names the arm's bad key before any process starts)."""
    for arm in arms:
        try:
            load_recipe_config(config, arm_overrides(arm, overrides, steps))
        except ConfigError as exc:
            raise ConfigError(f"bench arm {arm} ({', '.join(ARMS[arm])}): {exc}") from None


def bench(config: Path, arms: list[str], steps: int, warmup: int, overrides: list[str], runner: Runner,
          on_arm: Callable[[str], None] | None = None, nproc: int = 1, *,
          loss_tolerance: float = DEFAULT_LOSS_TOLERANCE, gradients: GradientsFn | None = None,
          grad_tolerance: GradTolerance | None = None) -> dict[str, Any]:
    """Run every arm through ``runner`` (one process each), compute ratios against eager, and recommend.

    ``gradients`` (called once, after the speed arms, with the arms whose step-1 gradients the rule
    needs) gives each arm's errors against float32; ``None`` skips the gradient rule, and the
    recommendation says so. ``on_arm`` is called after each arm and after the gradients.
    """
    check_run_options(steps, warmup, nproc)
    check_loss_tolerance(loss_tolerance)
    grad_tolerance = grad_tolerance or GradTolerance()
    results: dict[str, dict[str, Any]] = {}
    for arm in arms:
        run = runner(config, arm_overrides(arm, overrides, steps), nproc=nproc)
        results[arm] = summarize(run, warmup)
        if on_arm is not None:
            on_arm(arm)
    add_ratios(results)
    checks = None
    if gradients is not None:
        checks = check_gradients(gradients(gradient_arms(arms)), grad_tolerance)
        if on_arm is not None:
            on_arm("gradients")
    pick = recommend({a: r["tokens_per_s"] for a, r in results.items()},
                     {a: r["max_loss_gap_vs_eager"] for a, r in results.items()}, loss_tolerance, checks)
    return {"config": str(config), "steps": steps, "warmup": warmup, "nproc": nproc, "arms": results,
            "loss_tolerance": loss_tolerance,
            "gradients": None if checks is None else {
                "tolerance": {"factor": grad_tolerance.factor, "slack": grad_tolerance.slack},
                "arms": {a: {"reference": c.reference, "passed": c.passed, "reason": c.reason,
                             "max_error": c.max_error, "failures": list(c.failures)} for a, c in checks.items()}},
            "recommendation": pick.to_dict()}


def recipe_gradients(config: Path, overrides: Sequence[str], device: Any) -> GradientsFn:
    """The real gradient pass: :func:`ligerkit.proof.arm_grads.recipe_arm_grads` in this process on
    ``device`` (one forward and backward per arm on the recipe's first micro-batch), with the recipe's
    ``train.arm`` cleared so the float32 truth and every arm are exactly the lines given."""

    def run(names: Sequence[str]) -> Mapping[str, GradErrors]:
        from ligerkit.proof.arm_grads import Arm, recipe_arm_grads

        arms = {name: Arm(ARMS[name], compiled=is_compiled(name)) for name in names}
        return recipe_arm_grads(config, [*overrides, "train.arm=null"], arms, device, calls=1)

    return run


def add_ratios(results: dict[str, dict[str, Any]]) -> None:
    """Speed, memory and loss of every arm against the ``eager`` arm of the same run, in place."""
    eager = results["eager"]
    for r in results.values():
        # same seed and data: step 1's loss differs only by kernel rounding unless an arm computes
        # something else; later steps add the drift of different rounding
        r["first_loss_gap_vs_eager"] = abs(r["losses"][0] - eager["losses"][0])
        r["max_loss_gap_vs_eager"] = max(abs(a - b) for a, b in zip(r["losses"], eager["losses"], strict=True))
        r["tokens_per_s_vs_eager"] = r["tokens_per_s"] / eager["tokens_per_s"]
        r["peak_mem_vs_eager"] = (r["peak_mem_gib"] / eager["peak_mem_gib"]
                                  if r["peak_mem_gib"] and eager["peak_mem_gib"] else None)


def to_markdown(result: dict[str, Any]) -> str:
    """The bench result as a markdown table."""
    lines = ["| arm | median step (ms) | tokens/s | vs eager | tokens/s per device | peak memory (GiB) | vs eager "
             "| MFU | step-1 loss gap vs eager | max loss gap vs eager |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm, r in result["arms"].items():
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "n/a"
        mem_ratio = f"{r['peak_mem_vs_eager']:.3f}x" if r["peak_mem_vs_eager"] is not None else "n/a"
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        step = f"{r['step_time_s'] * 1e3:.1f}" if r.get("step_time_s") is not None else "n/a"
        lines.append(f"| {arm} | {step} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s_vs_eager']:.2f}x | "
                     f"{r['tokens_per_s_per_device']:,.0f} | {mem} | {mem_ratio} | {mfu} | "
                     f"{r['first_loss_gap_vs_eager']:.1e} | {r['max_loss_gap_vs_eager']:.1e} |")
    return "\n".join(lines)


def write_outputs(result: dict[str, Any], out: Path) -> list[Path]:
    """``bench.json`` and ``bench.md`` (the speed table, then the recommendation) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    record, table = out / "bench.json", out / "bench.md"
    record.write_text(json.dumps(result, indent=2))
    text = (f"{result['config']}, {result['steps']} steps ({result['warmup']} warm-up excluded)\n\n"
            + to_markdown(result) + "\n")
    if result.get("recommendation"):
        text += "\n" + Recommendation.from_dict(result["recommendation"]).markdown() + "\n"
    table.write_text(text)
    return [record, table]
