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

    def summary(self, warmup: int = 1, earlier: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The whole run: losses, and tokens/s as median with spread (min, quartiles, max) leaving out the
        first ``warmup`` steps of each process. ``earlier`` are the ``metrics.jsonl`` rows of the steps
        trained before this process resumed the run (``first_step`` of them)."""
        earlier = earlier or []
        timed = [r["tokens_per_s"] for r in earlier[warmup:] if isinstance(r.get("tokens_per_s"), (int, float))]
        timed += [s.tokens_per_s for s in self.timed(warmup)]
        losses = [r.get("loss") for r in earlier] + [s.loss for s in self.steps]
        mems = [r.get("peak_mem_gib") for r in earlier] + [s.peak_mem_gib for s in self.steps]
        quartiles = statistics.quantiles(timed, n=4) if len(timed) > 1 else timed * 3
        return {
            "steps": len(losses), "first_step": self.first_step, "steps_this_process": len(self.steps),
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "tokens_per_s": {"median": statistics.median(timed) if timed else None, "min": min(timed, default=None),
                             "q1": quartiles[0] if timed else None, "q3": quartiles[-1] if timed else None,
                             "max": max(timed, default=None), "steps_timed": len(timed), "warmup": warmup},
            "peak_mem_gib": max((m for m in mems if isinstance(m, (int, float))), default=None),
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
        span = (f"{len(self.steps)} steps (steps {self.first_step + 1}-{self.first_step + len(self.steps)} of the run)"
                if self.first_step else f"{len(self.steps)} steps")
        return (f"trained {span}: loss {self.steps[0].loss:.4f} -> "
                f"{self.steps[-1].loss:.4f}, median {speed['median']:,.0f} tokens/s over {speed['steps_timed']} steps "
                f"(min {speed['min']:,.0f}, max {speed['max']:,.0f}){where}")
