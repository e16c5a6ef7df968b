"""Custom LM engine: a monolithic decoder with no Liger helper, wired through its own map.

The decoder's norms are Gemma-style ((1 + w), computed in float32) and sit back to back
(sandwich norms), so the map uses Liger's out-of-place Gemma norm; its MLP is gated with
tanh-approximated GELU (GeGLU), and its rotary is the standard full ``rotate_half`` form.
"""

from __future__ import annotations

import torch
from liger_kernel.transformers.geglu import LigerGEGLUMLP
from liger_kernel.transformers.rms_norm import LigerRMSNormForGemma2
from liger_kernel.transformers.rope import liger_rotary_pos_emb

from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.train.recipe.custom_model import CustomModelEngine
from recipes.custom_lm.model.modeling_custom_lm import CustomLMConfig, CustomLMForCausalLM

MODELING = "recipes.custom_lm.model.modeling_custom_lm"
# Gemma norm (out of place: the sandwich norms add their output straight to the residual), GeGLU,
# standard rope.
PATCHES = {
    "rms_norm": LigerPatch(MODELING, "CustomRMSNorm", LigerRMSNormForGemma2),
    "geglu": LigerPatch(MODELING, "CustomMLP", LigerGEGLUMLP),
    "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
}


class CustomLMEngine(CustomModelEngine):
    """Custom route only: ``model.source: custom`` (the model is built from ``CustomLMConfig``)."""

    config_class = CustomLMConfig
    model_class = CustomLMForCausalLM
    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """The recipe's own map, probed against the config it builds, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.custom_liger(PATCHES, self.model_config()))
        return self.build_model(device)
