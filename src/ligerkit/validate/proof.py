"""Shared parts of ``smoke`` and ``bench``: which config, whether a GPU is here, how arms run.

Every arm is its own process (Liger's kernels are process-global patches). The runner is a
parameter so the harness logic can be tested with fake runs on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ligerkit.environment import accelerator
from ligerkit.errors import LigerKitError
from ligerkit.validate.compare import run_arm

NO_GPU_EXIT = 3
Runner = Callable[..., dict[str, Any]]


class NoAcceleratorError(LigerKitError):
    """smoke / bench need Liger's kernels, which need a CUDA GPU or an NPU."""


def resolve_config(target: str | Path) -> Path:
    """A config path, or a recipe folder (its ``configs/gpu.yaml``)."""
    path = Path(target)
    if path.is_dir():
        path = path / "configs" / "gpu.yaml"
    if not path.is_file():
        raise LigerKitError(f"{target}: give a recipe folder (with configs/gpu.yaml) or a config file")
    return path


def require_accelerator(what: str) -> None:
    """Raise :class:`NoAcceleratorError` where Liger's kernels cannot run."""
    if accelerator() is None:
        raise NoAcceleratorError(
            f"no CUDA GPU or NPU here: `ligerkit {what}` measures Liger's kernels, which only run on one. "
            "Run it on a GPU machine; on this one, `ligerkit check` verifies the wiring."
        )


def default_runner() -> Runner:
    """The real runner: ``ligerkit train --json`` in a fresh process (``torchrun`` when nproc > 1)."""
    return run_arm
