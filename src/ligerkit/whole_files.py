"""How ligerkit writes a file whole or not at all: the text goes to a hidden file beside it, then a rename.

A reader of ``path`` sees the old content or the new, never a piece: a run's ``run.json``, ``status.json``
and kept metrics rows, a bench's log, the context sweep's summary and kept checks, the caches. The file
beside is named after ``path`` and this process (``.NAME.PID.tmp``), so processes writing the same file
at once (two test workers filling one cache) never write into each other's; whatever stops the write
(a full disk, an interrupt) removes it and leaves ``path`` as it was, then passes on.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all; with ``durable``, on disk (fsync) before the rename.

    Raises what the write raised (``OSError`` for a full or read-only disk), with ``path`` untouched and
    nothing left beside it."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if durable:
            with partial.open("w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        else:
            partial.write_text(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
