"""GPU: ``train.cuda_graphs`` replays the compiled layers as CUDA graphs and trains the same run.

The qwen3 recipe at a small size, ``compile_fused`` (Inductor per layer, the fused loss), with and
without CUDA graphs, one process: the per-step losses and gradient norms must agree (the graphs
replay the same kernels), and the run with graphs must not be slower beyond noise (it exists to cut
the host's launch time).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ligerkit.train.arms import ARMS
from ligerkit.train.compile import reset_compiled
from ligerkit.train.loading import load_engine
from ligerkit.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["model.config.num_hidden_layers=4", "data.seq_len=1024", "train.global_batch_size=4",
         "train.micro_batch_size=2", "train.steps=8", "train.progress=false", "train.summary_warmup_steps=3"]


def run(tmp_path: Path, name: str, *more: str):
    engine = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml",
                         [*SMALL, *ARMS["compile_fused"], f"train.output_dir={tmp_path / name}", *more])
    try:
        return Trainer(engine).train(torch.device("cuda"))
    finally:
        reset_compiled()


@pytest.mark.gpu
def test_cuda_graphs_train_the_same_run(tmp_path):
    plain = run(tmp_path, "plain")
    graphs = run(tmp_path, "graphs", "train.cuda_graphs=true")
    for a, b in zip(plain.steps, graphs.steps, strict=True):
        assert abs(a.loss - b.loss) <= 1e-3 * abs(a.loss), (a.loss, b.loss)
        assert abs(a.grad_norm - b.grad_norm) <= 1e-2 * abs(a.grad_norm), (a.grad_norm, b.grad_norm)
    speed = graphs.summary(3)["tokens_per_s"]["median"] / plain.summary(3)["tokens_per_s"]["median"]
    print(f"cuda graphs: {speed:.3f}x the plain compiled run's tokens/s")
    assert speed > 0.9
