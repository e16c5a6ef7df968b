"""The fused loss: fused linear cross entropy under the recipe's own normalization,
and the loss a run trains with, chosen once (``make_loss``)."""

from ligerkit.loss.choice import FusedLoss, LossPath, StandardLoss, make_loss, token_loss_sum, valid_tokens
from ligerkit.loss.fused import fused_linear_token_loss
from ligerkit.loss.wiring import FusedLossRefusedError, OutputHead, output_head

__all__ = ["FusedLoss", "FusedLossRefusedError", "LossPath", "OutputHead", "StandardLoss", "fused_linear_token_loss",
           "make_loss", "output_head", "token_loss_sum", "valid_tokens"]
