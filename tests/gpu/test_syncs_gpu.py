"""GPU: the host waits for the GPU at most once per optimizer step on the kit's and the fused loss's path.

CUDA's sync debug mode (``ligerkit.proof.syncs.SyncCounter``) names the Python line behind every
synchronization. The own trainer, qwen3 recipe at a small size with two micro-batches per step, each
Liger arm: the synchronizations made from ligerkit's own code are at most one per step (reading the
loss and the gradient norm, for the log line and the non-finite check), none per micro-batch. HF
Trainer with ``FusedLossTrainer``: the fused loss reads the step's token count once per step.
Synchronizations in transformers' or Liger's own code are counted and reported, not asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ligerkit.proof.syncs import SyncCounter
from ligerkit.train.config.arms import ARMS
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["model.config.num_hidden_layers=2", "data.seq_len=256", "train.global_batch_size=4", "train.micro_batch_size=2",
         "train.steps=6", "train.run.progress=false"]


def ours(sources: dict[str, float]) -> float:
    """Synchronizations per step made from ligerkit's own files."""
    return sum(n for where, n in sources.items() if "/ligerkit/" in where.replace("\\", "/"))


@pytest.mark.gpu
@pytest.mark.parametrize("arm", ["liger", "liger_fused"])
def test_the_own_trainer_waits_at_most_once_per_step(arm, tmp_path):
    syncs = SyncCounter()

    class Counted(Trainer):
        def _after_step(self, step, start, model, optimizer, device, stop):  # type: ignore[no-untyped-def]
            super()._after_step(step, start, model, optimizer, device, stop)
            if step == 1:
                syncs.__enter__()  # from the third step on: warm
            elif step > 1:
                syncs.step()

    sets = [*SMALL, *ARMS[arm], f"train.run.output_dir={tmp_path / arm}"]
    try:
        Counted(load_engine(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml", sets)).train()
    finally:
        syncs.__exit__(None, None, None)
    sources = syncs.sources()
    print(arm, syncs.per_step, sources)
    assert len(syncs.per_step) == 4
    assert ours(sources) <= 1.0, sources


@pytest.mark.gpu
def test_the_fused_hf_trainer_reads_the_count_once_per_step(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    import hf_trainer
    from _common import TrainerCallback

    class Count(TrainerCallback):
        def __init__(self):
            self.syncs = SyncCounter()

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                self.syncs.__enter__()

        def on_step_end(self, args, state, control, **kw):
            if state.global_step > 2:
                self.syncs.step()

    count = Count()
    try:
        hf_trainer.main(["--liger", "on", "--loss", "fused", "--steps", "6", "--grad-accum", "2", "--seq-len", "256",
                         "--output-dir", str(tmp_path / "hf")], callbacks=[count])
    finally:
        count.syncs.__exit__(None, None, None)
    sources = count.syncs.sources()
    print(count.syncs.per_step, sources)
    assert len(count.syncs.per_step) == 4
    assert ours(sources) <= 1.0, sources  # the fused loss: the count, once per step of 2 micro-batches
