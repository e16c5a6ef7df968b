"""GPU: the trainer's update (``ligerkit.train.update``) on CUDA with bf16 gradients: the clip is
PyTorch's to the bit in a handful of launches instead of one per tensor, and the fused AdamW's update
queued before the read (skipped on the device when not finite) equals reading first, to the bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ligerkit.train import update as U
from ligerkit.train.step import total_norm
from ligerkit.train.stopping import NonFiniteError

LAYERS = 40  # 120 gradient tensors


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    layers = [m for _ in range(LAYERS) for m in (nn.Linear(256, 256), nn.LayerNorm(256))]
    return nn.Sequential(*layers).to(device="cuda", dtype=torch.bfloat16)


def _backward(model: nn.Module, seed: int, factor: float = 100.0) -> torch.Tensor:
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(seed))
    loss = model(x).float().pow(2).mean() * factor
    loss.backward()
    return loss.detach()


def _kernels(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


@pytest.mark.gpu
def test_the_clip_is_torchs_to_the_bit_in_few_launches():
    ours, torchs = _model(), _model()
    _backward(ours, 1), _backward(torchs, 1)
    norm = total_norm(ours)
    assert float(norm) > 0.5
    launches = _kernels(lambda: U.clip_to(ours, 0.5, norm))
    torch.nn.utils.clip_grads_with_norm_(list(torchs.parameters()), 0.5, total_norm(torchs))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), torchs.parameters(), strict=True))
    assert launches < 20, launches  # 120 tensors: per-tensor multiplies would be over 120


@pytest.mark.gpu
def test_the_fused_update_queued_before_the_read_equals_reading_first(monkeypatch):
    runs = {}
    for path in ("device", "host"):
        if path == "host":
            monkeypatch.setattr(U, "skips_on_device", lambda optimizer: False)
        model = _model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
        values = [U.update(model, optimizer, _backward(model, s), total_norm(model), max_norm=0.5, step=s)
                  for s in range(3)]
        runs[path] = values, [p.detach().clone() for p in model.parameters()]
    assert runs["device"][0] == runs["host"][0]
    assert all(torch.equal(a, b) for a, b in zip(runs["device"][1], runs["host"][1], strict=True))


@pytest.mark.gpu
def test_a_non_finite_step_is_skipped_on_the_device():
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    U.update(model, optimizer, _backward(model, 0), total_norm(model), max_norm=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    states = [v.clone() for p in model.parameters() for _, v in sorted(optimizer.state[p].items())]
    with pytest.raises(NonFiniteError, match="step 2"):
        U.update(model, optimizer, _backward(model, 1, float("inf")), total_norm(model), max_norm=0.5, step=1)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    after = [v for p in model.parameters() for _, v in sorted(optimizer.state[p].items())]
    assert all(torch.equal(a, b) for a, b in zip(states, after, strict=True))
