"""Where a run ended, recorded in its folder, so that a resume continues only a run that did not finish.

``status.json`` is written whole or not at all (a temporary file beside it, then a rename). When the
training loop starts it says ``running`` (the start record, with the steps done and planned); when the
loop ends it says where: ``finished``, ``stopped`` (a signal, ``train.run.stop_after_steps``, a second
signal) or ``failed`` (an error, named), with the steps done. A process killed outright (``kill -9``, the
machine going down) leaves ``running``: no end record after the start record is a crash.

A resume of a finished run is refused before any file of it is touched, whatever its newest checkpoint
(a run of 1500 steps whose newest checkpoint is at step 259 is finished, not at step 259): the refusal
says how to extend it (``--set train.steps=N``, which continues from its newest intact checkpoint) or to
start a new run from its weights (``--init-from``). A folder written before ``status.json`` existed (or
whose end record was lost in a crash after its last step) is taken as finished only when its metrics say
so: the step of its last whole row reaches the steps the run planned.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ligerkit.errors import RunDirError, StoppedEarly
from ligerkit.train.config.run_files import METRICS_FILE, STATUS_FILE
from ligerkit.train.run.checkpoint import latest, step_of
from ligerkit.train.run.storage import writing
from ligerkit.whole_files import write_whole

RUNNING, FINISHED, STOPPED, FAILED = "running", "finished", "stopped", "failed"
STATES = (RUNNING, FINISHED, STOPPED, FAILED)
log = logging.getLogger("ligerkit.train")


def write(run: Path, state: str, step: int, steps: int, reason: str | None = None) -> None:
    """Record ``state`` after ``step`` of ``steps`` steps in ``run/status.json``, whole or not at all."""
    record = {"state": state, "step": step, "steps": steps, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if reason:
        record["reason"] = reason
    with writing(f"the run's status ({STATUS_FILE})", run):
        write_whole(run / STATUS_FILE, json.dumps(record) + "\n")


def read(run: Path) -> dict[str, Any] | None:
    """``run``'s status record, or ``None`` where it has none (an earlier release) or it cannot be read."""
    try:
        record = json.loads((run / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(record, dict) and record.get("state") in STATES
          and all(type(record.get(key)) is int for key in ("step", "steps")))
    return record if ok else None


def last_step(run: Path) -> int | None:
    """The step of the last whole row of ``run/metrics.jsonl`` (a torn last line, without its newline, is not
    one), or ``None`` when no row can be read."""
    try:
        whole, _, _torn = (run / METRICS_FILE).read_bytes().rpartition(b"\n")
    except OSError:
        return None
    for line in reversed(whole.split(b"\n")):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and type(row.get("step")) is int:
            return int(row["step"])
    return None


def finished_at(run: Path, planned: int | None) -> int | None:
    """The steps a finished ``run`` trained, or ``None`` when it did not finish. Its end record says so; without
    one that says ``finished``, its last metrics row must reach the steps planned (the record's, else
    ``planned``: the steps its recorded config names)."""
    record = read(run)
    if record is not None and record["state"] == FINISHED:
        return int(record["step"])
    target = record["steps"] if record is not None else planned
    last = last_step(run)
    return last if last is not None and type(target) is int and last >= target else None


def check_unfinished(run: Path, steps: int, planned: int | None) -> None:
    """Refuse (:class:`RunDirError`), before any file is touched, a resume of a finished ``run`` that would train
    ``steps`` steps: at most the ones it trained. More steps extend it (``train.steps`` may change on resume)."""
    done = finished_at(run, planned)
    if done is None or steps > done:
        return
    newest = latest(run)
    if newest is None:
        further = ("It saved no checkpoint (train.run.checkpoint_every was unset), so it can be neither extended "
                   "nor used by --init-from: start a new run (set train.run.checkpoint_every to be able to resume one)")
    else:
        at = step_of(newest) or 0
        steps_again = f"step {done}" if at + 1 == done else f"steps {at + 1}-{done}"
        again = f", training {steps_again} again (their metrics rows written anew)" if at < done else ""
        further = (f"To train it further, resume with --set train.steps=N for some N > {done}: that continues from its "
                   f"newest intact checkpoint (the newest there is {newest.name}){again}. Or start a new run from "
                   f"its weights: ligerkit train CONFIG --init-from {run}")
    record = read(run)
    when = f" ({record['at']})" if record is not None and record["state"] == FINISHED and record.get("at") else ""
    raise RunDirError(f"{run} finished{when}: it has trained all {done} of its steps, and a resume continues only a "
                      f"run that did not finish; nothing was changed. {further}")


@contextmanager
def recorded(run: Path | None, start: int, steps: int, done: Callable[[], int]) -> Iterator[None]:
    """``running`` (``start`` steps done) for the block, then where it ended, with ``done()`` steps: ``finished``,
    ``stopped`` (:class:`StoppedEarly`, an interrupt) or ``failed`` (any other exception, named). Where the block
    raised, a status that cannot be written is a warning, never raised over the block's own exception.
    ``run=None`` (any rank but the first) records nothing."""
    if run is None:
        yield
        return
    write(run, RUNNING, start, steps)
    try:
        yield
    except BaseException as exc:
        state = STOPPED if isinstance(exc, (StoppedEarly, KeyboardInterrupt)) else FAILED
        try:
            write(run, state, done(), steps, f"{type(exc).__name__}: {exc}"[:500])
        except Exception as again:  # noqa: BLE001 (the block's exception is the one to raise)
            log.warning("could not record where the run ended (%s); the run's own error follows", again)
        raise
    write(run, FINISHED, done(), steps)
