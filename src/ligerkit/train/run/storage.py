"""A write that fails for want of room or permission ends in a :class:`StorageError` saying what to do.

A full disk (``ENOSPC``, or ``EDQUOT``: a quota used up), a read-only file system (``EROFS``) or a folder
this user may not write (``EACCES``, ``EPERM``) can meet any write of a run: a checkpoint (where torch's
distributed checkpoint wraps the ``OSError`` in a ``CheckpointException`` of its own), a metrics row, the
plot, the summary. :func:`writing` turns such a failure, wherever in its block it is raised and however it
is wrapped (:func:`storage_cause`), into one :class:`StorageError` naming what was being written, the
folder, what to free or where to write instead, and how to continue the run; ``__cause__`` keeps the
``OSError``. Any other exception passes through unchanged.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ligerkit.errors import StorageError
from ligerkit.train.config.run_files import CHECKPOINT_NAME, CHECKPOINTS_FOLDER, METRICS_FILE

NO_ROOM = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up"}
READ_ONLY = {errno.EROFS: "the file system is read-only"}
NO_ACCESS = {errno.EACCES: "this user may not write there", errno.EPERM: "this user may not write there"}
STORAGE_ERRNOS = {**NO_ROOM, **READ_ONLY, **NO_ACCESS}
"""The ``errno`` values a :class:`StorageError` stands for, each with its cause in words."""


def storage_cause(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` of a full, read-only or unwritable disk in ``exc``: ``exc`` itself, what it was raised
    from or during, or (torch's ``CheckpointException``) one rank's failure it carries; ``None`` if none."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS:
            return current
        failures = getattr(current, "failures", None)  # CheckpointException: {rank: exception or (exception, tb)}
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) and f else f for f in failures.values()
                     if isinstance(f, (BaseException, tuple))]
        todo += [current.__cause__, current.__context__]
    return None


def _free(path: Path) -> str:
    """The free space of the file system holding ``path`` (or its nearest existing parent), in words."""
    existing = next((p for p in (path, *path.absolute().parents) if p.exists()), Path("/"))
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return "free space unknown"
    size, unit = float(free), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{size:.0f} {unit} free there" if unit == "bytes" else f"{size:.1f} {unit} free there"


def _has_checkpoint(run: Path) -> bool:
    folder = run / CHECKPOINTS_FOLDER
    return folder.is_dir() and any(p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name) for p in folder.iterdir())


def storage_error(cause: OSError, what: str, run: Path | None = None, trained_all: bool = False) -> StorageError:
    """The :class:`StorageError` for ``cause`` met while writing ``what`` (in the run folder ``run``; with
    ``trained_all``, after its last step). How to go on depends on what the folder holds: a complete
    checkpoint to resume from, none (the run starts again), or every step already trained."""
    where = Path(cause.filename) if getattr(cause, "filename", None) else run
    at = f" ({where})" if where is not None else ""
    if run is None:
        again = "; then continue a run from its newest complete checkpoint with `ligerkit train --resume RUN_DIR`"
    elif trained_all:
        again = f"; every step trained and is in {run / METRICS_FILE}: there is nothing to resume"
    elif _has_checkpoint(run):
        again = (f"; then continue the run with `ligerkit train --resume {run}` (or copy {run} to a disk that can "
                 "take it and resume the copy: a run folder resumes from wherever it is)")
    else:
        again = (f"; {run} holds no complete checkpoint to resume from, so start the run again (with "
                 "train.run.checkpoint_every set, a later failure can be resumed)")
    elsewhere = ("write elsewhere: a new run with --set train.run.runs_dir=DIR or train.run.output_dir=DIR (or "
                 "$LIGERKIT_RUNS_DIR)")
    if cause.errno in NO_ROOM:
        free = _free(where) if where is not None else "free space unknown"
        fix = (f"free space on that disk ({free}: older run folders or checkpoints, a lower "
               f"train.run.keep_checkpoints), or {elsewhere}")
    elif cause.errno in READ_ONLY:
        fix = f"{elsewhere} on a writable disk"
    else:
        fix = f"make the folder writable for this user (chmod u+w), or {elsewhere}"
    return StorageError(f"could not write {what}{at}: {STORAGE_ERRNOS[cause.errno]} ({cause.strerror or cause}). "
                        f"To go on, {fix}{again}")


@contextmanager
def writing(what: str, run: Path | Callable[[], Path | None] | None = None) -> Iterator[None]:
    """Run the block; a full, read-only or unwritable disk met inside it raises :class:`StorageError` (from the
    ``OSError``) naming ``what`` was being written. ``run`` is the run folder (or a callable giving it)."""
    try:
        yield
    except StorageError:
        raise
    except BaseException as exc:  # torch's CheckpointException is a BaseException
        cause = storage_cause(exc)
        if cause is None:
            raise
        raise storage_error(cause, what, run() if callable(run) else run) from cause
