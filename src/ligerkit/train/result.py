"""What a training run returns and summarizes: every step's metrics, the kit's report, honest speeds."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ligerkit.kit import LigerKernelReport, ScanResult
from ligerkit.train.metrics import StepMetrics


@dataclass
class TrainResult:
    """Every step this run trained (from ``first_step`` when resumed), the kit report, the scan, the folder."""

    steps: list[StepMetrics] = field(default_factory=list)
    report: LigerKernelReport | None = None
    scan: ScanResult | None = None
    run_dir: Path | None = None
    first_step: int = 0
    resume_seconds: float | None = None  # time to load the checkpoint this run resumed from

    def timed(self, warmup: int = 1) -> list[StepMetrics]:
        """The steps after the first ``warmup`` of this run (all of them when there are not more)."""
        return self.steps[warmup:] or self.steps

    @property
    def median_tokens_per_s(self) -> float:
        """Median tokens/s over the steps after the first (warm-up)."""
        timed = self.timed()
        return statistics.median(s.tokens_per_s for s in timed) if timed else 0.0

    def summary(self, warmup: int = 1) -> dict[str, Any]:
        """Losses and tokens/s as median with spread (min, quartiles, max) after ``warmup`` steps."""
        timed = [s.tokens_per_s for s in self.timed(warmup)]
        quartiles = statistics.quantiles(timed, n=4) if len(timed) > 1 else timed * 3
        return {
            "steps": len(self.steps), "first_step": self.first_step,
            "first_loss": self.steps[0].loss if self.steps else None,
            "last_loss": self.steps[-1].loss if self.steps else None,
            "tokens_per_s": {"median": statistics.median(timed) if timed else None, "min": min(timed, default=None),
                             "q1": quartiles[0] if timed else None, "q3": quartiles[-1] if timed else None,
                             "max": max(timed, default=None), "steps_timed": len(timed), "warmup": warmup},
            "peak_mem_gib": max((s.peak_mem_gib for s in self.steps if s.peak_mem_gib is not None), default=None),
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "resume_load_seconds": self.resume_seconds,
        }

    def summary_line(self, warmup: int = 1) -> str:
        """The summary in one line: losses, median tokens/s with its spread, where the files went."""
        s = self.summary(warmup)
        if not self.steps:
            return "trained no step"
        speed = s["tokens_per_s"]
        where = f"; run folder {s['run_dir']}" if s["run_dir"] else ""
        return (f"trained {s['steps']} steps (from step {self.first_step}): loss {s['first_loss']:.4f} -> "
                f"{s['last_loss']:.4f}, median {speed['median']:,.0f} tokens/s over {speed['steps_timed']} steps "
                f"(min {speed['min']:,.0f}, max {speed['max']:,.0f}){where}")
