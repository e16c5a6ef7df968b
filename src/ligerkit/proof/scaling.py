"""Scaling over GPUs: each arm on one GPU and on N, weak and strong, as per-GPU efficiencies.

- ``one``: the recipe's config on one GPU (global batch ``G`` in micro-batches of ``m``).
- ``weak``: N GPUs, each with the one-GPU run's micro-batches (global batch ``N x G``). Efficiency is
  the N-GPU run's tokens/s per GPU over the one-GPU run's tokens/s; 1.0 is perfect.
- ``strong``: N GPUs sharing the one-GPU run's global batch ``G`` (the micro-batch shrinks to
  ``G / N`` when it no longer fits a rank's share). Efficiency is the speed-up over one GPU, over N.

Every run is a fresh training process (``ligerkit.proof.arm_runs``; ``torchrun`` and FSDP2 when N > 1)
from the same seed and data. With ``repeats`` > 1 the runs go in rounds and each figure is the
median of the per-round ratios, each against the one-GPU run of its own round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ligerkit.errors import LigerKitError
from ligerkit.proof.arm_runs import Runner, summarize
from ligerkit.proof.bench import arm_overrides
from ligerkit.proof.bench_options import check_run_options
from ligerkit.train.config import load_recipe_config

__all__ = ["MODES", "check_scaling_configs", "mode_overrides", "scaling", "to_markdown"]

MODES = ("one", "weak", "strong")


def mode_overrides(global_batch: int, micro_batch: int, nproc: int) -> dict[str, list[str]]:
    """The batch lines of each mode for a config of ``global_batch`` sequences in micro-batches of
    ``micro_batch``, on ``nproc`` GPUs; a strong-scaling split that cannot work is an error."""
    if nproc < 2:
        raise LigerKitError(f"scaling needs at least 2 GPUs (--nproc {nproc})")
    if global_batch % nproc:
        raise LigerKitError(f"strong scaling splits train.global_batch_size {global_batch} over {nproc} GPUs; "
                            "choose a global batch the GPU count divides (--set train.global_batch_size=...)")
    share = global_batch // nproc
    strong_micro = min(micro_batch, share)
    if share % strong_micro:
        raise LigerKitError(f"strong scaling gives each of {nproc} GPUs {share} sequences, which micro-batches "
                            f"of {strong_micro} do not divide; change train.micro_batch_size")
    return {
        "one": [f"train.global_batch_size={global_batch}", f"train.micro_batch_size={micro_batch}"],
        "weak": [f"train.global_batch_size={global_batch * nproc}", f"train.micro_batch_size={micro_batch}"],
        "strong": [f"train.global_batch_size={global_batch}", f"train.micro_batch_size={strong_micro}"],
    }


def _run_lines(arm: str, overrides: Sequence[str], batch: Sequence[str], steps: int) -> list[str]:
    """A run's lines: the bench's for the arm, with the mode's batch lines after the user's."""
    return arm_overrides(arm, [*overrides, *batch], steps)


def check_scaling_configs(config: Path, arms: Sequence[str], overrides: Sequence[str], steps: int,
                          nproc: int) -> dict[str, list[str]]:
    """Every run's config loads (a bad key is named before any process starts); returns the modes'
    batch lines."""
    base = load_recipe_config(config, list(overrides))
    modes = mode_overrides(base.train.global_batch_size, base.train.micro_batch_size, nproc)
    for arm in arms:
        for batch in modes.values():
            load_recipe_config(config, _run_lines(arm, overrides, batch, steps))
    return modes


def scaling(config: Path, arms: Sequence[str], nproc: int, steps: int, warmup: int, overrides: Sequence[str],
            runner: Runner, repeats: int = 1, on_run: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Run every arm in every mode (``one`` on 1 GPU, ``weak`` and ``strong`` on ``nproc``) through
    ``runner``; return per-arm speeds and efficiencies. ``on_run(arm, mode)`` follows each run."""
    check_run_options(steps, warmup, nproc, repeats)
    modes = check_scaling_configs(config, arms, overrides, steps, nproc)
    rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
    for _ in range(repeats):
        got: dict[str, dict[str, dict[str, Any]]] = {}
        for arm in arms:
            got[arm] = {}
            for mode, batch in modes.items():
                run = runner(config, _run_lines(arm, overrides, batch, steps), nproc=1 if mode == "one" else nproc)
                got[arm][mode] = summarize(run, warmup)
                if on_run is not None:
                    on_run(arm, mode)
        rounds.append(got)
    result: dict[str, Any] = {"config": str(config), "nproc": nproc, "steps": steps, "warmup": warmup,
                              "repeats": repeats, "modes": modes, "arms": {}}
    for arm in arms:
        weak = [r[arm]["weak"]["tokens_per_s_per_device"] / r[arm]["one"]["tokens_per_s"] for r in rounds]
        strong = [r[arm]["strong"]["tokens_per_s"] / r[arm]["one"]["tokens_per_s"] for r in rounds]
        entry: dict[str, Any] = {
            mode: {key: statistics.median(r[arm][mode][key] for r in rounds)
                   for key in ("tokens_per_s", "tokens_per_s_per_device")}
            for mode in MODES
        }
        for mode in MODES:
            peaks = [r[arm][mode]["peak_mem_gib"] for r in rounds if r[arm][mode]["peak_mem_gib"] is not None]
            entry[mode]["peak_mem_gib"] = max(peaks) if peaks else None
        entry.update(weak_efficiency=statistics.median(weak), strong_speedup=statistics.median(strong),
                     strong_efficiency=statistics.median(strong) / nproc, weak_per_round=weak,
                     strong_speedup_per_round=strong)
        result["arms"][arm] = entry
    return result


def to_markdown(result: dict[str, Any]) -> str:
    """The scaling result as a markdown table."""
    n = result["nproc"]
    lines = [(f"| arm | tokens/s, 1 GPU | weak: tokens/s per GPU, {n} GPUs | weak efficiency | strong: tokens/s, "
              f"{n} GPUs | strong speed-up | strong efficiency |"),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm, r in result["arms"].items():
        lines.append(f"| {arm} | {r['one']['tokens_per_s']:,.0f} | {r['weak']['tokens_per_s_per_device']:,.0f} | "
                     f"{r['weak_efficiency']:.1%} | {r['strong']['tokens_per_s']:,.0f} | {r['strong_speedup']:.2f}x | "
                     f"{r['strong_efficiency']:.1%} |")
    return "\n".join(lines)
