"""Several GPUs: one process per GPU under ``torchrun``, PyTorch FSDP2 (``fully_shard``).

The loss stays globally token-normalized: the count of valid tokens is summed over every
micro-batch of the optimizer step and all-reduced over ranks before any backward.
"""

from __future__ import annotations

import atexit
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerkit.environment import accelerator


@dataclass(frozen=True)
class DistEnv:
    """Rank layout from torchrun's environment (a single process when absent)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> DistEnv:
        """Read ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``."""
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def main(self) -> bool:
        """Rank 0 (logs, progress bar, files)."""
        return self.rank == 0


def init(env: DistEnv, device: torch.device) -> None:
    """Start the process group (NCCL on CUDA, gloo on CPU) when running under torchrun."""
    if env.distributed and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        atexit.register(gc.collect)  # after a failure too: see shutdown


def all_reduce_sum(value: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum a tensor over ranks (identity on one process)."""
    if env.distributed:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def shard(model: torch.nn.Module, unit_classes: tuple[str, ...]) -> torch.nn.Module:
    """FSDP2: shard every module whose class name is in ``unit_classes``, then the root."""
    from torch.distributed.fsdp import fully_shard

    for module in list(model.modules()):
        if type(module).__name__ in unit_classes:
            fully_shard(module)
    fully_shard(model)
    return model


def shutdown(env: DistEnv, barrier: bool = True) -> None:
    """Tear the process group down; after a clean run, wait for every rank first.

    Without the barrier a rank that finishes first can tear gloo down under another (abort at
    exit). After a failure there is no barrier: the other ranks may never reach it.

    A sharded model is a web of reference cycles that outlives the run until the garbage collector
    runs; left to the interpreter's own shutdown, freeing it there can abort the process
    ("terminate called without an active exception") after a run that succeeded. So it is
    collected here, while the group is alive, and once more at exit (``init`` registers it) for
    what a failure's traceback kept.
    """
    if env.distributed and dist.is_initialized():
        gc.collect()
        if barrier:
            dist.barrier()
        dist.destroy_process_group()


def agree_max(value: float, env: DistEnv, device: torch.device) -> float:
    """The largest ``value`` over ranks (every rank gets it): ranks agree on when to stop and save."""
    if not env.distributed:
        return value
    tensor = torch.tensor(float(value), device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def from_main(value: object, env: DistEnv) -> object:
    """Rank 0's ``value`` on every rank (a run folder's path, say)."""
    if not env.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def pick_device(env: DistEnv) -> torch.device:
    """The local accelerator for this rank, else the CPU."""
    kind = accelerator()
    return torch.device(kind, env.local_rank) if kind in ("cuda", "npu") else torch.device("cpu")


def use_deterministic_algorithms() -> None:
    """Make a run repeatable bit for bit: PyTorch's deterministic kernels (flash attention's backward
    included) and a fixed cuBLAS workspace; an op with no deterministic kernel then raises. The Liger
    kernels the recipes use reduce without atomics in liger-kernel 0.8.5."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
