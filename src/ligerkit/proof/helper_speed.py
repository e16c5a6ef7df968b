"""The kit costs nothing at training time: a kit-wired recipe against Liger's helper called by hand.

Three kinds of process train the same config with the same trainer, seed and data: ``eager`` (Liger
off), ``kit`` (Liger on through the kit) and ``direct`` (Liger off in the config, Liger's registry
helper called by hand with the flags the kit resolved, before the trainer starts). ``kit`` and
``direct`` alternate ``repeats`` times, and the speed ratio is the median of the per-pair ratios, so a
neighbour on the machine or thermal drift slows both sides of a pair alike instead of biasing one.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ligerkit.proof.arm_runs import Runner, run_arm, summarize

LIGER_OFF = ["model.liger_kernel.enabled=false"]
LIGER_ON = ["model.liger_kernel.enabled=true"]


def helper_prelude(family: str, flags: dict[str, bool]) -> str:
    """Python that calls Liger's registry helper for ``family`` with ``flags`` (for ``run_arm``)."""
    return ("from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN as helpers\n"
            f"helpers[{family!r}](**{dict(flags)!r})")


def compare_kit_to_helper(config: str | Path, overrides: list[str], steps: int, warmup: int, repeats: int,
                          runner: Runner = run_arm) -> dict[str, Any]:
    """Eager once, then ``repeats`` alternating kit/direct pairs; losses, speeds and their ratios."""
    base = [*overrides, f"train.steps={steps}", "train.run.progress=false"]
    eager = summarize(runner(config, [*base, *LIGER_OFF]), warmup)
    kit_runs, direct_runs = [], []
    for _ in range(repeats):
        raw = runner(config, [*base, *LIGER_ON])
        kit_runs.append(summarize(raw, warmup))
        app = raw["report"]["applications"][0]
        prelude = helper_prelude(app["family"], app["modules"])
        direct_runs.append(summarize(runner(config, [*base, *LIGER_OFF], prelude=prelude), warmup))
    ratios = [k["tokens_per_s"] / d["tokens_per_s"] for k, d in zip(kit_runs, direct_runs, strict=True)]
    loss_gap = max(abs(a - b) for run in kit_runs for a, b in zip(run["losses"], eager["losses"], strict=True))
    helper_gap = max(abs(a - b) for k, d in zip(kit_runs, direct_runs, strict=True)
                     for a, b in zip(k["losses"], d["losses"], strict=True))
    return {
        "config": str(config), "overrides": overrides, "steps": steps, "warmup": warmup, "repeats": repeats,
        "eager": eager, "kit_runs": kit_runs, "direct_runs": direct_runs,
        "kit_over_direct_per_pair": ratios,
        "tokens_per_s_kit_over_direct": statistics.median(ratios),
        "tokens_per_s_kit_over_eager": statistics.median(r["tokens_per_s"] for r in kit_runs) / eager["tokens_per_s"],
        "max_loss_gap_kit_vs_eager": loss_gap,
        "max_loss_gap_kit_vs_direct": helper_gap,
    }


def to_markdown(result: dict[str, Any]) -> str:
    """The comparison as a markdown table and its two verdict lines."""
    eager = result["eager"]
    lines = ["| arm | median tokens/s | vs eager | peak memory (GiB) |", "| --- | ---: | ---: | ---: |",
             f"| eager (Liger off) | {eager['tokens_per_s']:,.0f} | 1.00x | {eager['peak_mem_gib']:.1f} |"]
    for name, runs in (("kit.apply", result["kit_runs"]), ("Liger's helper, by hand", result["direct_runs"])):
        speed = statistics.median(r["tokens_per_s"] for r in runs)
        lines.append(f"| {name} | {speed:,.0f} | {speed / eager['tokens_per_s']:.2f}x | {runs[0]['peak_mem_gib']:.1f} |")
    pairs = ", ".join(f"{r:.3f}" for r in result["kit_over_direct_per_pair"])
    lines += ["", f"Kit over helper, median of {result['repeats']} alternating pairs: "
                  f"{result['tokens_per_s_kit_over_direct']:.3f} (pairs: {pairs}).",
              f"Largest per-step loss gap, kit vs eager: {result['max_loss_gap_kit_vs_eager']:.2e}; "
              f"kit vs helper: {result['max_loss_gap_kit_vs_direct']:.2e}."]
    return "\n".join(lines)
