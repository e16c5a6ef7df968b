"""Log lines emitted while the training progress bar is live print above it (a fake terminal, CPU).

The bar is drawn on a rich console that writes to a buffer as a terminal would; the buffer is then
replayed through a minimal terminal (carriage return, erase line, cursor up) to get the screen a
user would see: each log line on its own row, never glued to the bar's text.
"""

from __future__ import annotations

import io
import logging
import re

import pytest
from rich.console import Console

from ligerkit.train.metrics import LogAboveBar, MetricsLog, StepMetrics

CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen(raw: str) -> list[str]:
    """The rows a terminal shows after ``raw`` (text, \\n, \\r, erase line, cursor up; other codes ignored)."""
    rows, row, col, i = [""], 0, 0, 0
    while i < len(raw):
        match = CSI.match(raw, i)
        if match:
            args, code = match.groups()
            if code == "K":
                rows[row] = rows[row][:col] if args in ("", "0") else ""
            elif code == "A":
                row = max(0, row - int(args or 1))
            i = match.end()
            continue
        ch = raw[i]
        if ch == "\n":
            row, col = row + 1, 0
            rows.extend([""] * (row + 1 - len(rows)))
        elif ch == "\r":
            col = 0
        else:
            line = rows[row].ljust(col)
            rows[row] = line[:col] + ch + line[col + 1:]
            col += 1
        i += 1
    return [r.rstrip() for r in rows]


def step(n: int) -> StepMetrics:
    return StepMetrics(step=n, loss=5.0 - n, grad_norm=1.0, lr=1e-3, valid_tokens=64, tokens_per_s=1000.0,
                       tokens_per_s_per_device=1000.0, step_time_s=0.1, peak_mem_gib=None, mfu=None)


@pytest.fixture
def terminal():
    """A fake terminal (a console on a buffer), and a handler on the ``ligerkit`` logger writing to it,
    as ``ligerkit`` CLI's ``log_to_stderr`` sets one up on stderr."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120, color_system=None)
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger = logging.getLogger("ligerkit")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield console, buffer, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_log_line_emitted_while_the_bar_is_live_prints_on_its_own_row_above_the_bar(terminal):
    console, buffer, handler = terminal
    bar = MetricsLog(None, total=3, progress=True, title="my-run", console=console)
    bar.log(step(1))
    logging.getLogger("ligerkit.train").info("SIGINT: finishing step 2, then saving a checkpoint")
    bar.log(step(2))
    logging.getLogger("ligerkit.train").warning("second line")
    bar.close()
    rows = [r for r in screen(buffer.getvalue()) if r]
    assert "ligerkit.train: SIGINT: finishing step 2, then saving a checkpoint" in rows
    assert "ligerkit.train: second line" in rows
    assert rows.index("ligerkit.train: SIGINT: finishing step 2, then saving a checkpoint") < rows.index(
        "ligerkit.train: second line")
    bars = [r for r in rows if "my-run" in r]
    assert bars and "2/3" in bars[-1] and "ligerkit" not in bars[-1]  # the bar stays below, intact
    assert rows[-1] == bars[-1]
    assert handler.stream is buffer  # the handler has its own stream back


def test_the_handler_gets_its_stream_back_and_other_streams_are_left_alone(terminal):
    console, buffer, handler = terminal
    elsewhere = logging.StreamHandler(io.StringIO())  # a file-like stream that is not the bar's terminal
    logging.getLogger("ligerkit").addHandler(elsewhere)
    try:
        above = LogAboveBar(logging.getLogger("ligerkit.train"), console)
        assert above.rerouted == 1 and handler.stream is not buffer
        assert elsewhere.stream is not buffer and isinstance(elsewhere.stream, io.StringIO)
        handler.stream.write("partial line without its newline")
        above.restore()
        assert handler.stream is buffer and buffer.getvalue().endswith("partial line without its newline")
    finally:
        logging.getLogger("ligerkit").removeHandler(elsewhere)


def test_without_a_terminal_progress_is_log_lines_and_no_bar(terminal):
    _, buffer, handler = terminal
    plain = Console(file=io.StringIO(), force_terminal=False)
    bar = MetricsLog(None, total=2, progress=True, title="my-run", console=plain, log_every=1)
    bar.log(step(1))
    bar.close()
    assert bar._progress is None and handler.stream is buffer
    assert "ligerkit.train: step 1/2: loss 4.0000" in buffer.getvalue()
