"""How a run stops early: on a signal, after a set number of steps, or on a non-finite number.

SIGINT and SIGTERM ask the trainer to finish the current step, save a checkpoint and exit non-zero;
a second signal stops at once: it raises ``KeyboardInterrupt`` wherever the program is, and records
itself (:func:`forced_stop`), because code it interrupts may wrap that interrupt in an error of its own
(torch's distributed checkpoint turns it into a ``CheckpointException``); the command line exits 130
(143 for SIGTERM) either way, never with a traceback. ``train.run.stop_after_steps`` stops the same way after that many steps of
this run (a time-boxed job). A non-finite loss or gradient norm stops the run without updating the
weights (``ligerkit.train.update``: skipped on the device by a fused optimizer, or refused before it).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from ligerkit.errors import NonFiniteError, TrainingStopped  # noqa: F401 (re-exported)

log = logging.getLogger("ligerkit.train")
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
STOPPED_AFTER_STEPS = 75  # EX_TEMPFAIL: stopped on purpose, resumable


_forced: list[int] = []  # the signal that stopped the last run at once (a second signal), if any


def forced_stop() -> int | None:
    """The signal that stopped the current (or last) run at once, or ``None``."""
    return _forced[-1] if _forced else None


def exit_code_of(signum: int) -> int:
    """The exit code of a run stopped by ``signum`` (130 SIGINT, 143 SIGTERM, else 128 + signum)."""
    return EXIT_CODES.get(signum, 128 + int(signum))


class StopRequest:
    """Set by the first SIGINT/SIGTERM; read by the trainer after each step."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None


@contextmanager
def graceful_signals() -> Iterator[StopRequest]:
    """SIGINT/SIGTERM handlers for the block: the first asks for a stop after the current step, a second
    stops at once. Outside the main thread (no signals there) the request simply never comes."""
    request = StopRequest()
    _forced.clear()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if request:
            signal.signal(signum, signal.SIG_DFL)  # a third signal ends the process the system's way
            _forced.append(signum)
            raise KeyboardInterrupt(f"signal {signum} again: stopping at once")
        request.signal = signum
        log.warning("%s: finishing this step, then saving a checkpoint (send it again to stop at once)",
                    signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in EXIT_CODES}
    try:
        yield request
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
