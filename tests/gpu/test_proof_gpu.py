"""GPU: `ligerkit smoke` passes on a recipe and `ligerkit bench` measures Liger faster than eager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ligerkit.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_smoke_passes_on_the_qwen3_recipe(tmp_path):
    result = CliRunner().invoke(app, ["smoke", str(ROOT / "recipes" / "qwen3"), "--steps", "8", "--out",
                                      str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    assert (tmp_path / "smoke.png").is_file()


@pytest.mark.gpu
def test_bench_measures_liger_faster_than_eager(tmp_path):
    result = CliRunner().invoke(app, ["bench", str(ROOT / "recipes" / "qwen3"), "--arms", "eager,liger",
                                      "--steps", "10", "--warmup", "3", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["arms"]["liger"]["tokens_per_s_vs_eager"] > 1.0


@pytest.mark.gpu
def test_the_engine_uses_fused_adamw_on_cuda():
    from ligerkit.train import Trainer, set_up_model
    from ligerkit.train.recipe.loading import load_engine

    engine = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml", ["model.liger_kernel.enabled=false"])
    model = set_up_model(engine, torch.device("cuda"))
    assert Trainer(engine).optimizer(model).defaults["fused"] is True
    off = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml",
                      ["model.liger_kernel.enabled=false", "train.optim.fused_adamw=false"])
    assert not Trainer(off).optimizer(model).defaults["fused"]


@pytest.mark.gpu
def test_deterministic_training_repeats_bit_for_bit():
    from ligerkit.train import Trainer
    from ligerkit.train.recipe.loading import load_engine

    runs = []
    for _ in range(2):
        engine = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml",
                             ["train.steps=4", "train.run.progress=false", "train.deterministic=true",
                              "model.liger_kernel.enabled=true", "train.loss.path=fused"])
        runs.append([(s.loss, s.grad_norm) for s in Trainer(engine).train(torch.device("cuda")).steps])
    assert runs[0] == runs[1]
    assert not torch.are_deterministic_algorithms_enabled()
