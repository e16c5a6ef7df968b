"""``ligerkit bench``: eager, Liger, Liger + fused loss and torch.compile arms, side by side.

Each arm is its own training process from the same config, seed and data; warm-up steps are
excluded; the median step gives tokens/s, and the run's peak memory and median MFU are reported,
with ratios against the eager arm measured in the same invocation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ligerkit.errors import LigerKitError
from ligerkit.proof.arms import summarize
from ligerkit.proof.arms import Runner

ARMS: dict[str, list[str]] = {
    "eager": ["model.liger_kernel.enabled=false", "train.loss.path=standard", "train.compile=false"],
    "liger": ["model.liger_kernel.enabled=true", "train.loss.path=standard", "train.compile=false"],
    "liger_fused": ["model.liger_kernel.enabled=true", "train.loss.path=fused", "train.compile=false"],
    "compile": ["model.liger_kernel.enabled=false", "train.loss.path=standard", "train.compile=true"],
    "liger_compile": ["model.liger_kernel.enabled=true", "train.loss.path=standard", "train.compile=true",
                      "train.compile_over_liger_kernels=true"],
    # torch.compile for the decoder layers, Liger's fused linear cross entropy for the part compile
    # cannot shrink (the full logits): the kernel swaps stay off
    "compile_fused": ["model.liger_kernel.enabled=false", "train.loss.path=fused", "train.compile=true"],
}
DEFAULT_ARMS = ("eager", "liger", "liger_fused", "compile", "liger_compile", "compile_fused")


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


def bench(config: Path, arms: list[str], steps: int, warmup: int, overrides: list[str], runner: Runner,
          on_arm: Callable[[str], None] | None = None, nproc: int = 1) -> dict[str, Any]:
    """Run every arm through ``runner`` (one process each) and compute ratios against eager."""
    check_run_options(steps, warmup, nproc)
    results: dict[str, dict[str, Any]] = {}
    for arm in arms:
        run = runner(config, [*overrides, *ARMS[arm], f"train.steps={steps}", "train.progress=false"], nproc=nproc)
        results[arm] = summarize(run, warmup)
        if on_arm is not None:
            on_arm(arm)
    add_ratios(results)
    return {"config": str(config), "steps": steps, "warmup": warmup, "nproc": nproc, "arms": results}


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
    """``bench.json`` and ``bench.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    record, table = out / "bench.json", out / "bench.md"
    record.write_text(json.dumps(result, indent=2))
    table.write_text(f"{result['config']}, {result['steps']} steps ({result['warmup']} warm-up excluded)\n\n"
                     + to_markdown(result) + "\n")
    return [record, table]
