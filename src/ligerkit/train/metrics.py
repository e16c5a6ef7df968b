"""Per-step metrics: a strict-JSON lines file, and progress (rank 0 only).

Progress is a rich bar on stderr when stderr is a terminal; anywhere else (a pipe, nohup, CI) it is a
log line every ``log_every`` steps through the ``ligerkit`` logger, so a plain log tells the story.
While the bar is live, log handlers that write to its terminal print through the bar's console:
each log line appears above the bar, never glued to it (``0:00:11 14:37:50 ...`` on one line).
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

from ligerkit.train.run.folder import finite
from ligerkit.train.run.storage import writing

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
                 done: int = 0, console: Console | None = None):
        """``console`` is where the bar is drawn (default: stderr; the bar only when it is a terminal)."""
        self.path = path
        self.total = total
        self.log_every = log_every
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._progress = None
        self._above: LogAboveBar | None = None
        terminal = console.is_terminal if console is not None else sys.stderr.isatty()
        self._lines = progress and not terminal
        if progress and not self._lines:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            console = console or Console(stderr=True)
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console,
                redirect_stdout=_isatty(sys.stdout),  # a piped stdout (--json > file) stays where it is
            )
            self._task = self._progress.add_task(title, total=total, completed=done, status="")
            self._progress.start()
            self._above = LogAboveBar(log, console)

    def log(self, metrics: StepMetrics) -> None:
        """Record a step."""
        if self.path is not None:  # appended and flushed per step: a crash loses at most the step in flight
            with writing(f"the metrics row of step {metrics.step}", self.path.parent), self.path.open("a") as fh:
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
        """Stop the progress bar and give the log handlers their streams back."""
        if self._above is not None:
            self._above.restore()
            self._above = None
        if self._progress is not None:
            self._progress.stop()


class LogAboveBar:
    """While a progress bar is live, the log handlers of ``logger`` (and of the loggers it propagates
    to) that write to the bar's terminal write through the bar's console, which prints each line
    above the bar. :meth:`restore` gives them their streams back."""

    def __init__(self, logger: logging.Logger, console: Console):
        self._swapped: list[tuple[logging.StreamHandler, IO[str], _ConsoleLines]] = []
        for handler in _handlers(logger):
            stream = getattr(handler, "stream", None)
            if (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
                    and stream is not None and _same_terminal(stream, console.file)):
                proxy = _ConsoleLines(console, stream)
                handler.setStream(proxy)
                self._swapped.append((handler, stream, proxy))

    @property
    def rerouted(self) -> int:
        """How many handlers write through the bar's console now."""
        return len(self._swapped)

    def restore(self) -> None:
        """Give every rerouted handler its own stream back (a partial line is written there)."""
        for handler, stream, proxy in reversed(self._swapped):
            if handler.stream is proxy:
                handler.setStream(stream)
            proxy.release()
        self._swapped.clear()


class _ConsoleLines(io.TextIOBase):
    """A text stream that prints each complete line through a rich console (above its live display)."""

    def __init__(self, console: Console, original: IO[str]):
        self._console = console
        self._original = original
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        from rich.text import Text

        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:  # soft_wrap: the terminal wraps a long line, no newline is inserted in it
            self._console.print(Text.from_ansi(line), soft_wrap=True, highlight=False)
        return len(text)

    def isatty(self) -> bool:
        return _isatty(self._original)

    def release(self) -> None:
        """Write a line left without its newline to the original stream."""
        if self._partial:
            self._original.write(self._partial)
            self._partial = ""
        self._original.flush()


def _handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers a record of ``logger`` reaches, in order."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    return found


def _same_terminal(stream: IO[str], file: IO[str]) -> bool:
    """``stream`` is ``file``, or both write to one terminal (stdout and stderr of one tty, say)."""
    if stream is file:
        return True
    try:
        return (stream.isatty() and file.isatty()
                and os.path.samestat(os.fstat(stream.fileno()), os.fstat(file.fileno())))
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False
