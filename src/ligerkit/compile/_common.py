"""What the compile-mode operators share: their namespace and small helpers."""

from __future__ import annotations

import torch
from torch import Tensor

_LIB = "ligerkit"
_CASTING = ("llama", "gemma", "none")


def _rows(x: Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def _casting(mode: str) -> str:
    if mode not in _CASTING:
        raise ValueError(f"casting_mode {mode!r} is not one of {', '.join(_CASTING)}")
    return mode


def _empty_dw(x: Tensor) -> Tensor:
    """The stand-in for a weight gradient that is not computed (an operator cannot return None)."""
    return x.new_empty((0,), dtype=torch.float32)


