"""``benchmarks/memory_gpu.py --saved``: the forward's kept tensors, each storage once, by producer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("memory_gpu", ROOT / "benchmarks" / "memory_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_each_kept_storage_is_counted_once_by_its_producer_and_parameters_are_left_out():
    recorder_cls = _script().SavedRecorder
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    recorder = recorder_cls({p.untyped_storage().data_ptr() for p in model.parameters()})
    with recorder.hooks():
        # the tanh output is saved twice (by tanh's backward and by the second linear, as a view): one entry
        out = model(x.view(2, 2, 8)).sum()
    table = recorder.table()
    assert table["TanhBackward0 torch.float32 width 16"] == {"bytes": 4 * 16 * 4, "gib": 0.0, "tensors": 1}
    assert sum(v["tensors"] for v in table.values()) == 2  # the input and the tanh output, no weight
    assert not any("AccumulateGrad" in k for k in table)
    out.backward()  # the hooks returned every tensor as it was
    assert all(p.grad is not None for p in model.parameters())
