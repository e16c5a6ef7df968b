"""GPU: LoRA and activation checkpointing with Liger's real kernels: whole-model gradient parity (every
trainable tensor, the adapters included) and training through the fused loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ligerkit.proof.recipe_grads import LIGER_ON, recipe_grad_parity

ROOT = Path(__file__).resolve().parents[2]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
MODES = {"lora": ["train.lora={rank: 8, alpha: 16}"], "recompute": ["train.activation_checkpointing=true"],
         "both": ["train.lora={rank: 8, alpha: 16}", "train.activation_checkpointing=true"]}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES, ids=list(MODES))
@pytest.mark.parametrize("loss", ["standard", "fused"])
def test_liger_with_lora_and_recompute_keeps_every_trainable_gradient(mode, loss):
    patched = (*LIGER_ON, f"train.loss.path={loss}")
    result = recipe_grad_parity(QWEN3_CPU, [*MODES[mode], "data.seq_len=256"], torch.device("cuda"),
                                patched_overrides=patched)
    assert result.passed, result.summary()
    if "lora" in mode or mode == "both":
        assert all(".lora_" in t.name for t in result.tensors) and len(result.tensors) == 28


@pytest.mark.gpu
def test_the_trainer_trains_lora_with_liger_the_fused_loss_and_recompute(tmp_path):
    from ligerkit.train import Trainer, load_engine

    engine = load_engine(QWEN3_CPU, [*MODES["both"], "model.liger_kernel.enabled=true", "train.loss.path=fused",
                                     "train.steps=4", "train.run.progress=false", f"train.run.output_dir={tmp_path / 'run'}"])
    result = Trainer(engine).train(torch.device("cuda"))
    assert all(torch.isfinite(torch.tensor(s.loss)) for s in result.steps)
    assert result.steps[-1].loss < result.steps[0].loss
