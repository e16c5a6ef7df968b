"""The run folder: everything a run leaves behind, in one place, and nothing lost on a re-run.

Every run writes under a folder of its own: by default a new one under ``runs/<config name>/``,
named by its start time; an explicit ``train.output_dir`` that already holds a run is refused unless
the run is resumed. Inside: ``config.yaml`` (the resolved config), ``environment.json`` (versions and
devices), ``liger.json`` (the kit's report and scan), ``metrics.jsonl`` (strict JSON, one line per
step, numbered from 1 like the log, appended and flushed as it goes), ``checkpoints/``, and at the end ``loss.png`` and
``summary.json``.
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
from ligerkit.train.run.checkpoint import complete
from ligerkit.train.config.run_files import CONFIG_FILE, METRICS_FILE

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
        raise RunDirError(f"train.output_dir {output_dir!r} already holds a run; {go_on}choose another folder (or "
                          "leave output_dir unset for a new one under train.runs_dir)"
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
    """Strict JSON (non-finite floats as null), written whole."""
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


def keep_metrics_through(path: Path, done: int) -> int:
    """Keep the rows of ``metrics.jsonl`` of steps 1 to ``done`` (a resumed run writes the later ones again);
    return how many rows stay. Rows number the steps done, from 1, as the log and the checkpoints do; a folder
    written when they counted from 0 (it has a row of step 0) is renumbered here, so it resumes as one curve.
    A torn last line (a write cut short: no newline) is dropped with a warning, as the resumed run writes its
    step again; any other line that is not a row is a :class:`RunDirError`."""
    file = path / METRICS_FILE
    if not file.is_file():
        return 0
    whole, _, torn = file.read_bytes().rpartition(b"\n")
    if torn:
        logging.getLogger("ligerkit.train").warning(
            "%s: its last line is torn (%d bytes, no newline), dropped; the resumed run writes that step again",
            file, len(torn))
    rows: list[tuple[str, dict[str, Any]]] = []
    for number, line in enumerate(whole.decode("utf-8", errors="replace").split("\n") if whole else [], 1):
        try:
            row = json.loads(line) if line.strip() else None
        except ValueError:
            row = {}
        if row is not None and not (isinstance(row, dict) and type(row.get("step")) is int):
            raise RunDirError(f"{file}:{number} is not a metrics row ({line[:80]!r}); delete or repair that line, "
                              "then resume again (rows from the resumed checkpoint on are rewritten anyway)")
        if row is not None:
            rows.append((line, row))
    if any(row["step"] == 0 for _, row in rows):  # counted from 0: step i there is step i + 1 here
        rows = [(json.dumps({**row, "step": row["step"] + 1}), {**row, "step": row["step"] + 1}) for _, row in rows]
    kept = [line for line, row in rows if row["step"] <= done]
    file.write_text("".join(line + "\n" for line in kept))
    return len(kept)


def metrics_rows(path: Path, through: int) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` of steps 1 to ``through`` (what a resumed run trained earlier)."""
    return [r for r in _all_rows(path) if isinstance(r, dict) and type(r.get("step")) is int and r["step"] <= through]


def _all_rows(path: Path) -> list[Any]:
    file = path / METRICS_FILE
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()] if file.is_file() else []


def plot_losses(path: Path) -> Path | None:
    """``loss.png`` from ``metrics.jsonl`` (``None`` when there is nothing to plot, or it could not be
    drawn: a full or read-only disk is a warning here, never raised over the error that ended a run)."""
    try:
        return _plot(path)
    except Exception as exc:  # noqa: BLE001 (the plot is a convenience: any failure of it is only reported)
        logging.getLogger("ligerkit.train").warning("could not write %s (%s: %s); metrics.jsonl holds every step",
                                                    path / "loss.png", type(exc).__name__, exc)
        return None


def _plot(path: Path) -> Path | None:
    points = [(r["step"], r["loss"]) for r in _all_rows(path) if r.get("loss") is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*points, strict=True))
    ax.set(xlabel="step", ylabel="loss", title=path.name)
    fig.tight_layout()
    fig.savefig(path / "loss.png", dpi=100)
    plt.close(fig)
    return path / "loss.png"
