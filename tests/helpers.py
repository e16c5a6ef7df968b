"""Small test helpers shared by several test files."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch


GPU_SHAPE = ["model.config={hidden_size: 512, intermediate_size: 2048, num_hidden_layers: 4, num_attention_heads: 8, "
             "num_key_value_heads: 4, head_dim: 64}", "data.seq_len=1024", "train.micro_batch_size=2",
             "train.global_batch_size=2", "model.dtype=bfloat16"]
"""The qwen3 recipe's model at a width where what the forward keeps is large enough to see (GPU tests)."""
RECIPES = sorted(p.parent.name for p in Path(__file__).resolve().parents[1].glob("recipes/*/configs"))
"""Every shipped recipe (GPU tests that sweep them)."""
RECIPE_SETS = ["model.liger_kernel.fallback=custom"]
"""What GPU tests that sweep the recipes set: a family whose Liger helper fails on the installed versions
(the VL families on transformers >= 5.23) takes ligerkit's proven map; a working helper is used as it is."""


class GradCapture:
    """A stand-in optimizer: records every parameter's gradient at ``step()``, then zeroes them."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.grads: dict[str, torch.Tensor] = {}

    def step(self) -> None:
        self.grads = {n: p.grad.clone() for n, p in self.model.named_parameters()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


def requested_bytes() -> int:
    """The bytes this process's tensors on the current CUDA device take, as asked for: unlike
    ``torch.cuda.memory_allocated`` not the allocator's blocks. A cached block for a request of more than
    1 MiB is split only where more than 1 MiB would be left over, so such a tensor can hold up to 1 MiB more
    than it asked for, depending on what was cached before (two runs that keep the same tensors can read
    apart by that much a tensor)."""
    return torch.cuda.memory_stats()["requested_bytes.all.current"]


def torchrun_train(config: Path, sets: Sequence[str], cwd: Path, port: int, nproc: int = 2,
                   resume: Path | None = None, json_out: bool = False,
                   script: Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node NPROC -m ligerkit train CONFIG --set ...`` on the CPU (gloo), one
    thread per process, from ``cwd``; ``resume`` continues that run folder, ``json_out`` adds ``--json``;
    ``script`` runs in place of ``-m ligerkit`` (a script that calls ``ligerkit.cli.main``)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    entry = [str(script)] if script is not None else ["-m", "ligerkit"]
    cmd = [str(torchrun), f"--nproc-per-node={nproc}", f"--master-port={port}", *entry, "train", str(config)]
    cmd += ["--json"] if json_out else []
    for item in sets:
        cmd += ["--set", item]
    cmd += ["--resume", str(resume)] if resume is not None else []
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})



def helper_failure(family: str) -> str | None:
    """Why Liger's helper for ``family`` (a registry name) is known to fail on the installed stack
    (``ligerkit.environment.TESTED``: transformers 5.23 renamed the VL output classes liger-kernel 0.8.5 imports),
    else ``None`` (also for a family outside Liger's registry)."""
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    from ligerkit.environment import known_failure

    helper = MODEL_TYPE_TO_APPLY_LIGER_FN.get(family)
    return known_failure(helper.__name__) if helper is not None else None


def recipe_family(recipe: Path, config: str = "gpu.yaml") -> str:
    """The ``model.family`` a recipe's config names (its Liger family on the official route)."""
    import yaml

    return yaml.safe_load((recipe / "configs" / config).read_text())["model"]["family"]


@contextmanager
def failing_helper(family: str) -> Iterator[bool]:
    """Yields whether Liger's helper for ``family`` is known to fail here (:func:`helper_failure`); where it is,
    the block must stop at the clear ``HelperFailedError`` that names why, and the test ends there. The tests
    that use it need a working helper: until a fallback lands they prove only the error on such a stack."""
    import pytest

    from ligerkit.errors import HelperFailedError

    why = helper_failure(family)
    if why is None:
        yield False
        return
    with pytest.raises(HelperFailedError) as raised:
        yield True
    assert why in str(raised.value), str(raised.value)
