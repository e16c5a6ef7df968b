"""The next step's batches are made and queued while the step waits for its read, and change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ligerkit.errors import LigerKitError
from ligerkit.train import Trainer, load_engine
from ligerkit.train import update as U
from ligerkit.train.staging import StagedData

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
CPU = torch.device("cpu")


def batch(step: int, pad: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.full((2, 6), step + 1)
    mask = torch.ones_like(ids)
    labels = ids.clone()
    if pad:
        mask[:, -pad:] = 0
        labels[:, -pad:] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class Counting:
    """A data source that counts the steps it made, and can fail at one step."""

    def __init__(self, fail_at: int | None = None):
        self.made: list[int] = []
        self.fail_at = fail_at

    def __call__(self, step: int) -> list[dict[str, torch.Tensor]]:
        self.made.append(step)
        if step == self.fail_at:
            raise LigerKitError(f"no data for step {step}")
        return [batch(step, pad=2)]


def test_a_staged_step_is_made_once_and_given_as_staged():
    data = Counting()
    staging = StagedData(data, CPU, drop_mask=True, steps=3)
    staging.stage(1)
    assert staging.staged_step == 1 and data.made == [1]
    host = staging.host(1)
    moved = staging.take(1, host)
    assert data.made == [1]  # not made again
    assert moved.step == 1 and moved.tokens == 2 * 3  # 6 tokens, 2 padded, the first not shifted in
    assert "attention_mask" not in moved.on_device[0]  # the drop applied as the batch moved
    assert torch.equal(moved.on_device[0]["input_ids"], batch(1)["input_ids"])
    assert staging.staged_step is None  # taken once


def test_batches_that_were_not_staged_from_this_list_are_moved_now():
    data = Counting()
    staging = StagedData(data, CPU, drop_mask=False, steps=3)
    staging.stage(1)
    other = [batch(7)]
    moved = staging.take(1, other)  # another list for the same step: its own batches, never the staged
    assert torch.equal(moved.on_device[0]["input_ids"], other[0]["input_ids"])
    assert staging.take(2, staging.host(2)).step == 2 and data.made == [1, 2]


def test_nothing_past_the_last_step_is_staged():
    data = Counting()
    staging = StagedData(data, CPU, drop_mask=False, steps=3)
    staging.stage(3)
    assert staging.staged_step is None and data.made == []


def test_a_failure_while_staging_stages_nothing_and_the_step_raises_it():
    data = Counting(fail_at=2)
    staging = StagedData(data, CPU, drop_mask=False, steps=5)
    staging.stage(1)
    staging.stage(2)  # fails: not raised here, and step 1's staged batches are not kept for step 2
    assert staging.staged_step is None
    with pytest.raises(LigerKitError, match="no data for step 2"):
        staging.host(2)


def test_a_bad_batch_is_refused_by_its_own_step_not_by_the_one_before():
    left_padded = batch(1)
    left_padded["attention_mask"][:, 0] = 0
    staging = StagedData(lambda step: [left_padded], CPU, drop_mask=True, steps=3)
    staging.stage(1)  # refused by drop_right_padding_mask: nothing staged, nothing raised
    assert staging.staged_step is None
    with pytest.raises(LigerKitError, match="left"):
        staging.take(1, staging.host(1))


def _run(tmp_path: Path, name: str) -> list[float]:
    sets = ["train.steps=4", "train.run.progress=false", f"train.run.output_dir={tmp_path / name}",
            "train.global_batch_size=4", "train.micro_batch_size=2", "model.dtype=float32"]
    Trainer(load_engine(QWEN3_CPU, sets)).train(CPU)
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows]


def test_each_step_makes_its_data_once_and_stages_the_next_before_its_read(tmp_path, monkeypatch):
    events: list[tuple[str, int]] = []
    real_batches, real_read = Trainer.micro_batches, U.on_host

    def made(self, step, vocab_size):
        events.append(("made", step))
        return real_batches(self, step, vocab_size)

    def read(loss, norm):
        events.append(("read", -1))
        return real_read(loss, norm)

    monkeypatch.setattr(Trainer, "micro_batches", made)
    monkeypatch.setattr(U, "on_host", read)
    _run(tmp_path, "events")
    assert [e for e in events if e[0] == "made"] == [("made", s) for s in range(4)]  # once each
    reads = [i for i, e in enumerate(events) if e[0] == "read"]
    for step, at in enumerate(reads[:-1]):  # step n+1's data exists before step n's read
        assert ("made", step + 1) in events[:at]


def test_staging_changes_no_loss(tmp_path, monkeypatch):
    staged = _run(tmp_path, "staged")
    monkeypatch.setattr(StagedData, "stage", lambda self, step: None)  # every step moves its own at its start
    assert _run(tmp_path, "unstaged") == staged
