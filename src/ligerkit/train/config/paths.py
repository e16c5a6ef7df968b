"""Names and paths a config or the command line gives: checked before anything touches the disk.

A run name becomes one folder under ``train.run.runs_dir``, so it must be one plain path component: no
separator, not ``.`` or ``..`` (which would put the run beside or above ``runs_dir``), no NUL or other
control character, and short enough for the filesystem (255 bytes a component). A folder or file path
must be non-empty, hold no NUL, and fit the operating system's limits (4096 bytes in all, 255 a
component): beyond them ``open`` and ``mkdir`` fail with raw ``OSError``s far from the key that caused
them. Each check raises ``ValueError`` naming the problem and the fix (the schema turns it into a
:class:`~ligerkit.train.config.ConfigError` at the key).
"""

from __future__ import annotations

import os

COMPONENT_MAX = 255  # bytes of one path component (NAME_MAX on Linux and macOS)
PATH_MAX = 4096  # bytes of a whole path (Linux's PATH_MAX)
# a run's own files below its folder: <runs_dir>/<name>/<stamp>/checkpoints/step_<n>/<file>
RUN_FILES_ROOM = 200


def _controls(value: str) -> list[str]:
    return sorted({repr(c) for c in value if ord(c) < 32 or ord(c) == 127})


def check_name(value: str, key: str = "name") -> str:
    """A run name: one plain folder name (``qwen3-cpu``); ``ValueError`` naming what to change."""
    if not value.strip():
        raise ValueError(f"{key} is empty; give the run a name such as my-run (it names its folder under "
                         "train.run.runs_dir)")
    if value in (".", ".."):
        raise ValueError(f"{key} {value!r} is not a folder name (it would put the run folder outside "
                         "train.run.runs_dir); give a name such as my-run")
    separators = [s for s in ("/", "\\", os.sep, os.altsep) if s and s in value]
    if separators:
        raise ValueError(f"{key} {value!r} holds {separators[0]!r}; a run name is one folder name: use '-' or '_' "
                         "instead (set train.run.runs_dir or train.run.output_dir to choose where runs go)")
    controls = _controls(value)
    if controls:
        raise ValueError(f"{key} holds the control character(s) {', '.join(controls)}; remove them")
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > COMPONENT_MAX:
        raise ValueError(f"{key} is {size} bytes long; a folder name may have at most {COMPONENT_MAX}: "
                         "shorten it")
    return value


def check_path(value: str, key: str, room: int = 0) -> str:
    """A file or folder path: non-empty, no NUL, within the OS's length limits (``room``: bytes kept
    free for what goes below it); ``ValueError`` naming what to change."""
    if not value.strip():
        raise ValueError(f"{key} is empty; give a path (or leave {key} out for its default)")
    if "\x00" in value:
        raise ValueError(f"{key} holds a NUL character, which no path may hold; remove it")
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size + room > PATH_MAX:
        limit = PATH_MAX - room
        raise ValueError(f"{key} is {size} bytes long; paths here may have at most {limit}"
                         f"{' (the run keeps room for its own files below it)' if room else ''}: choose a "
                         "shorter one")
    longest = max(value.replace("\\", "/").split("/"), key=len)
    if len(longest.encode("utf-8", errors="surrogatepass")) > COMPONENT_MAX:
        raise ValueError(f"{key} has a folder or file name of {len(longest)} characters ({longest[:20]}...); "
                         f"each part of a path may have at most {COMPONENT_MAX} bytes: shorten it")
    return value


def check_run_folder(value: str, key: str) -> str:
    """``train.run.output_dir`` / ``train.run.runs_dir``: a path with room for the run's own files below it."""
    return check_path(value, key, RUN_FILES_ROOM)
