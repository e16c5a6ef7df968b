"""The longest sequence each arm trains at: lengths doubled from a start until a run does not fit,
then bisected (geometrically) until the longest fit and the shortest miss are within a precision.

A run that does not fit is a result, not a crash: the trial records why (the allocator's
out-of-memory error, or the footprint check's refusal before anything was allocated). The search is
pure (:func:`next_length` reads the trials so far), so a sweep that stops at a time limit resumes
from its recorded trials; each trial records its setting (:mod:`ligerkit.proof.record_setting`), and a
run in another one adds nothing to that record.

An arm of the sweep is a bench arm, optionally with memory variants (:func:`arm_spec`:
``liger_fused+offload`` is the swaps and the fused loss with each layer checkpointed and its kept
input in host memory; ``liger_fused+offload+tiled`` also takes Liger's tiled MLP); :func:`recommendation`
names the arm that fits the longest sequence and its tokens/s there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ligerkit.errors import LigerKitError
from ligerkit.proof.bench import GRADIENT_PASS_LINES, arm_overrides
from ligerkit.proof.fits import describe_allocator, out_of_memory_error
from ligerkit.proof.recommend import GradCheck, GradTolerance, check_gradients
from ligerkit.train.config.arms import arm_lines, is_compiled

if TYPE_CHECKING:
    import torch

VARIANTS: dict[str, tuple[str, ...]] = {
    "ckpt": ("train.activation_checkpointing=true",),
    "offload": ("train.activation_checkpointing=offload",),
    "tiled": ("model.liger_kernel.tiled_mlp=true",),  # Liger's arms only: it picks the form of their MLP swap
}
"""Memory variants a sweep arm may add to a bench arm (``ARM+VARIANT``), with the lines each sets."""


def arm_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """``ARM[+VARIANT...]`` as the bench arm and the lines its variants add (``liger_fused+offload``);
    an unknown arm or variant, or two variants that set one key, is a :class:`LigerKitError` naming the
    choices."""
    arm, *variants = spec.split("+")
    try:
        arm_lines(arm)
    except KeyError as exc:  # the bench's own words for an unknown arm
        raise LigerKitError(f"{exc.args[0]} (in {spec!r})") from None
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise LigerKitError(f"unknown variant {unknown[0]!r} in {spec!r}; the variants are {', '.join(VARIANTS)} "
                            "(ARM+VARIANT, e.g. liger_fused+offload)")
    lines = tuple(line for v in variants for line in VARIANTS[v])
    keys = [line.split("=", 1)[0] for line in lines]
    if len(set(keys)) < len(keys):
        raise LigerKitError(f"{spec!r} sets {keys[0]} twice; give one of {', '.join(variants)}")
    return arm, lines

def length_lines(seq_len: int) -> list[str]:
    """The overrides of one trial: one sample of ``seq_len`` generated tokens, positions that reach it."""
    return ["data.kind=synthetic", f"data.seq_len={seq_len}", "data.pad_every=0", "train.global_batch_size=1",
            "train.micro_batch_size=1", f"model.config.max_position_embeddings={max(seq_len, 40960)}"]


def trial_overrides(spec: str, seq_len: int, extra: Sequence[str] = (), steps: int = 2) -> list[str]:
    """The ``--set`` lines of ``spec`` (``ARM[+VARIANT...]``) at ``seq_len``: ``extra`` (the user's), the
    variants', the length's (:func:`length_lines`), then the bench arm's own."""
    arm, variant_lines = arm_spec(spec)
    return arm_overrides(arm, [*extra, *variant_lines, *length_lines(seq_len)], steps)


def sweep_gradients(config: str | Path, specs: Sequence[str], reference: str, seq_len: int, extra: Sequence[str],
                    device: torch.device, tolerance: GradTolerance | None = None) -> dict[str, GradCheck]:
    """Step-1 gradients of every sweep arm (``ARM[+VARIANT...]``) at ``seq_len``, on one right-padded
    sample, each parameter's error against a float32 Liger-off run of the same weights, judged against
    ``reference``'s errors (:func:`ligerkit.proof.recommend.check_gradients`): the proof each arm trains
    what the reference trains, at a length where the float32 copy fits (shorter than the sweep's).
    Running out of GPU memory is a :class:`LigerKitError` that says to give a shorter length."""
    from ligerkit.proof.arm_grads import Arm, recipe_arm_grads

    arms = {}
    for spec in dict.fromkeys([reference, *specs]):
        arm, lines = arm_spec(spec)
        arms[spec] = Arm((*arm_lines(arm), *lines), compiled=is_compiled(arm))
    try:
        grads = recipe_arm_grads(config, [*extra, *length_lines(seq_len), *GRADIENT_PASS_LINES], arms, device)
    except Exception as exc:
        oom = out_of_memory_error(exc)
        if oom is None:
            raise
        first = str(oom).splitlines()[0] if str(oom) else type(oom).__name__
        raise LigerKitError(f"the step-1 gradient check at {seq_len:,} tokens (a float32 copy of the model, then each "
                            f"arm in turn, one sample) ran out of GPU memory ({first}); give --grads a shorter "
                            "length, or run the check on a card with more memory") from exc
    return check_gradients(grads, tolerance, references={spec: reference for spec in arms})


@dataclass(frozen=True)
class Trial:
    """One run of one arm at one sequence length."""

    arm: str
    seq_len: int
    fits: bool
    reason: str = ""
    peak_mem_gib: float | None = None
    tokens_per_s: float | None = None
    seconds: float | None = None  # the trial's wall time, process start to end
    step_s: float | None = None  # one training step's time (the median), within it
    allocator: dict[str, float] | None = None  # an out-of-memory miss: the allocator's state (fits.allocator_state)
    setting: dict[str, Any] | None = None  # where and as what it ran (record_setting); None in older records
    processes: int = 1  # 2 for a trial in parts: step 1 in a process of its own, the rest resuming it

    def to_dict(self) -> dict[str, Any]:
        """The trial as a JSON object (one line of the sweep's record)."""
        return asdict(self)


TOO_SLOW = "too slow to measure"
"""The reason of a length no trial can reach within the sweep's time limit (:func:`predicted_seconds`)."""


def predicted_seconds(trials: Sequence[Trial], seq_len: int, steps: int, of: int | None = None) -> float | None:
    """About how long a process running ``of`` of a trial's ``steps`` steps (default: all of them) takes at
    ``seq_len``, from the longest timed trial that fit (``None`` without one): its start-up time as it was (a
    trial in parts started ``processes`` times), each step's time grown with the square of the length
    (attention's share, which dominates at long sequences; the rest grows linearly, so this errs long)."""
    timed = [t for t in trials if t.fits and t.seconds is not None and t.step_s is not None]
    if not timed:
        return None
    base = max(timed, key=lambda t: t.seq_len)
    start_up = max(base.seconds - steps * base.step_s, 0.0) / base.processes
    return start_up + (steps if of is None else of) * base.step_s * (seq_len / base.seq_len) ** 2


def bounds(trials: Sequence[Trial]) -> tuple[int | None, int | None]:
    """``(longest fit, shortest miss above it)``; either is ``None`` when no trial gives it."""
    fits = [t.seq_len for t in trials if t.fits]
    longest = max(fits, default=None)
    misses = [t.seq_len for t in trials if not t.fits and (longest is None or t.seq_len > longest)]
    return longest, min(misses, default=None)


def check_search_range(start: int, limit: int, precision: float, multiple: int = 256) -> None:
    """Refuse a search :func:`next_length` cannot run, naming the setting at fault by its sweep option.

    ``start`` must be above 0 tokens, ``limit`` at least ``start``, ``precision`` a fraction strictly
    between 0 and 1 and ``multiple`` above 0; anything else is a :class:`LigerKitError`.
    """
    if start <= 0 or limit < start:
        raise LigerKitError(f"--start takes tokens above 0 and --limit at least --start (got {start}, {limit})")
    if not 0 < precision < 1:
        raise LigerKitError(f"--precision takes a fraction between 0 and 1, e.g. 0.05 for 5% (got {precision:g})")
    if multiple <= 0:
        raise LigerKitError(f"the lengths' multiple must be above 0 tokens (got {multiple})")


def next_length(trials: Sequence[Trial], start: int, limit: int, precision: float = 0.10,
                multiple: int = 256) -> int | None:
    """The next length to try, or ``None`` when the search is done.

    Doubles from ``start`` while every run fits (up to ``limit``, the longest length the sweep may
    try); after the first miss, tries the geometric middle of the longest fit and the shortest miss,
    rounded to ``multiple``, until they are within ``precision`` of each other (or no multiple lies
    between them). A ``start`` that does not fit is halved until a length fits (then bisected as
    above); nothing fitting even at ``multiple`` tokens ends the search.
    """
    check_search_range(start, limit, precision, multiple)
    longest, miss = bounds(trials)
    tried = {t.seq_len for t in trials}
    if longest is None:
        if start not in tried:
            return start
        half = min(tried) // 2 // multiple * multiple
        return half if half >= multiple else None
    if miss is None:
        doubled = min(longest * 2, limit)
        return None if doubled <= longest or doubled in tried else doubled
    if miss <= longest * (1 + precision):
        return None
    middle = round(math.sqrt(longest * miss) / multiple) * multiple
    if not longest < middle < miss:
        middle = (longest + miss) // 2 // multiple * multiple
    return middle if longest < middle < miss and middle not in tried else None


def summary(trials: Sequence[Trial], arms: Sequence[str], reference: str = "eager") -> dict[str, Any]:
    """Per arm: the longest length that fit, the shortest that did not (why, and when it ran out of memory
    what the allocator held then), its peak memory and tokens/s there, and the longest fit as a multiple
    of ``reference``'s."""
    out: dict[str, Any] = {}
    for arm in arms:
        mine = [t for t in trials if t.arm == arm]
        longest, miss = bounds(mine)
        at = next((t for t in mine if t.fits and t.seq_len == longest), None)
        out[arm] = {"longest_fit": longest, "shortest_miss": miss, "trials": len(mine),
                    "peak_mem_gib": at.peak_mem_gib if at else None, "tokens_per_s": at.tokens_per_s if at else None,
                    "miss_reason": next((t.reason for t in mine if not t.fits and t.seq_len == miss), None),
                    "miss_allocator": next((t.allocator for t in mine if not t.fits and t.seq_len == miss), None)}
    base = out.get(reference, {}).get("longest_fit")
    for row in out.values():
        row["vs_" + reference] = round(row["longest_fit"] / base, 3) if base and row["longest_fit"] else None
    return out


def to_markdown(result: dict[str, Any], reference: str = "eager") -> str:
    """The sweep's table: one row per arm."""
    def why(row: dict[str, Any]) -> str:
        said = describe_allocator(row.get("miss_allocator"))
        return (row["miss_reason"] or "-") + (f" ({said})" if said else "")

    lines = [f"| arm | longest that fits | vs {reference} | shortest that did not | why | peak GiB at the longest "
             "| tokens/s there |", "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for arm, row in result.items():
        def num(value: Any, fmt: str = "{}") -> str:
            return "-" if value is None else fmt.format(value)
        lines.append(f"| {arm} | {num(row['longest_fit'])} | {num(row['vs_' + reference], '{:.2f}x')} "
                     f"| {num(row['shortest_miss'])} | {why(row)} "
                     f"| {num(row['peak_mem_gib'], '{:.1f}')} | {num(row['tokens_per_s'], '{:,.0f}')} |")
    return "\n".join(lines)


def recommendation(result: dict[str, Any], reference: str = "eager",
                   gradients: dict[str, GradCheck] | None = None) -> str:
    """Which arm fits the longest sequence, as a multiple of ``reference``'s, and its tokens/s there (the
    cost: the reference's tokens/s at its own longest beside it). With ``gradients`` (from
    :func:`sweep_gradients`) an arm whose step-1 gradients did not pass, or were not checked, is left
    out, and named with why."""
    fitting = {arm: row for arm, row in result.items() if row["longest_fit"]}
    left_out = {} if gradients is None else {
        arm: gradients[arm].reason if arm in gradients else "not checked"
        for arm in fitting if arm not in gradients or not gradients[arm].passed}
    fitting = {arm: row for arm, row in fitting.items() if arm not in left_out}
    why = "; left out: " + "; ".join(f"{arm} (step-1 gradients: {reason})" for arm, reason in left_out.items()) \
        if left_out else ""
    if not fitting:
        return ("no arm whose gradients passed fit at the start length" if left_out else
                "no arm fit at the start length") + why
    arm = max(fitting, key=lambda a: (fitting[a]["longest_fit"], fitting[a]["tokens_per_s"] or 0))
    row, base = fitting[arm], result.get(reference) if (result.get(reference) or {}).get("longest_fit") else None
    text = f"longest: {arm} fits {row['longest_fit']:,} tokens"
    if base and arm != reference:
        text += f" ({row['vs_' + reference]:.2f}x {reference}'s {base['longest_fit']:,})"
    speed = row["tokens_per_s"]
    text += f", at {speed:,.0f} tokens/s there" if speed else ", tokens/s there not measured"
    if base and arm != reference and base["tokens_per_s"]:
        text += f" ({reference}: {base['tokens_per_s']:,.0f} tokens/s at its longest)"
    if (row["miss_reason"] or "").startswith(TOO_SLOW):
        text += "; its longest is bounded by the sweep's time limit, not by memory"
    return text + why


BREAKDOWN_ROWS: tuple[tuple[str, str], ...] = (
    ("workspace_gib", "cuBLAS workspaces"), ("weights_gib", "weights"), ("optimizer_states_gib", "AdamW states"),
    ("grads_gib", "gradients held"),
    ("saved_by_forward_gib", "kept by the forward (allocator)"), ("host_offloaded_gib", "in host memory (offload)"),
    ("offload_kept_on_device_gib", "past the offload budget, on the device"),
    ("micro_batch_peak_gib", "peak of the step"),
)
"""The phases of ``benchmarks/memory_gpu.py``'s JSON line a breakdown table shows, with their labels."""


def breakdown_markdown(breakdowns: dict[str, dict[str, Any]]) -> str:
    """Where each arm's memory goes at its longest length (arm to ``memory_gpu.py --saved``'s JSON, or to
    ``{"error": ...}``): one column per arm, the phases, then what the forward keeps by kind (GiB)."""
    arms = list(breakdowns)
    ok = {arm: row for arm, row in breakdowns.items() if "error" not in row}
    kinds: list[str] = []
    for row in ok.values():
        kinds += [k for k in row.get("saved_by_kind", {}) if k not in kinds]
    heads = [f"{arm} at {row['seq_len']:,}" if isinstance(row.get("seq_len"), int) else arm
             for arm, row in breakdowns.items()]
    lines = ["| GiB | " + " | ".join(heads) + " |", "| --- |" + " ---: |" * len(arms)]

    def cell(arm: str, value: Any) -> str:
        if arm not in ok:
            return "-"
        return "-" if value is None else f"{value:.2f}"

    for key, label in BREAKDOWN_ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(a, ok.get(a, {}).get(key)) for a in arms) + " |")
    for kind in kinds:
        lines.append(f"| forward keeps: {kind} | " + " | ".join(
            cell(a, ok.get(a, {}).get("saved_by_kind", {}).get(kind, {}).get("gib", 0.0)) for a in arms) + " |")
    failed = [f"{arm}: {row['error']}" for arm, row in breakdowns.items() if "error" in row]
    return "\n".join(lines + ([""] + [f"not measured: {line}" for line in failed] if failed else []))
