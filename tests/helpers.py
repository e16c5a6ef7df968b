"""Small test helpers shared by several test files."""

from __future__ import annotations

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
