"""Every step is in metrics.jsonl exactly once, with the uninterrupted run's numbers, whatever a run met on the
way: a torn or cut metrics file (the checkpoint a resume starts from keeps the rows of its steps), a row
written twice, a crash after a row or in the middle of a save, a damaged newest checkpoint, a full disk at a
checkpoint or at a row, and a process killed outright (``kill -9``) in the middle of a row or of a save."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ligerkit.errors import LigerKitError, StorageError
from ligerkit.train import Trainer, load_engine
from ligerkit.train.run import checkpoint

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.run.progress=false", "train.global_batch_size=4",
        "train.micro_batch_size=2", "train.steps=8", "train.run.checkpoint_every=2", "train.run.keep_checkpoints=2"]
STEPS = list(range(1, 9))


class Injected(RuntimeError):
    """The failure a fault raises."""


def train(run: Path, *more: str, resume: bool = False):
    return Trainer(load_engine(run / "config.yaml" if resume else QWEN3_CPU,
                               [*([] if resume else SETS), f"train.run.output_dir={run}", *more]),
                   run if resume else None).train(torch.device("cpu"))


def interrupted(run: Path, *more: str) -> None:
    """Train ``run`` until the fault stops it (a stop, an injected failure, a full disk)."""
    with pytest.raises((LigerKitError, Injected, KeyboardInterrupt)):
        train(run, *more)


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def stopped_at(n: int) -> Callable[[Path, pytest.MonkeyPatch], None]:
    def make(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        interrupted(run, f"train.run.stop_after_steps={n}")
    return make


def torn_row(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repro: the last row (step 4, whose checkpoint was saved) torn; it was lost (1,2,3,5,...)."""
    interrupted(run, "train.run.stop_after_steps=4")
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[:-len(text.splitlines()[-1]) // 2 - 1])


def cut_file(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupted(run, "train.run.stop_after_steps=6")
    data = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(data[:len(data) // 3])  # rows of steps 1 and a part of 2 left


def lost_file(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupted(run, "train.run.stop_after_steps=4")
    (run / "metrics.jsonl").unlink()


def row_twice(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupted(run, "train.run.stop_after_steps=4")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([*lines[:3], lines[2], *lines[3:]]) + "\n")


def crash_after_a_row(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Trainer._after_step

    def after(self, step, *args):
        if step + 1 == 5:
            raise Injected("killed after the row of step 5")
        return real(self, step, *args)

    monkeypatch.setattr(Trainer, "_after_step", after)
    interrupted(run)
    monkeypatch.setattr(Trainer, "_after_step", real)


def crash_mid_save(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.checkpoint as dcp

    real, saves = dcp.save, []

    def dies_in_the_third_save(state, checkpoint_id):
        saves.append(checkpoint_id)
        real(state, checkpoint_id=checkpoint_id)
        if len(saves) == 3:
            raise KeyboardInterrupt("killed while saving step 6")

    monkeypatch.setattr(dcp, "save", dies_in_the_third_save)
    interrupted(run)
    monkeypatch.setattr(dcp, "save", real)
    assert (run / "checkpoints" / "step_0000006.partial").is_dir() and checkpoint.latest(run).name == "step_0000004"


def damaged_newest_and_torn(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupted(run, "train.run.stop_after_steps=6")
    shard = run / "checkpoints" / "step_0000006" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[:-10])


def disk_full_at_a_checkpoint(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save's writer (what DCP writes non-tensor state with) raising ENOSPC at the save of step 4."""
    from torch import serialization

    real, calls = serialization._save, []

    def full(*args, **kwargs):
        calls.append(1)
        if any(p.name == "step_0000004.partial" for p in (run / "checkpoints").iterdir()):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(serialization, "_save", full)
    with pytest.raises(StorageError, match=r"the checkpoint after step 4 .*removed; the newest complete one is "
                                           r"step_0000002.*the disk is full"):
        train(run)
    monkeypatch.setattr(serialization, "_save", real)
    assert not list((run / "checkpoints").glob("*.partial")) and checkpoint.latest(run).name == "step_0000002"


def disk_full_at_a_row(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The row of step 5 half written, then ENOSPC: a torn line, and the run ends in a StorageError."""
    import io

    real_open = Path.open

    class Half(io.TextIOWrapper):
        pass

    def opened(self, mode="r", *args, **kwargs):
        handle = real_open(self, mode, *args, **kwargs)
        if self.name == "metrics.jsonl" and mode == "a" and len(self.read_text().splitlines()) == 4:
            write = handle.write

            def half(text):
                write(text[:len(text) // 2])
                handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
            handle.write = half
        return handle

    monkeypatch.setattr(Path, "open", opened)
    with pytest.raises(StorageError, match=r"the metrics row of step 5 .*metrics\.jsonl.*free space on that disk"):
        train(run)
    monkeypatch.setattr(Path, "open", real_open)
    assert not (run / "metrics.jsonl").read_text().endswith("\n")


KILL = """
import os, signal, sys, torch
import torch.distributed.checkpoint as dcp
from ligerkit.train import Trainer, load_engine
from ligerkit.train.metrics import MetricsLog
where = sys.argv[1]
real_log, real_save = MetricsLog.log, dcp.save
def log(self, metrics):
    if where == "row" and metrics.step == 5:
        with self.path.open("a") as fh:
            fh.write('{"step": 5, "loss": 1.2')  # half a row on disk, then kill -9
            fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_log(self, metrics)
def save(state, checkpoint_id):
    real_save(state, checkpoint_id=checkpoint_id)
    if where == "save" and checkpoint_id.endswith("step_0000006.partial"):
        os.kill(os.getpid(), signal.SIGKILL)
MetricsLog.log, dcp.save = log, save
Trainer(load_engine(sys.argv[2], sys.argv[3:])).train(torch.device("cpu"))
"""


def killed(where: str) -> Callable[[Path, pytest.MonkeyPatch], None]:
    def make(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        done = subprocess.run([sys.executable, "-c", KILL, where, str(QWEN3_CPU), *SETS, f"train.run.output_dir={run}"],
                              capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == -9, done.stderr[-2000:]
        assert json.loads((run / "status.json").read_text())["state"] == "running"  # no end record: a crash
    return make


FAULTS = {
    "stopped": stopped_at(3), "torn-row-at-the-checkpoint": torn_row, "metrics-cut": cut_file,
    "metrics-lost": lost_file, "row-written-twice": row_twice, "crash-after-a-row": crash_after_a_row,
    "crash-mid-save": crash_mid_save, "damaged-newest-and-torn-row": damaged_newest_and_torn,
    "disk-full-at-a-checkpoint": disk_full_at_a_checkpoint, "disk-full-at-a-row": disk_full_at_a_row,
    "kill-9-mid-row": killed("row"), "kill-9-mid-save": killed("save"),
}


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> list[tuple[int, float]]:
    run = tmp_path_factory.mktemp("whole") / "run"
    train(run)
    return [(r["step"], r["loss"]) for r in rows(run)]


@pytest.mark.parametrize("fault", FAULTS)
def test_every_step_is_there_once_with_the_uninterrupted_numbers_after_a_fault(fault, tmp_path, monkeypatch,
                                                                               whole):
    run = tmp_path / "run"
    FAULTS[fault](run, monkeypatch)
    train(run, "train.run.stop_after_steps=null", resume=True)
    assert [r["step"] for r in rows(run)] == STEPS  # every step, once, in order
    assert [(r["step"], r["loss"]) for r in rows(run)] == whole  # bit for bit: the same run
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert not list(run.rglob("*.tmp"))


def test_a_checkpoint_keeps_the_rows_of_its_steps(tmp_path):
    run = tmp_path / "run"
    interrupted(run, "train.run.stop_after_steps=4")
    meta = json.loads((run / "checkpoints" / "step_0000004" / "meta.json").read_text())
    assert [r["step"] for r in meta["metrics"]] == [1, 2, 3, 4] and meta["metrics"] == rows(run)
