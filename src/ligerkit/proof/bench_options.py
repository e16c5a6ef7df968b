"""What a bench runs and how it judges, checked once: :class:`BenchOptions`, made by the command line and
by a caller of :func:`ligerkit.proof.bench.bench` alike (``ligerkit scaling`` checks its counts with
:func:`check_run_options` too)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ligerkit.errors import InvalidOptionError, LigerKitError
from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof.loss_reference import check_loss_reference
from ligerkit.train.config.arms import ARMS

__all__ = ["DEFAULT_LOSS_TOLERANCE", "BenchOptions", "check_loss_tolerance", "check_run_options", "parse_arms"]

DEFAULT_LOSS_TOLERANCE = 1e-2
"""The largest per-step absolute loss gap to eager an arm may have to be recommended (``--loss-tolerance``)."""


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


def check_run_options(steps: int, warmup: int, nproc: int, repeats: int = 1) -> None:
    """Refuse step, warm-up, process and repeat counts that cannot give a measurement."""
    if steps < 1 or nproc < 1 or warmup < 0:
        raise LigerKitError(f"--steps ({steps}) and --nproc ({nproc}) must be at least 1, --warmup ({warmup}) at least 0")
    if repeats < 1:
        raise LigerKitError(f"--repeats ({repeats}) must be at least 1 (3 gives a median of three runs per arm)")
    if warmup >= steps:
        raise LigerKitError(f"--warmup {warmup} must be smaller than --steps {steps}")


def check_loss_tolerance(value: float) -> float:
    """Refuse a ``--loss-tolerance`` that is negative, infinite or NaN."""
    if not (math.isfinite(value) and value >= 0):
        raise InvalidOptionError(f"--loss-tolerance {value}: give a finite number >= 0 (default "
                                 f"{DEFAULT_LOSS_TOLERANCE:g}, an absolute per-step loss gap against eager)")
    return value


@dataclass(frozen=True)
class BenchOptions:
    """A bench's arms (eager first: :func:`parse_arms`), steps, warm-up steps left out of the medians,
    rounds, processes per arm, the loss rule (``loss_tolerance`` against ``loss_reference``: ``eager`` or
    ``float32``), the gradient rule and the lines its pass adds; every value is checked when made."""

    arms: tuple[str, ...]
    steps: int = 12
    warmup: int = 4
    repeats: int = 1
    nproc: int = 1
    loss_tolerance: float = DEFAULT_LOSS_TOLERANCE
    loss_reference: str = "eager"
    grad_tolerance: GradTolerance = field(default_factory=GradTolerance)
    grad_overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "arms", tuple(self.arms))
        object.__setattr__(self, "grad_overrides", tuple(self.grad_overrides))
        check_run_options(self.steps, self.warmup, self.nproc, self.repeats)
        check_loss_tolerance(self.loss_tolerance)
        check_loss_reference(self.loss_reference)
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise LigerKitError(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
        if "eager" not in self.arms:
            raise LigerKitError(f"the bench's arms {list(self.arms)} lack eager, which every ratio is against "
                                "(parse_arms adds it)")
