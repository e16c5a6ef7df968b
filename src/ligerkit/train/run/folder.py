"""The run folder: everything a run leaves behind, in one place, and nothing lost on a re-run.

Every run writes under a folder of its own: by default a new one under ``runs/<config name>/``,
named by its start time; an explicit ``train.run.output_dir`` that already holds a run is refused unless
the run is resumed. Inside: ``config.yaml`` (the resolved config), ``environment.json`` (versions and
devices), ``liger.json`` (the kit's report and scan), ``metrics.jsonl`` (strict JSON, one line per
step, numbered from 1 like the log, appended and flushed as it goes), ``checkpoints/`` (each keeping the rows of its
steps, which a resume writes back: every step once), ``status.json`` (where the run ended: ``status.py``), and at
the end ``loss.png`` (titled with the run's name) and ``summary.json``. A full or read-only disk at any of these
writes is a ``StorageError`` (``storage.py``).
"""

from __future__ import annotations

import json
import logging
import math
import platform
import secrets
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from ligerkit.environment import installed_version
from ligerkit.errors import RunDirError
from ligerkit.train.run.checkpoint import complete, read_meta
from ligerkit.train.run.storage import storage_cause, storage_error, writing
from ligerkit.train.config.run_files import CONFIG_FILE, METRICS_FILE
from ligerkit.whole_files import write_whole

MARKERS = (CONFIG_FILE, METRICS_FILE, "checkpoints")


def holds_run(path: Path) -> bool:
    """Whether ``path`` already holds (part of) a run."""
    return any((path / marker).exists() for marker in MARKERS)


def new_run_dir(runs_dir: str, name: str) -> Path:
    """A fresh, unique folder ``runs_dir/name/<date>-<time>-<random>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        path = Path(runs_dir) / name / f"{stamp}-{secrets.token_hex(2)}"
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise RunDirError(f"could not create a new run folder under {Path(runs_dir) / name}")


def open_run_dir(output_dir: str | None, runs_dir: str, name: str, resume: str | None) -> Path:
    """The folder this run writes to (rank 0 decides; see :func:`ligerkit.train.distributed.agree`)."""
    if resume is not None:
        path = Path(resume)
        if not (path / CONFIG_FILE).is_file():
            raise RunDirError(f"--resume {resume!r} is not a run folder (no config.yaml); give the folder a run wrote")
        return path
    if output_dir is None:
        return new_run_dir(runs_dir, name)
    path = Path(output_dir)
    if path.is_dir() and holds_run(path):
        saved = bool(complete(path))
        go_on = f"continue it with `ligerkit train --resume {output_dir}`, or " if saved else ""
        raise RunDirError(f"train.run.output_dir {output_dir!r} already holds a run; {go_on}choose another folder (or "
                          "leave output_dir unset for a new one under train.run.runs_dir)"
                          + ("" if saved else "; it saved no checkpoint, so it cannot be resumed"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment() -> dict[str, Any]:
    """What the run ran on: versions, Python, devices."""
    devices = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
               if torch.cuda.is_available() else ["cpu"])
    return {"python": platform.python_version(), "platform": platform.platform(),
            "versions": {p: installed_version(p) for p in ("torch", "transformers", "liger-kernel", "ligerkit")},
            "devices": devices, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as ``None``: strict JSON, never ``NaN`` or ``Infinity``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> None:
    """Strict JSON (non-finite floats as null), written whole; a full or read-only disk is a ``StorageError``."""
    with writing(path.name, path.parent):
        path.write_text(json.dumps(finite(data), indent=2, allow_nan=False) + "\n")


WRITTEN_AT_START: tuple[str, ...] = (CONFIG_FILE, "environment.json", "liger.json", METRICS_FILE)
"""The files :func:`write_start` writes (``metrics.jsonl`` empty)."""


def write_start(path: Path, config: dict[str, Any], liger: dict[str, Any] | None) -> None:
    """``config.yaml``, ``environment.json``, ``liger.json`` and an empty ``metrics.jsonl`` of a new run
    (:data:`WRITTEN_AT_START`)."""
    config_file, environment_file, liger_file, metrics_file = WRITTEN_AT_START
    (path / config_file).write_text(yaml.safe_dump(config, sort_keys=False))
    write_json(path / environment_file, environment())
    write_json(path / liger_file, liger or {"enabled": False})
    (path / metrics_file).touch()


def saved_rows(checkpoint: Path) -> list[dict[str, Any]] | None:
    """The metrics rows a checkpoint keeps (steps 1 to its own: ``checkpoint.save``); ``None`` for one saved
    without them (an earlier release) or with rows that are not metrics rows."""
    rows = read_meta(checkpoint).get("metrics")
    ok = isinstance(rows, list) and all(isinstance(r, dict) and type(r.get("step")) is int for r in rows)
    return rows if ok else None


def keep_metrics_through(path: Path, done: int, saved: list[dict[str, Any]] | None = None) -> int:
    """Keep the rows of ``metrics.jsonl`` of steps 1 to ``done``, each step once (a resumed run writes the later
    ones again); return how many rows stay. ``saved`` are the rows the resumed checkpoint keeps
    (:func:`saved_rows`): they are the rows of their steps, whatever the file lost (a torn or cut line) or holds
    twice; the file fills the steps they lack. The file is rewritten whole or not at all (a temporary file, then
    a rename). Rows number the steps done, from 1, as the log and the checkpoints do; a folder written when they
    counted from 0 (it has a row of step 0) is renumbered here, so it resumes as one curve. A torn last line (a
    write cut short: no newline) is dropped with a warning, as the resumed run writes its step again; any other
    line that is not a row is a :class:`RunDirError`, unless the checkpoint's rows stand for it."""
    file = path / METRICS_FILE
    if not file.is_file() and saved is None:
        return 0
    whole, _, torn = file.read_bytes().rpartition(b"\n") if file.is_file() else (b"", b"", b"")
    if torn:
        logging.getLogger("ligerkit.train").warning(
            "%s: its last line is torn (%d bytes, no newline), dropped; %s", file, len(torn),
            "its step comes back from the checkpoint or is trained again" if saved is not None
            else "the resumed run writes that step again")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(whole.decode("utf-8", errors="replace").split("\n") if whole else [], 1):
        try:
            row = json.loads(line) if line.strip() else None
        except ValueError:
            row = {}
        if row is not None and not (isinstance(row, dict) and type(row.get("step")) is int):
            if saved is not None:
                logging.getLogger("ligerkit.train").warning("%s:%d is not a metrics row, dropped; its step comes "
                                                            "back from the checkpoint or is trained again", file, number)
                continue
            raise RunDirError(f"{file}:{number} is not a metrics row ({line[:80]!r}); delete or repair that line, "
                              "then resume again (rows from the resumed checkpoint on are rewritten anyway)")
        if row is not None:
            rows.append(row)
    if saved is None and any(row["step"] == 0 for row in rows):  # counted from 0: step i there is step i + 1 here
        rows = [{**row, "step": row["step"] + 1} for row in rows]
    by_step = {row["step"]: row for row in reversed(rows) if 1 <= row["step"] <= done}  # the first row of a step
    by_step.update({row["step"]: row for row in saved or [] if 1 <= row["step"] <= done})
    kept = [json.dumps(finite(by_step[n]), allow_nan=False) + "\n" for n in sorted(by_step)]
    missing = sorted(set(range(1, done + 1)) - set(by_step))
    if missing:  # only where the checkpoint keeps no rows (an earlier release saved it) and the file lost some
        logging.getLogger("ligerkit.train").warning(
            "%s lacks the rows of steps %s, and the checkpoint it resumes from keeps none to write them again",
            file, ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else ""))
    with writing(f"the kept rows of {METRICS_FILE}", path):
        write_whole(file, "".join(kept))
    return len(kept)


def metrics_rows(path: Path, through: int) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` of steps 1 to ``through`` (what a resumed run trained earlier)."""
    return [r for r in _all_rows(path) if isinstance(r, dict) and type(r.get("step")) is int and r["step"] <= through]


def _all_rows(path: Path) -> list[Any]:
    """Every line of ``metrics.jsonl`` that reads as JSON (a torn or damaged line is no row: left out)."""
    file = path / METRICS_FILE
    rows = []
    for line in file.read_text(errors="replace").splitlines() if file.is_file() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def plot_losses(path: Path, name: str | None = None, strict: bool = False) -> Path | None:
    """``loss.png`` from ``metrics.jsonl``, titled with the run's ``name`` and its folder (``None`` when there is
    nothing to plot, or it could not be drawn). A failure is a warning, never raised over the error that ended a
    run; with ``strict`` (the run ended well) a full, read-only or unwritable disk is a :class:`StorageError`."""
    try:
        return _plot(path, name)
    except Exception as exc:  # the plot is a convenience: any other failure of it is only reported
        if strict and storage_cause(exc) is not None:
            raise storage_error(storage_cause(exc), "the loss plot", path, trained_all=True) from exc
        logging.getLogger("ligerkit.train").warning("could not write %s (%s: %s); metrics.jsonl holds every step",
                                                    path / "loss.png", type(exc).__name__, exc)
        return None


def _plot(path: Path, name: str | None) -> Path | None:
    points = [(r["step"], r["loss"]) for r in _all_rows(path) if r.get("loss") is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*points, strict=True))
    ax.set(xlabel="step", ylabel="loss", title=f"{name}: loss per step\n{path.name}" if name else path.name)
    fig.tight_layout()
    fig.savefig(path / "loss.png", dpi=100)
    plt.close(fig)
    return path / "loss.png"
