"""Scaling over GPUs (``ligerkit.proof.scaling``): the modes' batch lines, the efficiencies from fake
runs, the refusals, and one real run of every mode on two gloo processes (CPU)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ligerkit.errors import LigerKitError
from ligerkit.proof.arm_runs import run_arm
from ligerkit.proof.scaling import mode_overrides, scaling, to_markdown

ROOT = Path(__file__).resolve().parents[1]
GPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"  # global batch 4, micro-batch 4
CPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"  # global batch 8, micro-batch 4


def _value(lines, key):
    return int([line for line in lines if line.startswith(key + "=")][-1].partition("=")[2])


def test_weak_scaling_keeps_each_gpus_micro_batches_and_strong_scaling_splits_the_global_batch():
    modes = mode_overrides(global_batch=4, micro_batch=4, nproc=2)
    assert modes["one"] == ["train.global_batch_size=4", "train.micro_batch_size=4"]
    assert modes["weak"] == ["train.global_batch_size=8", "train.micro_batch_size=4"]
    # two GPUs share 4 sequences: 2 each, so the micro-batch shrinks to 2
    assert modes["strong"] == ["train.global_batch_size=4", "train.micro_batch_size=2"]
    assert mode_overrides(16, 2, 4)["strong"] == ["train.global_batch_size=16", "train.micro_batch_size=2"]


@pytest.mark.parametrize("global_batch, micro, nproc, message", [
    (4, 4, 1, "at least 2 GPUs"), (6, 2, 4, "divides"), (12, 4, 2, "micro-batches of 4"),
])
def test_scaling_refuses_splits_that_cannot_work(global_batch, micro, nproc, message):
    with pytest.raises(LigerKitError, match=message):
        mode_overrides(global_batch, micro, nproc)


def _fake_run(tokens_per_s, per_device, peak=10.0):
    step = {"loss": 1.0, "grad_norm": 1.0, "tokens_per_s": tokens_per_s, "tokens_per_s_per_device": per_device,
            "peak_mem_gib": peak, "mfu": None, "step_time_s": 1.0}
    return {"steps": [step, step], "report": None}


def test_efficiencies_come_from_the_runs_each_against_the_one_gpu_run_of_its_round():
    calls = []
    # one GPU: 100 tokens/s; weak on 2: 180 in all, 90 per GPU; strong on 2: 150 in all
    speeds = {"one": (100.0, 100.0), "weak": (180.0, 90.0), "strong": (150.0, 75.0)}

    def runner(config, overrides, nproc=1):
        mode = "one" if nproc == 1 else ("weak" if _value(overrides, "train.global_batch_size") == 8 else "strong")
        calls.append((mode, nproc, _value(overrides, "train.micro_batch_size")))
        return _fake_run(*speeds[mode])

    done = []
    result = scaling(GPU_CONFIG, ["eager", "liger"], 2, steps=2, warmup=1, overrides=[], runner=runner,
                     on_run=lambda arm, mode: done.append((arm, mode)))
    assert calls == [("one", 1, 4), ("weak", 2, 4), ("strong", 2, 2)] * 2
    assert done == [("eager", "one"), ("eager", "weak"), ("eager", "strong"),
                    ("liger", "one"), ("liger", "weak"), ("liger", "strong")]
    liger = result["arms"]["liger"]
    assert liger["weak_efficiency"] == pytest.approx(0.9)
    assert liger["strong_speedup"] == pytest.approx(1.5) and liger["strong_efficiency"] == pytest.approx(0.75)
    table = to_markdown(result)
    assert "| liger | 100 | 90 | 90.0% | 150 | 1.50x | 75.0% |" in table


def test_scaling_names_a_bad_override_before_any_run():
    def runner(*args, **kwargs):
        raise AssertionError("no run may start")

    with pytest.raises(Exception, match="no_such_key"):
        scaling(GPU_CONFIG, ["eager"], 2, steps=2, warmup=1, overrides=["train.no_such_key=1"], runner=runner)
    with pytest.raises(LigerKitError, match="warmup"):
        scaling(GPU_CONFIG, ["eager"], 2, steps=2, warmup=2, overrides=[], runner=runner)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_mode_trains_for_real_on_two_gloo_processes():
    def runner(config, overrides, nproc=1):
        return run_arm(config, overrides, nproc=nproc,
                       env={"PET_MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}, timeout=600)

    result = scaling(CPU_CONFIG, ["eager"], 2, steps=2, warmup=1, overrides=[], runner=runner)
    eager = result["arms"]["eager"]
    assert result["modes"]["weak"] == ["train.global_batch_size=16", "train.micro_batch_size=4"]
    assert all(eager[mode]["tokens_per_s"] > 0 for mode in ("one", "weak", "strong"))
    assert eager["weak_efficiency"] > 0 and eager["strong_speedup"] > 0
