"""Small test helpers shared by several test files."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch


class GradCapture:
    """A stand-in optimizer: records every parameter's gradient at ``step()``, then zeroes them."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.grads: dict[str, torch.Tensor] = {}

    def step(self) -> None:
        self.grads = {n: p.grad.clone() for n, p in self.model.named_parameters()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


def torchrun_train(config: Path, sets: Sequence[str], cwd: Path, port: int, nproc: int = 2,
                   resume: Path | None = None, json_out: bool = False) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node NPROC -m ligerkit train CONFIG --set ...`` on the CPU (gloo), one
    thread per process, from ``cwd``; ``resume`` continues that run folder, ``json_out`` adds ``--json``."""
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), f"--nproc-per-node={nproc}", f"--master-port={port}", "-m", "ligerkit", "train", str(config)]
    cmd += ["--json"] if json_out else []
    for item in sets:
        cmd += ["--set", item]
    cmd += ["--resume", str(resume)] if resume is not None else []
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
