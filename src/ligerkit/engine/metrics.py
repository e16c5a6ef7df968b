"""Per-step metrics: a JSONL file and a rich progress bar (rank 0 only)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepMetrics:
    """What one optimizer step reports."""

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


class MetricsLog:
    """Appends one JSON line per step; shows a progress bar when asked."""

    def __init__(self, path: Path | None, total: int, progress: bool, title: str):
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        self._progress = None
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
            )
            self._task = self._progress.add_task(title, total=total, status="")
            self._progress.start()

    def log(self, metrics: StepMetrics) -> None:
        """Record a step."""
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(metrics.to_dict()) + "\n")
        if self._progress is not None:
            status = f"loss {metrics.loss:.4f}  {metrics.tokens_per_s:,.0f} tok/s"
            if metrics.mfu is not None:
                status += f"  MFU {metrics.mfu:.1%}"
            self._progress.update(self._task, advance=1, status=status)

    def close(self) -> None:
        """Stop the progress bar."""
        if self._progress is not None:
            self._progress.stop()
