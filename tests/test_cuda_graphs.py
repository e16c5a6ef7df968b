"""``train.cuda_graphs``: the compiled layers replay as CUDA graphs (torch.compile's reduce-overhead
mode). On the CPU: the key's rules, the refusals, and that the option reaches torch.compile and the
step marker. Its speed and its equal losses are the GPU's to show (tests/gpu/test_cuda_graphs_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.errors import InvalidOptionError
from ligerkit.train import load_engine, set_up_model
from ligerkit.train.compile import compile_layers
from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.step import StepModule

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
ON = ["train.cuda_graphs=true", "train.compile=ops"]


@pytest.mark.parametrize("lines, words", [
    (["train.cuda_graphs=true"], "set train.compile: ops"),
    ([*ON, "train.activation_checkpointing=true"], "turn one of them off"),
])
def test_the_key_needs_compile_and_refuses_recompute(lines, words):
    with pytest.raises(ConfigError, match=words):
        load_recipe_config(QWEN3_CPU, lines)


def test_off_cuda_the_set_up_refuses_before_anything_is_built(monkeypatch):
    engine = load_engine(QWEN3_CPU, ON)
    built = []
    monkeypatch.setattr(engine, "prepare_model", lambda device: built.append(device))
    with pytest.raises(InvalidOptionError, match="train.cuda_graphs=false; nothing was built"):
        set_up_model(engine, torch.device("cpu"))
    assert built == [] and engine.model is None
    assert set_up_model(load_engine(QWEN3_CPU, ON), torch.device("meta")) is not None  # `check` plans on meta


@pytest.mark.parametrize("cuda_graphs, mode", [(True, {"mode": "reduce-overhead"}), (False, {})])
def test_the_option_reaches_torch_compile(monkeypatch, cuda_graphs, mode):
    calls = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: calls.append((type(self).__name__, kw)))
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    assert compile_layers(model, ["Linear"], cuda_graphs=cuda_graphs) == ["0", "1"]
    assert calls == [("Linear", {"fullgraph": False, **mode})] * 2


def test_each_micro_batch_starts_a_new_cuda_graph_step(monkeypatch):
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    engine = load_engine(QWEN3_CPU, ["model.dtype=float32", "data.seq_len=16"])
    model = set_up_model(engine, torch.device("cpu"))
    batch = engine.make_batch(0, 1, model.config.vocab_size)
    StepModule(engine, model, engine.loss)(batch, 1.0)
    assert marks == []
    StepModule(engine, model, engine.loss, cuda_graphs=True)(batch, 1.0)
    assert marks == [1]
