"""A finished run stays finished: its folder records where the run ended, and a resume continues only a run
that did not finish, whatever its newest checkpoint. Extending one (``--set train.steps=N``) trains only what
the message says; a folder of an earlier release (no end record) is judged by its metrics."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.errors import LigerKitError, NonFiniteError, RunDirError
from ligerkit.train import Trainer, load_engine
from ligerkit.train.run import checkpoint, status
from ligerkit.train.stopping import TrainingStopped

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.run.progress=false", "train.global_batch_size=4",
        "train.micro_batch_size=2"]


def train(config: Path, *sets: str, resume_from: Path | None = None):
    return Trainer(load_engine(config, list(sets)), resume_from).train(torch.device("cpu"))


def files_of(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def steps_of(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


@pytest.fixture(scope="module")
def late(tmp_path_factory) -> Path:
    """6 of 6 steps trained, the newest checkpoint at step 2: the run of 1500 steps whose newest checkpoint is
    at step 259, in small (it stopped after step 2, then went on with checkpoints off)."""
    run = tmp_path_factory.mktemp("late") / "run"
    with pytest.raises(TrainingStopped):
        train(QWEN3_CPU, *SETS, "train.steps=6", "train.run.checkpoint_every=2", "train.run.stop_after_steps=2",
              f"train.run.output_dir={run}")
    train(run / "config.yaml", "train.run.checkpoint_every=null", "train.run.stop_after_steps=null", resume_from=run)
    assert steps_of(run) == [1, 2, 3, 4, 5, 6] and checkpoint.latest(run).name == "step_0000002"
    assert status.read(run)["state"] == status.FINISHED and status.read(run)["step"] == 6
    return run


@pytest.fixture(scope="module")
def whole8(tmp_path_factory) -> Path:
    """The same run trained to 8 steps without a stop."""
    run = tmp_path_factory.mktemp("whole8") / "run"
    train(QWEN3_CPU, *SETS, "train.steps=8", f"train.run.output_dir={run}")
    return run


@pytest.fixture
def copy(late, tmp_path) -> Path:
    return Path(shutil.copytree(late, tmp_path / "run"))


def test_a_finished_run_with_an_older_checkpoint_is_refused_untouched_by_the_command_line(copy, monkeypatch):
    import logging

    monkeypatch.setattr(logging.getLogger("ligerkit"), "handlers", [])  # none left on an earlier runner's stderr
    before = files_of(copy)
    result = CliRunner().invoke(app, ["train", "--resume", str(copy)])
    assert result.exit_code == 1, result.output
    message = " ".join(result.stderr.split())
    assert "RunDirError" in message and "Traceback" not in result.output
    assert "finished" in message and "trained all 6 of its steps" in message
    assert "--set train.steps=N for some N > 6" in message and "--init-from" in message
    assert "step_0000002" in message and "training steps 3-6 again" in message  # what an extension really does
    assert files_of(copy) == before


def test_the_refusal_comes_before_anything_is_built_or_announced_and_leaves_the_lock_file_alone(copy, caplog):
    lock = copy / ".lock"
    lock.write_text("12345")
    os.utime(lock, (1_000_000, 1_000_000))
    engine = load_engine(copy / "config.yaml")
    with caplog.at_level("INFO", logger="ligerkit"), pytest.raises(RunDirError, match="trained all 6 of its steps"):
        Trainer(engine, copy).train(torch.device("cpu"))
    assert engine.model is None  # refused with the folder opened, before the model was built
    assert "run folder" not in caplog.text
    assert lock.read_text() == "12345" and lock.stat().st_mtime == 1_000_000


def test_an_init_from_that_names_no_checkpoint_is_refused_before_a_folder_is_made(tmp_path, caplog):
    from ligerkit.errors import CheckpointError

    engine = load_engine(QWEN3_CPU, [*SETS, "train.steps=1", f"train.run.output_dir={tmp_path / 'runs' / 'new'}"])
    with caplog.at_level("INFO", logger="ligerkit"), pytest.raises(CheckpointError, match="--init-from"):
        Trainer(engine, init_from=tmp_path / "nowhere").train(torch.device("cpu"))
    assert engine.model is None and not (tmp_path / "runs").exists() and "run folder" not in caplog.text


def test_a_finished_run_whose_newest_checkpoint_is_before_its_end_is_refused(tmp_path):
    run = tmp_path / "run"  # checkpoint_every=100, steps=250 in small: checkpoints at 2 and 4, finished at 5
    train(QWEN3_CPU, *SETS, "train.steps=5", "train.run.checkpoint_every=2", f"train.run.output_dir={run}")
    before = files_of(run)
    with pytest.raises(RunDirError, match=r"trained all 5 of its steps.*step_0000004\), training step 5 again"):
        train(run / "config.yaml", resume_from=run)
    assert files_of(run) == before and steps_of(run) == [1, 2, 3, 4, 5]


def test_extending_a_finished_run_trains_what_the_message_says_each_step_once(copy, whole8):
    result = train(copy / "config.yaml", "train.steps=8", "train.run.stop_after_steps=null", resume_from=copy)
    assert result.first_step == 2  # from the newest intact checkpoint, as the refusal said
    assert losses(copy) == losses(whole8)  # steps 3-6 trained again, bit for bit; every step once
    assert status.read(copy)["state"] == status.FINISHED and status.read(copy)["step"] == 8
    with pytest.raises(RunDirError, match="trained all 8 of its steps"):
        train(copy / "config.yaml", "train.steps=8", resume_from=copy)


def test_the_run_folder_records_where_each_run_ended(tmp_path, late):
    assert status.read(late)["state"] == "finished"
    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingStopped):
        train(QWEN3_CPU, *SETS, "train.steps=4", "train.run.stop_after_steps=3", f"train.run.output_dir={stopped}")
    record = status.read(stopped)
    assert (record["state"], record["step"], record["steps"]) == ("stopped", 3, 4)
    assert "stop_after_steps" in record["reason"]
    failed = tmp_path / "failed"
    with pytest.raises(NonFiniteError):
        train(QWEN3_CPU, *SETS, "model.config.initializer_range=1.0e+30", "train.steps=3",
              f"train.run.output_dir={failed}")
    record = status.read(failed)
    assert (record["state"], record["step"]) == ("failed", 0) and record["reason"].startswith("NonFiniteError")
    assert not list(tmp_path.glob("*/.status.json*.tmp"))  # written whole: a temporary file, then a rename


KILLED = """
import os, signal, sys, torch
from ligerkit.train import Trainer, load_engine
real = Trainer._after_step
def after(self, step, *args):
    real(self, step, *args)
    if step + 1 == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 after step 3's row, its checkpoint at step 2
Trainer._after_step = after
Trainer(load_engine(sys.argv[1], sys.argv[2:])).train(torch.device("cpu"))
"""


def test_a_run_killed_outright_leaves_its_start_record_and_resumes(tmp_path, whole8):
    run = tmp_path / "run"
    sets = [*SETS, "train.steps=8", "train.run.checkpoint_every=2", f"train.run.output_dir={run}"]
    done = subprocess.run([sys.executable, "-c", KILLED, str(QWEN3_CPU), *sets], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == -9, done.stderr[-2000:]
    record = status.read(run)
    assert (record["state"], record["step"], record["steps"]) == ("running", 0, 8)  # no end record: a crash
    assert steps_of(run) == [1, 2, 3]
    assert train(run / "config.yaml", resume_from=run).first_step == 2
    assert losses(run) == losses(whole8)


def test_a_run_killed_after_its_last_step_is_finished(copy):
    status.write(copy, status.RUNNING, 2, 6)  # its end record never written: killed while plotting, say
    before = files_of(copy)
    with pytest.raises(RunDirError, match="trained all 6 of its steps"):
        train(copy / "config.yaml", resume_from=copy)
    assert files_of(copy) == before


def test_a_folder_of_an_earlier_release_is_judged_by_its_metrics(copy, tmp_path):
    (copy / "status.json").unlink()  # written before the end record existed
    with pytest.raises(RunDirError, match="trained all 6 of its steps"):
        train(copy / "config.yaml", resume_from=copy)
    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingStopped):
        train(QWEN3_CPU, *SETS, "train.steps=4", "train.run.checkpoint_every=2", "train.run.stop_after_steps=2",
              f"train.run.output_dir={stopped}")
    (stopped / "status.json").unlink()
    assert train(stopped / "config.yaml", "train.run.stop_after_steps=null", resume_from=stopped).first_step == 2
    assert steps_of(stopped) == [1, 2, 3, 4]


def test_a_refusal_is_a_ligerkit_error_naming_both_ways_on(copy):
    with pytest.raises(LigerKitError) as refused:
        train(copy / "config.yaml", "train.steps=6", resume_from=copy)
    assert "--set train.steps=" in str(refused.value) and f"--init-from {copy}" in str(refused.value)
