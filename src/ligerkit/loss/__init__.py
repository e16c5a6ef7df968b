"""The loss-compatibility path: fused linear cross entropy under the recipe's own normalization."""

from ligerkit.loss.fused import fused_linear_token_loss
from ligerkit.loss.wiring import FusedLossRefusedError, OutputHead, output_head

__all__ = ["FusedLossRefusedError", "OutputHead", "fused_linear_token_loss", "output_head"]
