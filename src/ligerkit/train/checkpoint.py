"""Checkpoints: model and optimizer through PyTorch Distributed Checkpoint, and what else a step needs.

A checkpoint is ``checkpoints/step_NNNNNNN/`` in the run folder: the model's and the optimizer's
state (sharded under FSDP2, so every rank writes and reads its own shards in parallel, and a run may
resume on another number of ranks), ``meta.json`` (the number of steps done: with the data a pure
function of ``(seed, sample index)`` and the learning rate a function of the step, that is the data
position and the scheduler state) and one ``rng_rank<r>.pt`` per rank. It is written as
``step_NNNNNNN.partial`` and renamed only when every rank has finished, so a save killed half-way is
never taken for the latest one.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.train.distributed import DistEnv

FOLDER = "checkpoints"


class CheckpointError(LigerKitError):
    """No usable checkpoint where one was expected."""


def _barrier(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    """Every random stream this process uses."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def complete(run: Path) -> list[Path]:
    """The run's complete checkpoints, oldest first (a ``.partial`` folder never counts)."""
    folder = run / FOLDER
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / "meta.json").is_file()
             and not p.name.endswith(".partial")]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest(run: Path) -> Path | None:
    """The newest complete checkpoint of a run, or ``None``."""
    found = complete(run)
    return found[-1] if found else None


def save(run: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv,
         keep: int) -> Path:
    """Write the checkpoint after ``step`` steps on every rank; keep the newest ``keep``; return its folder."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    began = time.perf_counter()
    final = run / FOLDER / f"step_{step:07d}"
    partial = final.with_name(final.name + ".partial")
    if env.main:
        shutil.rmtree(partial, ignore_errors=True)  # a save that was killed before
        partial.mkdir(parents=True)
    _barrier(env)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(partial))
    torch.save(rng_state(), partial / f"rng_rank{env.rank}.pt")
    _barrier(env)
    if env.main:
        seconds = round(time.perf_counter() - began, 3)
        (partial / "meta.json").write_text(json.dumps({"step": step, "world_size": env.world_size,
                                                       "save_seconds": seconds}))
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        for old in complete(run)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(env)
    return final


def load(checkpoint: Path, model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv) -> int:
    """Load a checkpoint into ``model`` and ``optimizer`` (resharded to this world size); return the
    steps it holds. The random streams come back when the world size is the one that saved it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    meta = json.loads((checkpoint / "meta.json").read_text())
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(checkpoint))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rng = checkpoint / f"rng_rank{env.rank}.pt"
    if meta["world_size"] == env.world_size and rng.is_file():
        set_rng_state(torch.load(rng, weights_only=False))
    return int(meta["step"])
