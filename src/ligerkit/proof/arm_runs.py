"""Arm runs: one training run of a recipe config in its own process, and what smoke and bench share.

Liger's kernels are process-global patches, so every arm (Liger off, Liger on, compiled, ...) is a
fresh ``ligerkit train --json`` process (``torchrun`` for several GPUs) from the same seed and data.
The runner is a parameter of smoke and bench, so their logic is tested with fake runs on a CPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ligerkit.environment import accelerator
from ligerkit.errors import ArmFailedError, LigerKitError, LigerNeedsAcceleratorError
from ligerkit.train.recipe.loading import config_of

NO_GPU_EXIT = 3
Runner = Callable[..., dict[str, Any]]


def resolve_config(target: str | Path) -> Path:
    """A config path, or a recipe folder (its ``configs/gpu.yaml``)."""
    path = config_of(target, gpu=True)
    if not path.is_file():
        raise LigerKitError(f"{target}: give a recipe folder (with configs/gpu.yaml) or a config file")
    return path


def require_accelerator(what: str) -> None:
    """Raise :class:`~ligerkit.errors.LigerNeedsAcceleratorError` where Liger's kernels cannot run."""
    if accelerator() is None:
        raise LigerNeedsAcceleratorError(
            f"no CUDA GPU or NPU here: `ligerkit {what}` measures Liger's kernels, which only run on one. "
            "Run it on a GPU machine; on this one, `ligerkit check` checks the wiring."
        )


def default_runner() -> Runner:
    """The real runner: ``ligerkit train --json`` in a fresh process (``torchrun`` when nproc > 1)."""
    return run_arm


def run_arm(config: str | Path, overrides: list[str], nproc: int = 1, env: dict[str, str] | None = None,
            timeout: float = 1800, prelude: str | None = None, resume: str | None = None) -> dict[str, Any]:
    """Train ``config`` in a fresh process (``torchrun`` when ``nproc > 1``); return its JSON.

    ``prelude`` is Python run in that process before the trainer starts (one process only): a
    benchmark applies Liger's own helper there, to compare it with the kit under the same trainer.
    ``resume`` continues the run in that folder. A run that stops on purpose (``train.run.stop_after_steps``)
    exits non-zero and raises :class:`ArmFailedError` like any failure. The arm shares the card with this
    process, so this process's cached CUDA blocks go back to it first (:func:`give_back_cuda_cache`).
    """
    give_back_cuda_cache()
    train = ["-m", "ligerkit", "train", str(config), "--json"]
    for item in overrides:
        train += ["--set", item]
    if resume is not None:
        train += ["--resume", resume]
    if prelude is not None:
        if nproc > 1:
            raise LigerKitError("a prelude runs in one process; it cannot be combined with nproc > 1")
        train = ["-c", f"{prelude}\nimport sys\nfrom ligerkit.cli import main\n"
                 "sys.argv = ['ligerkit', *sys.argv[1:]]\nmain()", *train[2:]]
    if nproc > 1:
        torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
        cmd = torchrun + train
    else:
        cmd = [sys.executable, *train]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    if proc.returncode != 0:
        raise ArmFailedError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def give_back_cuda_cache() -> None:
    """Return the blocks this process freed but PyTorch's allocator still holds to the card (after a
    collection, for models caught in reference cycles); nothing where CUDA was never initialized. After
    ``ligerkit smoke``'s gradient check at the Qwen3-0.6B shape its process held 56.5 GiB of an 80 GB card,
    and the first arm's process ran out of memory beside it.

    cuBLAS's workspaces go too (made again at the next matrix product): the allocator hands one out per
    thread and stream at its first product there, cut from whatever block is free then. One made in a
    large backward's freed memory (the backward runs on its own thread) keeps that block's whole segment
    from the card, however much of it is free."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    import gc

    gc.collect()
    clear_cublas_workspaces()
    torch.cuda.empty_cache()


def clear_cublas_workspaces() -> None:
    """Wait for the card, then give cuBLAS's workspaces (every thread's and stream's) back to PyTorch's
    allocator; each is made again at the next matrix product there. Needs CUDA initialized; nothing on a
    build without CUDA."""
    import torch

    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # CUDA builds only
    if clear is not None:
        clear()


def summarize(run: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Losses, grad norms, and median throughput / memory / MFU after ``warmup`` steps."""
    steps = run["steps"]
    timed = steps[warmup:] or steps
    mfu = [s["mfu"] for s in timed if s["mfu"] is not None]
    peak = [s["peak_mem_gib"] for s in steps if s["peak_mem_gib"] is not None]
    return {
        "losses": [s["loss"] for s in steps],
        "grad_norms": [s["grad_norm"] for s in steps],
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in timed),
        "step_time_s": statistics.median(s["step_time_s"] for s in timed) if "step_time_s" in timed[0] else None,
        "tokens_per_s_per_device": statistics.median(s["tokens_per_s_per_device"] for s in timed),
        "peak_mem_gib": max(peak) if peak else None,
        "mfu": statistics.median(mfu) if mfu else None,
        "swaps": len(run["report"]["patched"]) if run.get("report") else 0,
    }


def loss_gap(a: list[float], b: list[float]) -> float:
    """Largest per-step absolute loss difference."""
    if len(a) != len(b):
        raise ValueError(f"runs have {len(a)} and {len(b)} steps")
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def compare_liger(config: str | Path, steps: int, tolerance: float, warmup: int = 3,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Liger off vs on for one config: per-step loss gap, speed and memory ratios."""
    base = [f"train.steps={steps}", "train.run.progress=false"]
    off = summarize(run_arm(config, [*base, "model.liger_kernel.enabled=false"], env=env), warmup)
    on = summarize(run_arm(config, [*base, "model.liger_kernel.enabled=true"], env=env), warmup)
    gap = loss_gap(off["losses"], on["losses"])
    return {
        "config": str(config), "steps": steps, "tolerance": tolerance, "off": off, "on": on,
        "max_loss_gap": gap, "loss_parity": gap <= tolerance,
        "speedup": on["tokens_per_s"] / off["tokens_per_s"],
        "memory_ratio": (on["peak_mem_gib"] / off["peak_mem_gib"]) if off["peak_mem_gib"] else None,
    }
