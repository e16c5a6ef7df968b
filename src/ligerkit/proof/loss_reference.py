"""The bench's float32 loss reference (``ligerkit bench --loss-reference float32``).

The bench's loss rule compares every arm's per-step loss with the ``eager`` arm's. That assumes eager
is the trajectory to stay near, and in bf16 it is not always: with LoRA at the Qwen3-0.6B shape, eager's
step-2 loss was 0.037 from a float32 run's while compile mode's was 0.003 from it (docs/benchmarks.md,
"Sizes users train"), so the rule against eager left out the arm nearer the truth. With this reference
the bench trains the eager arm once more in float32 (same seed, data and steps; autocast off) and an arm
also passes the loss rule when its largest per-step gap to float32 is at most eager's own gap to float32
plus the tolerance: it is no further from the truth than eager is. A float32 run that does not fit is
tried again with activation checkpointing (recomputing a layer computes the same numbers); one that
still does not fit is said in the result, and the rule against eager alone applies.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from ligerkit.errors import InvalidOptionError, LigerKitError
from ligerkit.proof.arm_runs import ArmFailedError, Runner, summarize
from ligerkit.proof.fits import does_not_fit

LOSS_REFERENCES = ("eager", "float32")
"""``--loss-reference`` values: ``eager`` (the rule against eager alone) or ``float32`` (also against a
float32 run)."""

FLOAT32_LINES = ("model.dtype=float32", "train.autocast_bf16=false")
"""What the float32 run sets after the eager arm's lines."""

RECOMPUTE_LINE = "train.activation_checkpointing=true"
"""Added for the second try of a float32 run that did not fit."""


def float32_reference(runner: Runner, config: Path, eager_lines: Sequence[str], nproc: int,
                      warmup: int) -> dict[str, Any]:
    """Train ``eager_lines`` (the eager arm's) in float32 through ``runner``: ``{"lines", "losses"}``, or
    ``{"lines", "did_not_fit"}`` when it does not fit even with activation checkpointing. Any other
    failure is a :class:`LigerKitError` (a bug is not a size)."""
    tries = [[*eager_lines, *FLOAT32_LINES]]
    tries.append([*tries[0], RECOMPUTE_LINE])
    why = ""
    for lines in tries:
        try:
            return {"lines": lines[len(eager_lines):], "losses": summarize(runner(config, lines, nproc=nproc),
                                                                           warmup)["losses"]}
        except ArmFailedError as exc:
            why = does_not_fit(str(exc))
            if why is None:
                last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                raise LigerKitError(f"the float32 loss reference ({', '.join(lines[len(eager_lines):])}) failed: "
                                    f"{last}. The speed results are written; rerun without --loss-reference "
                                    "float32") from exc
    return {"lines": tries[-1][len(eager_lines):], "did_not_fit": f"{why}, also with {RECOMPUTE_LINE}"}


def check_loss_reference(value: str) -> str:
    """Refuse a ``--loss-reference`` other than :data:`LOSS_REFERENCES`."""
    if value not in LOSS_REFERENCES:
        raise InvalidOptionError(f"--loss-reference {value!r}: choose {' or '.join(LOSS_REFERENCES)} (float32 also "
                                 "trains eager in float32 once and accepts an arm as near float32 as eager is)")
    return value


def add_float32_gaps(rounds: Sequence[MutableMapping[str, dict[str, Any]]], losses: Sequence[float]) -> None:
    """Every arm's largest per-step absolute loss gap to the float32 run's ``losses``, in place, per round
    (``max_loss_gap_vs_float32``)."""
    for results in rounds:
        for r in results.values():
            if len(r["losses"]) != len(losses):
                raise ValueError(f"the float32 run has {len(losses)} steps and an arm {len(r['losses'])}")
            r["max_loss_gap_vs_float32"] = max(abs(a - b) for a, b in zip(r["losses"], losses, strict=True))


def float32_gaps(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float] | None:
    """Arm -> its largest loss gap to the float32 run (the worst round's), or ``None`` without one."""
    gaps = {arm: r.get("max_loss_gap_vs_float32") for arm, r in results.items()}
    return None if any(g is None for g in gaps.values()) else gaps
