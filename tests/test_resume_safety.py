"""A resume continues the same run or refuses: its config, room to go, one process per folder, and a new
run from a checkpoint's weights (``--init-from``) instead."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ligerkit.train import Trainer, load_engine

from ligerkit.train.run import resume
from ligerkit.errors import CheckpointError
from ligerkit.train.run.resume import ResumeConfigError
from ligerkit.train.run.folder import RunDirError

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.steps=4", "train.run.checkpoint_every=2", "train.run.progress=false",
        "train.global_batch_size=4", "train.micro_batch_size=2", "train.run.stop_after_steps=2"]


def train(config: Path, *sets: str, resume_from: Path | None = None, init_from: Path | None = None):
    return Trainer(load_engine(config, list(sets)), resume_from, init_from).train(torch.device("cpu"))


def files_of(run: Path) -> dict[str, str]:
    """Every file of a run folder and its hash (the lock file aside: it is the lock, not the run)."""
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A run of 4 steps stopped after step 2 (checkpoint step_2), so a resume has room to go."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.raises(Exception, match="stopped after step 2"):
        train(QWEN3_CPU, *SETS, f"train.run.output_dir={run}")
    assert json.loads((run / resume.RECORD).read_text())["format"] == resume.FORMAT
    return run


@pytest.fixture
def run(stopped, tmp_path) -> Path:
    return Path(shutil.copytree(stopped, tmp_path / "run"))


@pytest.mark.parametrize("key, value", [
    ("train.optim.lr", "1e-3"), ("train.global_batch_size", "8"), ("seed", "7"), ("data.seq_len", "32"),
    ("model.dtype", "bfloat16"), ("train.run.output_dir", "/tmp/elsewhere"), ("train.optim.warmup_steps", "3"), ("model.config.num_hidden_layers", "1"),
])
def test_a_resume_that_changes_a_key_is_refused_with_both_values(run, key, value):
    before = files_of(run)
    with pytest.raises(ResumeConfigError) as refused:
        train(run / "config.yaml", f"{key}={value}", resume_from=run)
    message = str(refused.value)
    assert f"  {key}: " in message and " in the run, " in message and "--init-from" in message
    assert files_of(run) == before  # nothing written


def test_a_resume_with_another_config_file_is_refused(run, tmp_path):
    other = tmp_path / "other.yaml"
    data = yaml.safe_load((run / "config.yaml").read_text())
    data["train"]["optim"]["weight_decay"] = 0.1
    other.write_text(yaml.safe_dump(data))
    with pytest.raises(ResumeConfigError, match="train.optim.weight_decay: 0.0 in the run, 0.1 now"):
        train(other, resume_from=run)


def test_an_edited_config_yaml_is_refused(run):
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("lr: 0.001", "lr: 0.002") if "lr: 0.001" in text else
                                     text.replace("seed: 0", "seed: 5"))
    with pytest.raises(ResumeConfigError, match="differ from what it trained with"):
        train(run / "config.yaml", resume_from=run)


@pytest.mark.parametrize("sets", [["train.steps=5"], ["train.run.log_every=1", "train.run.progress=true"],
                                  ["train.run.checkpoint_every=1", "train.run.keep_checkpoints=4"],
                                  ["train.run.summary_warmup_steps=0", "train.run.peak_tflops=10",
                                   "train.run.runs_dir=/tmp/elsewhere"]])
def test_a_resume_may_change_the_safe_keys(run, sets):
    result = train(run / "config.yaml", "train.run.stop_after_steps=null", *sets, resume_from=run)
    assert result.first_step == 2 and [r["step"] for r in rows(run)] == list(range(1, result.steps[-1].step + 1))


def test_a_resume_naming_its_own_folder_as_output_dir_is_the_same_run(run):
    assert train(run / "config.yaml", f"train.run.output_dir={run}", "train.run.stop_after_steps=null",
                 resume_from=run).first_step == 2


def test_a_folder_written_before_run_json_still_resumes_and_still_refuses(run):
    (run / resume.RECORD).unlink()  # format 1: config.yaml is the record
    with pytest.raises(ResumeConfigError, match="train.optim.lr"):
        train(run / "config.yaml", "train.optim.lr=0.5", resume_from=run)
    assert train(run / "config.yaml", "train.run.stop_after_steps=null", resume_from=run).first_step == 2


def test_a_finished_run_is_refused_untouched_and_extending_it_keeps_one_summary(run):
    train(run / "config.yaml", "train.run.stop_after_steps=null", resume_from=run)
    finished = files_of(run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["steps_this_process"] == 2  # the whole run, not this process
    assert summary["first_loss"] == rows(run)[0]["loss"] and summary["last_loss"] == rows(run)[-1]["loss"]
    with pytest.raises(RunDirError, match="trained all 4 of its steps.*train.steps=N"):
        train(run / "config.yaml", resume_from=run)
    assert files_of(run) == finished
    train(run / "config.yaml", "train.steps=5", resume_from=run)
    assert json.loads((run / "summary.json").read_text())["steps"] == 5


def test_a_live_run_is_not_resumed_by_a_second_process(run):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from ligerkit.train.run import resume\n"
        f"h = resume.lock(Path({str(run)!r})); print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = files_of(run)
        with pytest.raises(RunDirError, match=f"in use by another process \\(pid {holder.pid}\\)"):
            train(run / "config.yaml", resume_from=run)
        assert files_of(run) == before
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)  # the OS dropped the lock with the process
    assert train(run / "config.yaml", "train.run.stop_after_steps=null", resume_from=run).first_step == 2


def test_init_from_starts_a_new_run_from_the_checkpoint_weights(stopped, tmp_path):
    fresh = train(QWEN3_CPU, *SETS, "train.run.stop_after_steps=null", "train.steps=1", f"train.run.output_dir={tmp_path / 'a'}")
    one = train(QWEN3_CPU, *SETS, "train.run.stop_after_steps=null", "train.steps=1", "train.optim.lr=1e-6",
                f"train.run.output_dir={tmp_path / 'b'}", init_from=stopped)
    two = train(QWEN3_CPU, *SETS, "train.run.stop_after_steps=null", "train.steps=1", "train.optim.lr=1e-2",
                f"train.run.output_dir={tmp_path / 'c'}", init_from=stopped / "checkpoints" / "step_0000002")
    assert one.first_step == two.first_step == 0
    # step 1's loss is taken before the update: the same weights (the checkpoint's), whatever the new lr
    assert one.steps[0].loss == two.steps[0].loss != fresh.steps[0].loss
    assert not (tmp_path / "b" / "checkpoints").exists() or one.run_dir != stopped


def test_init_from_a_checkpoint_of_another_model_says_the_shapes_must_match(stopped, tmp_path):
    with pytest.raises(CheckpointError, match="shapes must match"):
        train(QWEN3_CPU, *SETS, "model.config.intermediate_size=96",
              f"train.run.output_dir={tmp_path / 'x'}", init_from=stopped)


def test_resume_and_init_from_together_are_refused(stopped):
    with pytest.raises(RunDirError, match="give one of the two"):
        Trainer(load_engine(QWEN3_CPU, SETS), stopped, stopped)


def test_a_recipe_planted_in_a_run_folder_is_never_imported(run):
    engine = run / "recipes" / "evil" / "engine"
    engine.mkdir(parents=True)
    (run / "recipes" / "evil" / "configs").mkdir()
    marker = run / "ran"
    (engine / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["recipe"] = "recipes/evil"  # resolved next to the config: inside the run folder
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    from ligerkit.train.recipe.loading import RecipeError

    with pytest.raises(RecipeError, match="inside the run folder .* nothing in a run folder is loaded as code"):
        train(run / "config.yaml", resume_from=run)
    assert not marker.exists()


def test_a_run_refused_before_it_starts_leaves_no_folder(tmp_path, monkeypatch):
    def refuse(engine, device):
        raise RuntimeError("refused while building the model")

    monkeypatch.setattr("ligerkit.train.trainer.set_up_model", refuse)
    with pytest.raises(RuntimeError, match="refused while building"):
        train(QWEN3_CPU, *SETS, f"train.run.runs_dir={tmp_path / 'runs' / 'mine'}")
    assert list(tmp_path.iterdir()) == []  # the folders opening the run made, the empty ones above it included
    (tmp_path / "runs" / "qwen3-cpu" / "another").mkdir(parents=True)  # folders that were there stay
    with pytest.raises(RuntimeError, match="refused while building"):
        train(QWEN3_CPU, *SETS, f"train.run.runs_dir={tmp_path / 'runs'}")
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == [
        "runs", "runs/qwen3-cpu", "runs/qwen3-cpu/another"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="Liger on trains where a GPU is: nothing is refused")
def test_a_refused_run_does_not_announce_a_run_folder(tmp_path, caplog):
    import logging

    from ligerkit.errors import LigerNeedsAcceleratorError

    with caplog.at_level(logging.INFO, logger="ligerkit"), pytest.raises(LigerNeedsAcceleratorError):
        train(QWEN3_CPU, *SETS, f"train.run.runs_dir={tmp_path / 'runs'}", "model.liger_kernel.enabled=true")
    assert "run folder" not in caplog.text and not (tmp_path / "runs").exists()
