"""The optimizer update (``ligerkit.train.update``): with a fused AdamW the update is queued before the
step's one read and skipped on the device when the step is not finite; the result is the same to the bit
as reading first, and a skipped step leaves weights, states and step counts as they were. The CPU has
PyTorch's fused AdamW too (with the same ``found_inf`` flag), so all of it runs here; one test runs it
on two gloo processes with FSDP2-sharded parameters."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.train import update as U
from ligerkit.train.step import total_norm
from ligerkit.train.stopping import NonFiniteError


def _model_and_optimizer(fused: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, fused=fused or None)


def _backward(model: nn.Module, seed: int, poison: bool = False) -> torch.Tensor:
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(seed))
    loss = model(x).pow(2).sum() * 10.0  # large enough that max_norm=0.5 clips
    (loss * float("nan") if poison else loss).backward()
    return loss.detach() * (float("nan") if poison else 1.0)


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        out += [v.clone() for _, v in sorted(optimizer.state[p].items())]
    return out


def test_only_fused_optimizers_skip_on_the_device():
    model = nn.Linear(2, 2)
    assert U.skips_on_device(torch.optim.AdamW(model.parameters(), fused=True))
    assert U.skips_on_device(torch.optim.Adam(model.parameters(), fused=True))
    assert not U.skips_on_device(torch.optim.AdamW(model.parameters(), foreach=True))
    assert not U.skips_on_device(torch.optim.SGD(model.parameters(), lr=0.1))


def test_the_update_on_the_device_equals_reading_first_to_the_bit(monkeypatch):
    runs = {}
    for path in ("device", "host"):
        if path == "host":
            monkeypatch.setattr(U, "skips_on_device", lambda optimizer: False)
        model, optimizer = _model_and_optimizer()
        values = []
        for seed in range(3):
            loss = _backward(model, seed)
            values.append(U.update(model, optimizer, loss, total_norm(model), max_norm=0.5, step=seed))
        runs[path] = (values, _state(model, optimizer))
    assert runs["device"][0] == runs["host"][0]
    assert runs["device"][0][0][1] > 0.5  # the clip was active
    assert all(torch.equal(a, b) for a, b in zip(runs["device"][1], runs["host"][1], strict=True))


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_step_updates_nothing_and_says_so(fused):
    model, optimizer = _model_and_optimizer(fused)
    U.update(model, optimizer, _backward(model, 0), total_norm(model), max_norm=0.5)  # states exist now
    before = _state(model, optimizer)
    with pytest.raises(NonFiniteError, match=r"step 2: the loss is nan .*weights were not updated.*train.optim.grad_clip"):
        U.update(model, optimizer, _backward(model, 1, poison=True), total_norm(model), max_norm=0.5, step=1)
    assert all(torch.equal(a, b) for a, b in zip(before, _state(model, optimizer), strict=True))
    assert all(p.grad is None for p in model.parameters())
    assert not hasattr(optimizer, "found_inf")  # the flag does not outlive the step
    U.update(model, optimizer, _backward(model, 2), total_norm(model), max_norm=0.5)  # and training goes on
    assert not all(torch.equal(a, b) for a, b in zip(before, _state(model, optimizer), strict=True))


@pytest.mark.parametrize("fused, order", [(True, ["step", "read"]), (False, ["read", "step"])])
def test_the_read_waits_behind_the_update_only_where_the_device_can_skip_it(monkeypatch, fused, order):
    model, optimizer = _model_and_optimizer(fused)
    seen: list[str] = []
    real_read, real_step = U.on_host, optimizer.step
    monkeypatch.setattr(U, "on_host", lambda *a: (seen.append("read"), real_read(*a))[1])
    monkeypatch.setattr(optimizer, "step", lambda *a, **k: (seen.append("step"), real_step(*a, **k))[1])
    U.update(model, optimizer, _backward(model, 0), total_norm(model), max_norm=0.5)
    assert seen == order


def test_a_flag_left_by_a_failed_step_is_removed(monkeypatch):
    model, optimizer = _model_and_optimizer()
    loss = _backward(model, 0)

    def broken(*args, **kwargs):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(optimizer, "step", broken)
    with pytest.raises(RuntimeError, match="kernel failed"):
        U.update(model, optimizer, loss, total_norm(model), max_norm=0.5)
    assert not hasattr(optimizer, "found_inf")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_the_clip_is_torchs_to_the_bit(dtype, max_norm):
    twins = []
    for _ in range(2):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).to(dtype)
        model(torch.randn(5, 8, generator=torch.Generator().manual_seed(1), dtype=dtype)).pow(2).sum().mul(100).backward()
        twins.append(model)
    ours, torchs = twins
    norm = total_norm(ours)
    assert (float(norm) > max_norm) == (max_norm == 0.5)  # one case clips, the other leaves the gradients
    before = [p.grad.clone() for p in ours.parameters()]
    U.clip_to(ours, max_norm, norm)
    torch.nn.utils.clip_grads_with_norm_(list(torchs.parameters()), max_norm, total_norm(torchs))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), torchs.parameters(), strict=True))
    changed = any(not torch.equal(a, p.grad) for a, p in zip(before, ours.parameters(), strict=True))
    assert changed == (max_norm == 0.5)


SHARDED = textwrap.dedent('''
    import os, torch, torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from ligerkit.train import update as U
    from ligerkit.train.step import total_norm
    from ligerkit.train.stopping import NonFiniteError

    dist.init_process_group("gloo")
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(dist.get_rank()))
    def run(skip_on_device, poison_last):
        U.skips_on_device = (lambda o: True) if skip_on_device else (lambda o: False)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4))
        fully_shard(model[0]); fully_shard(model[2]); fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
        for step in range(3):
            loss = model(x).pow(2).sum() * (float("nan") if poison_last and step == 2 else 10.0)
            loss.backward()
            if poison_last and step == 2:
                before = [p.full_tensor().clone() for p in model.parameters()]
                try:
                    U.update(model, optimizer, loss.detach(), total_norm(model), max_norm=0.5, world_size=2, step=step)
                except NonFiniteError:
                    after = [p.full_tensor() for p in model.parameters()]
                    assert all(torch.equal(a, b) for a, b in zip(before, after)), "a skipped step moved weights"
                    return None
                raise AssertionError("no NonFiniteError")
            U.update(model, optimizer, loss.detach(), total_norm(model), max_norm=0.5, world_size=2, step=step)
        return [p.full_tensor().clone() for p in model.parameters()]
    device, host = run(True, False), run(False, False)
    assert all(torch.equal(a, b) for a, b in zip(device, host)), "the sharded update differs"
    run(True, True)
    print("sharded update ok", dist.get_rank(), flush=True)
    dist.barrier()  # a rank that tears gloo down first can abort the other at exit
    dist.destroy_process_group()
    # gloo's worker threads may still hold tensors that the interpreter's finalization frees (SIGABRT,
    # "terminate called without an active exception", seen under load after this point): leave before it
    os._exit(0)
''')


def test_the_update_skips_on_the_device_with_sharded_parameters_on_two_gloo_processes(tmp_path: Path):
    script = tmp_path / "sharded_update.py"
    script.write_text(SHARDED)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--nproc-per-node=2", f"--master-port={port}", str(script)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-3000:]
    assert proc.stdout.count("sharded update ok") == 2
