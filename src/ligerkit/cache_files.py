"""ligerkit's cache folder and how a cache file is written: one place for both caches that use them.

The families view (``ligerkit.cli.families_view``) and the checks' verdicts
(``ligerkit.probe.verdict_cache``) keep JSON under ``$LIGERKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/ligerkit``, else ``~/.cache/ligerkit``. A cache file is written whole or not at
all (:func:`ligerkit.whole_files.write_whole`); a folder that cannot be written is not an error,
since a cache only saves the work of computing again. A folder of many entries is kept to a size by
removing the least recently used ones (:func:`prune`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ligerkit.whole_files import write_whole

CACHE_ENV = "LIGERKIT_CACHE_DIR"


def cache_root() -> Path:
    """``$LIGERKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/ligerkit``, else ``~/.cache/ligerkit``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ligerkit"


def write_json_atomically(path: Path, data: Any) -> bool:
    """Write ``data`` as JSON to ``path`` whole or not at all; ``False`` when the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(data))
        return True
    except OSError:
        return False


def prune(folder: Path, keep: int, pattern: str = "*.json") -> int:
    """Remove the least recently used files of ``folder`` matching ``pattern`` beyond the ``keep`` most
    recent (by modification time: readers touch what they use); returns how many were removed. A file
    that cannot be read or removed is left, since a cache is only saved work."""
    try:
        entries = []
        for path in folder.glob(pattern):
            try:
                entries.append((path.stat().st_mtime, path))
            except OSError:
                continue
    except OSError:
        return 0
    removed = 0
    for _, path in sorted(entries, reverse=True)[keep:]:
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed


def touch(path: Path) -> None:
    """Mark ``path`` as just used (its modification time), so :func:`prune` keeps it longest."""
    try:
        os.utime(path)
    except OSError:
        pass
