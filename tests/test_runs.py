"""Real runs lose nothing: run folders, checkpoints and exact resume, stops, the non-finite guard, a
user's own checkpoint, tokenizer and JSONL data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import run_fixtures as F
from helpers import torchrun_train
from ligerkit.train import Trainer, load_engine
from ligerkit.train.run import checkpoint
from ligerkit.train.run.folder import RunDirError
from ligerkit.train.stopping import NonFiniteError, TrainingStopped

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = ROOT / "recipes" / "qwen3"
QWEN3_CPU = QWEN3 / "configs" / "cpu.yaml"


@pytest.fixture(scope="module")
def user_data(tmp_path_factory):
    """A tokenizer folder and a shuffled-JSONL dataset, and the tokenizer's size."""
    folder = tmp_path_factory.mktemp("user")
    vocab = F.tokenizer_folder(folder / "tokenizer")
    return folder / "tokenizer", F.jsonl_file(folder / "data.jsonl"), vocab


def resume_config(user_data, out: Path, *extra: str) -> list[str]:
    """qwen3 on the user's JSONL data, float32, attention dropout on, checkpoints every 2 steps."""
    tokenizer, data, vocab = user_data
    sets = ["data.kind=jsonl", f"data.path={data}", f"data.tokenizer={tokenizer}", "data.seq_len=16",
            f"model.config.vocab_size={vocab}", "model.config.attention_dropout=0.1", "model.dtype=float32",
            "train.steps=6", "train.run.checkpoint_every=2", "train.run.progress=false", f"train.run.output_dir={out}",
            "train.global_batch_size=4", "train.micro_batch_size=2"]
    return sets + list(extra)


def losses_of(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows]


def train(sets: list[str], resume: Path | None = None):
    return Trainer(load_engine(QWEN3_CPU, sets), resume).train(torch.device("cpu"))


def test_a_run_writes_its_folder(tmp_path, user_data):
    result = train(resume_config(user_data, tmp_path / "run", "train.steps=3"))
    run = tmp_path / "run"
    for name in ("config.yaml", "environment.json", "liger.json", "metrics.jsonl", "loss.png", "summary.json"):
        assert (run / name).is_file(), name
    assert [s for s, _ in losses_of(run)] == [1, 2, 3]  # steps done, as the log counts them
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tokens_per_s"]["steps_timed"] == 2 and summary["tokens_per_s"]["min"] <= summary["tokens_per_s"]["median"]
    assert result.run_dir == run and "recipes/qwen3" in (run / "config.yaml").read_text()


def test_a_default_run_gets_a_new_folder_and_an_existing_one_is_refused(tmp_path, user_data):
    sets = [s for s in resume_config(user_data, tmp_path, "train.steps=1") if not s.startswith("train.run.output_dir")]
    first = train([*sets, f"train.run.runs_dir={tmp_path}"]).run_dir
    second = train([*sets, f"train.run.runs_dir={tmp_path}"]).run_dir
    assert first != second and first.parent == second.parent == tmp_path / "qwen3-cpu"
    with pytest.raises(RunDirError, match="already holds a run"):
        train([*sets, f"train.run.output_dir={first}"])
    assert len(losses_of(first)) == 1  # the earlier run's metrics are untouched


def test_stop_then_resume_gives_the_uninterrupted_curve(tmp_path, user_data):
    whole = losses_of(train(resume_config(user_data, tmp_path / "whole")).run_dir)
    with pytest.raises(TrainingStopped, match="--resume") as stopped:
        train(resume_config(user_data, tmp_path / "cut", "train.run.stop_after_steps=3"))
    assert stopped.value.exit_code == 75
    assert [p.name for p in checkpoint.complete(tmp_path / "cut")] == ["step_0000002", "step_0000003"]
    train(resume_config(user_data, tmp_path / "cut"), resume=tmp_path / "cut")
    assert losses_of(tmp_path / "cut") == whole  # every step once, the same losses bit for bit


def test_a_crash_resumes_from_the_last_checkpoint_and_drops_the_rows_after_it(tmp_path, user_data, monkeypatch):
    whole = losses_of(train(resume_config(user_data, tmp_path / "whole")).run_dir)
    real = Trainer._timed_step

    def crash_at_step_3(self, step, *args):
        if step == 3:
            raise RuntimeError("killed")
        return real(self, step, *args)

    monkeypatch.setattr(Trainer, "_timed_step", crash_at_step_3)
    with pytest.raises(RuntimeError, match="killed"):
        train(resume_config(user_data, tmp_path / "crash"))
    assert [s for s, _ in losses_of(tmp_path / "crash")] == [1, 2, 3]
    monkeypatch.setattr(Trainer, "_timed_step", real)
    result = train(resume_config(user_data, tmp_path / "crash"), resume=tmp_path / "crash")
    assert result.first_step == 2 and losses_of(tmp_path / "crash") == whole


def test_a_checkpoint_killed_mid_save_is_never_the_latest(tmp_path, user_data, monkeypatch):
    import torch.distributed.checkpoint as dcp

    real, saves = dcp.save, []

    def dies_on_the_second_save(state, checkpoint_id):
        saves.append(checkpoint_id)
        if len(saves) == 2:
            real(state, checkpoint_id=checkpoint_id)
            raise KeyboardInterrupt("killed while saving")
        return real(state, checkpoint_id=checkpoint_id)

    monkeypatch.setattr(dcp, "save", dies_on_the_second_save)
    with pytest.raises(KeyboardInterrupt):
        train(resume_config(user_data, tmp_path / "run"))
    assert (tmp_path / "run" / "checkpoints" / "step_0000004.partial").is_dir()
    assert checkpoint.latest(tmp_path / "run").name == "step_0000002"
    monkeypatch.setattr(dcp, "save", real)
    assert train(resume_config(user_data, tmp_path / "run"), resume=tmp_path / "run").first_step == 2


def test_resume_needs_a_complete_checkpoint(tmp_path, user_data):
    train(resume_config(user_data, tmp_path / "run", "train.steps=1", "train.run.checkpoint_every=5"))
    with pytest.raises(RunDirError, match="saved no checkpoint .* start a new run"):
        train(resume_config(user_data, tmp_path / "run"), resume=tmp_path / "run")
    with pytest.raises(checkpoint.CheckpointError, match="no complete checkpoint"):  # cut before its first save
        (tmp_path / "run" / "summary.json").unlink()
        train(resume_config(user_data, tmp_path / "run"), resume=tmp_path / "run")


def test_a_non_finite_loss_stops_with_the_step_and_a_hint(tmp_path):
    sets = ["model.config.initializer_range=1.0e+30", "train.steps=3", "train.run.progress=false",
            f"train.run.output_dir={tmp_path / 'run'}"]
    with pytest.raises(NonFiniteError, match=r"step 1: .*nan.*train.optim.lr"):
        train(sets)
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # strict JSON: no NaN


def test_sigterm_finishes_the_step_saves_and_exits_non_zero(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ligerkit", "train", str(QWEN3_CPU), "--set", "train.steps=2000", "--set",
           f"train.run.output_dir={out}", "--set", "train.run.progress=false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 300
    while time.time() < deadline and not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-2000:]
    assert checkpoint.latest(out) is not None and "checkpoint" in stderr and "--resume" in stderr


def _torchrun(tmp_path: Path, nproc: int, port: int, sets: list[str], resume: Path | None = None) -> str:
    """Train under torchrun; ``"ok"``, ``"stopped"`` (a resumable stop on every rank) or the error output."""
    proc = torchrun_train(QWEN3_CPU, sets, tmp_path, port, nproc, resume, json_out=True)
    if proc.returncode == 0:
        return "ok"
    if proc.stderr.count("stopped after step") == nproc:  # torchrun itself exits 1
        return "stopped"
    return proc.stderr[-3000:]


def test_two_gloo_ranks_stop_and_resume_to_the_same_curve_and_resume_on_one(tmp_path, user_data):
    assert _torchrun(tmp_path, 2, 29541, resume_config(user_data, tmp_path / "whole")) == "ok"
    whole = losses_of(tmp_path / "whole")
    assert _torchrun(tmp_path, 2, 29542, resume_config(user_data, tmp_path / "cut", "train.run.stop_after_steps=3")) == "stopped"
    assert _torchrun(tmp_path, 2, 29543, resume_config(user_data, tmp_path / "cut"), resume=tmp_path / "cut") == "ok"
    assert losses_of(tmp_path / "cut") == whole  # the same ranks, the same reductions: bit for bit
    assert _torchrun(tmp_path, 2, 29544, resume_config(user_data, tmp_path / "half", "train.run.stop_after_steps=3")) == "stopped"
    one = train(resume_config(user_data, tmp_path / "half"), resume=tmp_path / "half")  # another world size
    assert one.first_step == 3
    half = losses_of(tmp_path / "half")
    assert [s for s, _ in half] == [s for s, _ in whole]
    assert [loss for _, loss in half] == pytest.approx([loss for _, loss in whole], rel=1e-5, abs=1e-5)


def test_a_pretrained_checkpoint_with_its_tokenizer_trains_on_a_jsonl_file(tmp_path):
    model = F.pretrained_folder(tmp_path / "ckpt")
    data = F.jsonl_file(tmp_path / "data.jsonl", field="body")
    config = tmp_path / "mine.yaml"  # a config outside recipes/ names its recipe
    config.write_text(f"""name: mine
recipe: {QWEN3}
model:
  family: qwen3
  source: pretrained
  pretrained_path: {model}
data: {{kind: jsonl, path: {data}, text_field: body, seq_len: 16, packing: false}}
train: {{steps: 4, global_batch_size: 4, micro_batch_size: 2, optim: {{lr: 1.0e-3}}, run: {{progress: false, output_dir: {tmp_path / 'run'}}}}}
""")
    result = Trainer(load_engine(config)).train(torch.device("cpu"))
    assert len(result.steps) == 4 and all(s.valid_tokens > 0 for s in result.steps)
    assert result.steps[-1].loss < result.steps[0].loss + 1.0 and torch.isfinite(torch.tensor(result.steps[-1].loss))
