"""What the compile-mode operators share: their namespace and small helpers."""

from __future__ import annotations

import torch
from torch import Tensor

LIB = "ligerkit"
_CASTING = ("llama", "gemma", "none")


def row_count(x: Tensor) -> int:
    """How many rows of its last dimension ``x`` holds (what a row-wise kernel launches over)."""
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def checked_casting(mode: str) -> str:
    """``mode``, one of Liger's RMSNorm casting modes; ``ValueError`` for any other."""
    if mode not in _CASTING:
        raise ValueError(f"casting_mode {mode!r} is not one of {', '.join(_CASTING)}")
    return mode


def empty_dw(x: Tensor) -> Tensor:
    """The stand-in for a weight gradient that is not computed (an operator cannot return None)."""
    return x.new_empty((0,), dtype=torch.float32)


