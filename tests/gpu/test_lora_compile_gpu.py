"""GPU: compile mode with LoRA trains no further from float32 than eager does, from the same adapters.

At the Qwen3-8B shape the bench found ``compile_fused``'s LoRA loss 0.40 from eager's at step 2. The
diagnosis (docs/benchmarks.md, "Sizes users train") found two things: the arms started from different
adapters (the set-up now seeds them), and eager's bf16 LoRA is the arm that drifts from float32. This
keeps both: every arm starts from the same loss, and compile mode's losses are at most eager's distance
from float32 plus bf16's tolerance. Liger is off in every run (no patches to revert between them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ligerkit.compile.layers import reset_compiled
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["model.config.num_hidden_layers=6", "data.seq_len=1024", "train.global_batch_size=4",
         "train.micro_batch_size=4", "train.steps=4", "train.run.progress=false", "train.lora={rank: 16, alpha: 32}",
         "model.liger_kernel.enabled=false"]


def losses(tmp_path: Path, name: str, *more: str) -> list[float]:
    engine = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml",
                         [*SMALL, *more, f"train.run.output_dir={tmp_path / name}"])
    try:
        return [s.loss for s in Trainer(engine).train(torch.device("cuda")).steps]
    finally:
        reset_compiled()


@pytest.mark.gpu
def test_compile_with_lora_is_no_further_from_float32_than_eager(tmp_path):
    truth = losses(tmp_path, "float32", "train.compile=off", "model.dtype=float32")
    eager = losses(tmp_path, "eager", "train.compile=off")
    compiled = losses(tmp_path, "compile_fused", "train.compile=ops", "train.loss.path=fused")

    def gap(run: list[float]) -> float:
        return max(abs(a - b) for a, b in zip(run, truth, strict=True))

    print(f"largest loss gap to float32: eager {gap(eager):.4f}, compile_fused {gap(compiled):.4f}")
    assert abs(eager[0] - compiled[0]) <= 1e-2 and abs(eager[0] - truth[0]) <= 1e-2  # the same start
    assert gap(compiled) <= gap(eager) + 1e-2
