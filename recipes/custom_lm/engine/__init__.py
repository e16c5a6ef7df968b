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
from ligerkit.train import RecipeEngine
from ligerkit.train.checks import build_config
from ligerkit.train.models import resolve_dtype
from recipes.custom_lm.model.modeling_custom_lm import CustomLMConfig, CustomLMForCausalLM

MODELING = "recipes.custom_lm.model.modeling_custom_lm"
# Gemma norm (out of place: the sandwich norms add their output straight to the residual), GeGLU,
# standard rope.
PATCHES = {
    "rms_norm": LigerPatch(MODELING, "CustomRMSNorm", LigerRMSNormForGemma2),
    "geglu": LigerPatch(MODELING, "CustomMLP", LigerGEGLUMLP),
    "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
}


class CustomLMEngine(RecipeEngine):
    """Custom route only: ``model.source: custom``."""

    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """The recipe's own map, probed against the config it builds, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.custom_liger(PATCHES, self.model_config()))
        return self.build_model(device)

    def forward_hidden(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's final hidden states, before ``lm_head`` (fused loss path)."""
        return model.model(batch["input_ids"], attention_mask=batch.get("attention_mask"))

    def model_config(self) -> CustomLMConfig:
        """``model.config`` as the recipe's own config class (every key checked)."""
        return build_config(CustomLMConfig, self.config.model.config)

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Build on ``device`` from ``model.config``."""
        with torch.device(device):
            model = CustomLMForCausalLM(self.model_config())
        return model.to(resolve_dtype(self.config.model.dtype, device))
