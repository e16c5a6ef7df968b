"""A disk that is full, read-only or not writable ends a run in a StorageError saying what to free or where to
write (never a traceback from torch/serialization.py), with nothing half-written left as the newest checkpoint."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.errors import LigerKitError, NonFiniteError, StorageError
from ligerkit.train import Trainer, load_engine
from ligerkit.train.run import checkpoint
from ligerkit.train.run.storage import STORAGE_ERRNOS, storage_cause, storage_error, writing

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.run.progress=false", "train.global_batch_size=4",
        "train.micro_batch_size=2", "train.steps=4", "train.run.checkpoint_every=2"]


def train(*sets: str):
    return Trainer(load_engine(QWEN3_CPU, [*SETS, *sets])).train(torch.device("cpu"))


@pytest.fixture
def full_at_second_save(monkeypatch, tmp_path):
    """torch.save's writer, which torch's distributed checkpoint writes a checkpoint's state with, raising
    ENOSPC while the checkpoint after step 4 is written (the one after step 2 fits)."""
    from torch import serialization

    real = serialization._save

    def full(*args, **kwargs):
        if list(tmp_path.glob("*/checkpoints/step_0000004.partial")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(serialization, "_save", full)


def test_disk_full_at_a_checkpoint_is_a_storage_error_and_no_half_checkpoint_stays(tmp_path, full_at_second_save):
    run = tmp_path / "run"
    with pytest.raises(StorageError) as full:
        train(f"train.run.output_dir={run}")
    message = str(full.value)
    assert "the checkpoint after step 4" in message and "the disk is full" in message
    assert "free space on that disk" in message and "train.run.keep_checkpoints" in message
    assert f"--resume {run}" in message and "train.run.runs_dir" in message  # what to free, where to write
    assert isinstance(full.value.__cause__, OSError) and full.value.__cause__.errno == errno.ENOSPC
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_0000002"]  # the partial one removed
    assert checkpoint.latest(run).name == "step_0000002"
    assert json.loads((run / "status.json").read_text())["state"] == "failed"


def test_a_run_with_no_complete_checkpoint_is_not_sent_to_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cause = OSError(errno.ENOSPC, "No space left on device", str(run / "metrics.jsonl"))
    message = str(storage_error(cause, "the metrics row of step 1", run))
    assert "holds no complete checkpoint to resume from, so start the run again" in message
    assert "--resume" not in message
    (run / "checkpoints" / "step_0000002").mkdir(parents=True)
    assert f"--resume {run}" in str(storage_error(cause, "the metrics row of step 3", run))


def test_the_command_line_prints_it_without_a_traceback(tmp_path, full_at_second_save, monkeypatch):
    import logging

    monkeypatch.setattr(logging.getLogger("ligerkit"), "handlers", [])  # none left on an earlier runner's stderr
    args = ["train", str(QWEN3_CPU)] + [x for s in [*SETS, f"train.run.output_dir={tmp_path / 'run'}"]
                                         for x in ("--set", s)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "StorageError" in result.stderr and "the disk is full" in result.stderr
    assert "Traceback" not in result.output and "serialization.py" not in result.output


def test_a_read_only_disk_at_a_metrics_row_says_where_to_write(tmp_path, monkeypatch):
    real_open = Path.open

    def read_only(self, mode="r", *args, **kwargs):
        if self.name == "metrics.jsonl" and mode == "a":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only)
    with pytest.raises(StorageError, match=r"the metrics row of step 1 \(.*metrics\.jsonl\): the file system is "
                                           r"read-only.*train\.run\.runs_dir=DIR.*on a writable disk"):
        train(f"train.run.output_dir={tmp_path / 'run'}")


def test_the_plot_of_a_run_that_ended_well_is_a_storage_error_and_never_hides_another_error(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "loss.png")

    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(StorageError, match=r"the loss plot \(loss\.png\).*every step trained and is in .*"
                                           r"metrics\.jsonl: there is nothing to resume$"):
        train(f"train.run.output_dir={tmp_path / 'ok'}")
    assert len((tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()) == 4
    with pytest.raises(NonFiniteError):  # the run's own error, not the plot's
        train(f"train.run.output_dir={tmp_path / 'nan'}", "model.config.initializer_range=1.0e+30")


@pytest.mark.parametrize("code", sorted(STORAGE_ERRNOS))
def test_every_storage_errno_is_mapped_with_what_to_do(code, tmp_path):
    cause = OSError(code, "x", str(tmp_path / "f"))
    with pytest.raises(StorageError) as caught, writing("the thing", tmp_path):
        raise RuntimeError("wrapped") from cause
    message = str(caught.value)
    assert message.startswith(f"could not write the thing ({tmp_path / 'f'}): ") and "To go on, " in message
    assert ("free space" if code in (errno.ENOSPC, errno.EDQUOT) else "write elsewhere") in message
    assert caught.value.__cause__ is cause and isinstance(caught.value, LigerKitError)


def test_other_errors_pass_through_and_a_wrapped_cause_is_found():
    with pytest.raises(ValueError), writing("x"):
        raise ValueError("not a disk")
    with pytest.raises(OSError), writing("x"):
        raise OSError(errno.ENOENT, "missing")
    inner = OSError(errno.ENOSPC, "full")

    class Wrapping(BaseException):  # as torch's CheckpointException carries each rank's failure
        failures: ClassVar[dict] = {0: (inner, None)}

    assert storage_cause(Wrapping()) is inner and storage_cause(KeyboardInterrupt()) is None
    assert "the disk is full" in str(storage_error(inner, "y")) and "--resume RUN_DIR" in str(storage_error(inner, "y"))


@pytest.mark.parametrize("name, what", [("summary.json", "summary.json"),
                                        (".status.json.{pid}.tmp", "the run's status")])
def test_a_full_disk_at_the_summary_or_the_status_is_a_storage_error_naming_it(name, what, tmp_path, monkeypatch):
    real_write = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == name.format(pid=os.getpid()):
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(StorageError) as caught:
        train(f"train.run.output_dir={tmp_path / 'run'}")
    message = str(caught.value)
    assert message.startswith(f"could not write {what}") and "the disk is full" in message
    assert "free there" in message  # the free space it names
