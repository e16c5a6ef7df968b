"""The gradient-parity rule every numerical check shares: relative error against a float32 truth.

A bfloat16 computation is never exact, so a replacement is judged against what rounding alone
costs: ``r = ||x - x_fp32|| / ||x_fp32||`` for the replacement and for the unpatched source in the
same dtype, and the replacement passes when ``r <= factor * r(eager) + slack``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GradTolerance:
    """A patched tensor passes when ``r <= factor * r(eager) + slack``."""

    factor: float = 2.0
    slack: float = 0.01

    def __post_init__(self) -> None:
        if not (self.factor >= 1.0 and self.slack >= 0.0):
            raise ValueError(f"a gradient tolerance needs factor >= 1 and slack >= 0, got {self.factor}, {self.slack}")

    def bound(self, eager: float) -> float:
        """The largest relative error a patched tensor may have, given eager's."""
        return self.factor * eager + self.slack


def relative_error(value: torch.Tensor, truth: torch.Tensor) -> float:
    """``||value - truth|| / ||truth||`` in float64 (the absolute norm when the truth is zero)."""
    diff = float(torch.linalg.vector_norm(value.double() - truth.double()))
    scale = float(torch.linalg.vector_norm(truth.double()))
    return diff / scale if scale > 0 else diff
