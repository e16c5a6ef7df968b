"""Per-step metrics: a strict-JSON lines file, and progress (rank 0 only).

Progress is a rich bar when stderr is a terminal; anywhere else (a pipe, nohup, CI) it is a log line
every ``log_every`` steps through the ``ligerkit`` logger, so a plain log tells the story.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ligerkit.train.run_dir import finite

log = logging.getLogger("ligerkit.train")


@dataclass(frozen=True)
class StepMetrics:
    """What one optimizer step reports. ``step`` counts the steps done (from 1), as the log line, the
    checkpoint names and every message do: row ``step: 3`` of ``metrics.jsonl`` is the log's ``step 3/N``."""

    step: int
    loss: float
    grad_norm: float
    lr: float
    valid_tokens: int
    tokens_per_s: float
    tokens_per_s_per_device: float
    step_time_s: float
    peak_mem_gib: float | None
    mfu: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


    def line(self, total: int) -> str:
        """The step as one log line."""
        text = (f"step {self.step}/{total}: loss {self.loss:.4f}, grad norm {self.grad_norm:.3f}, "
                f"{self.tokens_per_s:,.0f} tokens/s")
        if self.mfu is not None:
            text += f", MFU {self.mfu:.1%}"
        if self.peak_mem_gib is not None:
            text += f", peak {self.peak_mem_gib:.1f} GiB"
        return text


class MetricsLog:
    """Appends one JSON line per step; shows progress when asked (a bar in a terminal, else log lines)."""

    def __init__(self, path: Path | None, total: int, progress: bool, title: str, log_every: int = 10,
                 done: int = 0):
        self.path = path
        self.total = total
        self.log_every = log_every
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._progress = None
        self._lines = progress and not sys.stderr.isatty()
        if progress and not self._lines:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
            )
            self._task = self._progress.add_task(title, total=total, completed=done, status="")
            self._progress.start()

    def log(self, metrics: StepMetrics) -> None:
        """Record a step."""
        if self.path is not None:  # appended and flushed per step: a crash loses at most the step in flight
            with self.path.open("a") as fh:
                fh.write(json.dumps(finite(metrics.to_dict()), allow_nan=False) + "\n")
                fh.flush()
        last = metrics.step == self.total
        if self._lines and (metrics.step == 1 or metrics.step % self.log_every == 0 or last):
            log.info(metrics.line(self.total))
        if self._progress is not None:
            status = f"loss {metrics.loss:.4f}  {metrics.tokens_per_s:,.0f} tok/s"  # finite: the guard runs first
            if metrics.mfu is not None:
                status += f"  MFU {metrics.mfu:.1%}"
            self._progress.update(self._task, advance=1, status=status)

    def close(self) -> None:
        """Stop the progress bar."""
        if self._progress is not None:
            self._progress.stop()
