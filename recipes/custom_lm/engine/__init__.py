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

from ligerkit import LigerPatch
from ligerkit.engine import Engine
from ligerkit.engine.model_kit import resolve_dtype
from recipes.custom_lm.model.modeling_custom_lm import CustomLMConfig, CustomLMForCausalLM

MODELING = "recipes.custom_lm.model.modeling_custom_lm"


class CustomLMEngine(Engine):
    """Custom route only: ``model.source: custom``."""

    def custom_patches(self) -> dict[str, LigerPatch]:
        """Gemma norm (out-of-place: norms are back to back), GeGLU, standard rope."""
        return {
            "rms_norm": LigerPatch(MODELING, "CustomRMSNorm", LigerRMSNormForGemma2),
            "geglu": LigerPatch(MODELING, "CustomMLP", LigerGEGLUMLP),
            "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
        }

    def probe_config(self) -> object:
        """What the kit's probe builds the mapped source modules from."""
        return CustomLMConfig(**self.config.model.config)

    def forward_hidden(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's final hidden states, before ``lm_head`` (fused loss path)."""
        return model.model(batch["input_ids"], attention_mask=batch.get("attention_mask"))

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Build on ``device`` from ``model.config``."""
        with torch.device(device):
            model = CustomLMForCausalLM(CustomLMConfig(**self.config.model.config))
        return model.to(resolve_dtype(self.config.model.dtype, device))
