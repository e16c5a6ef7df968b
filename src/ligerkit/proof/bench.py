"""``ligerkit bench``: eager, Liger, Liger + fused loss and torch.compile arms, side by side, and a pick.

Each arm (``ligerkit.train.config.arms``) is its own training process from the same config, seed and data;
warm-up steps are excluded; the median step gives tokens/s, and the run's peak memory and median MFU
are reported, with ratios against the eager arm measured in the same invocation. With ``repeats``
> 1 the arms run in rounds (every arm once per round, eager first); an arm's speed and MFU are the
medians of its runs, its speed ratio (what the recommendation ranks by) the median of the per-round
ratios (each against the eager run of its own round), its peak memory and loss gaps the largest of
any round. Then, in the bench process, every arm's step-1 gradients are compared with a float32 run
(``ligerkit.proof.arm_grads``, skipped with ``--no-grads``), and ``ligerkit.proof.recommend`` picks
the fastest arm within the loss and gradient tolerances.

Each arm's process gets the arm's lines and ``train.arm=<arm>`` after the user's ``--set`` lines, so
the arm wins over a ``train.arm`` the recipe config sets, and each run's config.yaml names its arm.
The gradient pass clears ``train.arm`` (``train.arm=null``): its float32 truth is no arm.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ligerkit.errors import LigerKitError
from ligerkit.proof.arm_runs import ArmFailedError, Runner, summarize
from ligerkit.proof.bench_log import BenchLog
from ligerkit.proof.fits import out_of_memory_error, unfit_reason
from ligerkit.proof.bench_options import BenchOptions
from ligerkit.proof.loss_reference import add_float32_gaps, float32_gaps, float32_reference
from ligerkit.proof.recommend import (
    GradErrors,
    check_gradients,
    gradient_arms,
    recommend,
    training_lines,
)
from ligerkit.train.config.arms import ARMS, is_compiled
from ligerkit.train.config import ConfigError, load_recipe_config

__all__ = ["GradientsFn", "add_ratios", "arm_overrides", "bench", "check_arm_configs", "combine_rounds",
           "recipe_gradients"]

"""``--loss-tolerance``: the largest per-step absolute loss gap against eager an arm may have (bf16's
tolerance in ``ligerkit smoke``)."""

GradientsFn = Callable[[Sequence[str]], Mapping[str, GradErrors]]
"""Arm names -> each arm's step-1 gradient errors against float32 (``ligerkit.proof.arm_grads``)."""


def arm_overrides(arm: str, overrides: Sequence[str], steps: int) -> list[str]:
    """One arm's ``--set`` lines: the user's, then the arm's and ``train.arm=<arm>`` (the arm wins,
    whatever ``train.arm`` the config sets), then the bench's own."""
    return [*overrides, *ARMS[arm], f"train.arm={arm}", f"train.steps={steps}", "train.run.progress=false"]


def check_arm_configs(config: Path, arms: Sequence[str], overrides: Sequence[str], steps: int) -> None:
    """Load every arm's config (a :class:`ConfigError` names the first arm's bad key before any process
    starts, and the ``--arms`` whose configs load, if some do)."""
    errors: dict[str, ConfigError] = {}
    for arm in arms:
        try:
            load_recipe_config(config, arm_overrides(arm, overrides, steps))
        except ConfigError as exc:
            errors[arm] = exc
    if errors:
        arm, exc = next(iter(errors.items()))
        loads = [a for a in arms if a not in errors]
        hint = f"\nor bench the arms that can run as set: --arms {','.join(loads)}" if loads else ""
        raise ConfigError(f"bench arm {arm} ({', '.join(ARMS[arm])}): {exc}{hint}")


def bench(config: Path, options: BenchOptions, overrides: Sequence[str], runner: Runner,
          on_arm: Callable[[str], None] | None = None, *, gradients: GradientsFn | None = None,
          on_speed: Callable[[dict[str, Any]], None] | None = None, log: BenchLog | None = None) -> dict[str, Any]:
    """Run every arm of ``options`` through ``runner`` (one process each, ``options.repeats`` rounds),
    compute ratios against eager, and recommend.

    ``gradients`` (called once, after the speed arms, with the arms whose step-1 gradients the rule
    needs) gives each arm's errors against float32; ``None`` skips the gradient rule, and the
    recommendation says so. ``on_arm`` is called after each arm's run and after the gradients.
    ``on_speed`` gets the result of the speed arms alone (``complete: False``, no recommendation yet)
    before the gradient pass, so a caller can keep them should that pass fail. ``options.grad_overrides``
    are the lines the gradient pass added to the arms' (what ``gradients`` was built with), recorded so
    the result says what the check saw. ``options.loss_reference="float32"`` trains the eager arm once
    more in float32 after the rounds and after ``on_speed``
    (:func:`ligerkit.proof.loss_reference.float32_reference`); the result's ``float32_reference`` holds
    its losses and lines, or why it did not fit. ``log`` (:class:`~ligerkit.proof.bench_log.BenchLog`)
    keeps each finished run and hands back those an earlier, stopped invocation of the same bench
    finished, which are not run again.
    """
    arms, steps, warmup, nproc, repeats = list(options.arms), options.steps, options.warmup, options.nproc, \
        options.repeats
    loss_tolerance, loss_reference, grad_tolerance = options.loss_tolerance, options.loss_reference, \
        options.grad_tolerance
    grad_overrides = options.grad_overrides
    rounds: list[dict[str, dict[str, Any]]] = []
    unfit: dict[str, str] = {}  # an arm out of memory in any round: a result, left out of the ratios
    for round_ in range(repeats):
        results: dict[str, dict[str, Any]] = {}
        for arm in arms:
            if arm not in unfit:
                outcome = log.done.get((round_, arm)) if log is not None else None
                if outcome is None:  # not measured by an earlier, stopped invocation of this bench
                    try:
                        outcome = {"summary": summarize(runner(config, arm_overrides(arm, overrides, steps),
                                                               nproc=nproc), warmup)}
                    except ArmFailedError as exc:
                        outcome = {"did_not_fit": unfit_reason(arm, round_, exc)}
                    if log is not None:
                        log.record(round_, arm, outcome)
                if "summary" in outcome:
                    results[arm] = outcome["summary"]
                else:
                    unfit[arm] = outcome["did_not_fit"]
            if on_arm is not None:
                on_arm(arm)
        rounds.append(results)
    rounds = [{a: r for a, r in results.items() if a not in unfit} for results in rounds]
    for results in rounds:
        add_ratios(results)
    results = combine_rounds(rounds)
    arms = [a for a in arms if a not in unfit]
    head = {"config": str(config), "steps": steps, "warmup": warmup, "nproc": nproc, "repeats": repeats,
            "arms": results, "loss_tolerance": loss_tolerance, "out_of_memory": unfit, "float32_reference": None}
    if on_speed is not None:
        on_speed({**head, "complete": False, "gradients": None, "recommendation": None})
    if loss_reference == "float32":  # the eager arm once more, in float32: the loss rule's truth
        reference = (log.done.get((0, "float32"), {}).get("reference") if log is not None else None) or \
            float32_reference(runner, config, arm_overrides("eager", overrides, steps), nproc, warmup)
        if log is not None and (0, "float32") not in log.done:
            log.record(0, "float32", {"reference": reference})
        head["float32_reference"] = reference
        if "losses" in reference:
            add_float32_gaps(rounds, reference["losses"])
            head["arms"] = results = combine_rounds(rounds)
        if on_arm is not None:
            on_arm("float32")
    checks = None
    if gradients is not None:
        checks = check_gradients(gradients(gradient_arms(arms)), grad_tolerance)
        if on_arm is not None:
            on_arm("gradients")
    # ranked by each arm's speed relative to eager (eager is 1.0): with several rounds that is the
    # median of the per-round ratios, the figure the table shows, not a ratio of median speeds
    pick = recommend({a: r["tokens_per_s_vs_eager"] for a, r in results.items()},
                     {a: r["max_loss_gap_vs_eager"] for a, r in results.items()}, loss_tolerance, checks,
                     float32_gaps(results))
    pick = replace(pick, kept_lines=training_lines(load_recipe_config(config, arm_overrides(arms[0], overrides,
                                                                                             steps)).train))
    return {**head, "complete": True,
            "gradients": None if checks is None else {
                "tolerance": {"factor": grad_tolerance.factor, "slack": grad_tolerance.slack},
                "overrides": list(grad_overrides),
                "arms": {a: {"reference": c.reference, "passed": c.passed, "reason": c.reason,
                             "max_error": c.max_error, "failures": list(c.failures)} for a, c in checks.items()}},
            "recommendation": pick.to_dict()}


def recipe_gradients(config: Path, overrides: Sequence[str], device: Any,
                     grad_overrides: Sequence[str] = ()) -> GradientsFn:
    """The real gradient pass: :func:`ligerkit.proof.arm_grads.recipe_arm_grads` in this process on
    ``device``: one forward and backward per arm on the recipe's first sample
    (``train.micro_batch_size=1``, so a float32 copy of the model fits on the GPU at the training
    sequence length), right-padded (``data.pad_every=1``; generated data only) so ignored labels and
    padding are in the check, with the recipe's ``train.arm`` cleared so the float32 truth and every
    arm are exactly the lines given; ``grad_overrides`` come last (``data.seq_len=1024``: the check at a
    shorter sequence than the arms trained, for a model whose float32 copy does not fit at the training
    length). Running out of GPU memory (also when a compiler wraps the error)
    is a :class:`LigerKitError` that says what to change."""

    def run(names: Sequence[str]) -> Mapping[str, GradErrors]:
        from ligerkit.proof.arm_grads import Arm, recipe_arm_grads

        arms = {name: Arm(ARMS[name], compiled=is_compiled(name)) for name in names}
        try:
            return recipe_arm_grads(config, [*overrides, *GRADIENT_PASS_LINES, *grad_overrides], arms, device,
                                    calls=1)
        except Exception as exc:
            oom = out_of_memory_error(exc)
            if oom is None:
                raise
            raise LigerKitError(
                "the step-1 gradient check (a float32 copy of the model and each arm, one sample) ran out of "
                f"GPU memory ({str(oom).splitlines()[0] if str(oom) else type(oom).__name__}). The speed results "
                "are written; rerun with --grad-set data.seq_len=N (a shorter sequence for the check alone) or "
                "--no-grads") from exc

    return run


GRADIENT_PASS_LINES = ("train.micro_batch_size=1", "data.pad_every=1", "train.arm=null")
"""What the bench's gradient pass sets after the user's lines: one sample, right-padded, no arm."""


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


_MEDIANS = ("tokens_per_s", "step_time_s", "tokens_per_s_per_device", "mfu", "tokens_per_s_vs_eager")
_WORST = ("peak_mem_gib", "first_loss_gap_vs_eager", "max_loss_gap_vs_eager", "max_loss_gap_vs_float32")
_PER_RUN = ("tokens_per_s", "tokens_per_s_vs_eager", "step_time_s", "peak_mem_gib", "mfu", "max_loss_gap_vs_eager",
            "max_loss_gap_vs_float32")


def combine_rounds(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Rounds of :func:`add_ratios` results -> one result per arm: the median of the speed figures and
    of the per-round speed ratios; the largest peak memory and loss gaps of any round, and the memory
    ratio of those peaks; the first round's losses and grad norms; and ``runs``, each round's own
    figures (its loss gap included). One round is returned as it was, with ``runs`` added."""
    combined: dict[str, dict[str, Any]] = {}
    for arm, first in rounds[0].items():
        runs = [r[arm] for r in rounds]
        merged = dict(first)
        for key in _MEDIANS:
            values = [r[key] for r in runs if r.get(key) is not None]
            merged[key] = statistics.median(values) if values else None
        for key in _WORST:
            values = [r[key] for r in runs if r.get(key) is not None]
            merged[key] = max(values) if values else None
        merged["runs"] = [{k: r.get(k) for k in _PER_RUN} for r in runs]
        combined[arm] = merged
    eager_peak = combined["eager"]["peak_mem_gib"]
    for merged in combined.values():
        merged["peak_mem_vs_eager"] = (merged["peak_mem_gib"] / eager_peak
                                       if merged["peak_mem_gib"] and eager_peak else None)
    return combined
