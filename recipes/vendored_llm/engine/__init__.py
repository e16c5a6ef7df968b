"""Vendored Llama engine: a copy of a Llama-style backbone that lives inside this recipe.

transformers' ``modeling_llama`` is not the module this model is built from, so the official
``llama`` route cannot reach it (``ligerkit check`` would find the original classes in the
model). The map points at the vendored module instead.
"""

from __future__ import annotations

import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

from ligerkit import LigerPatch
from ligerkit.engine import Engine
from ligerkit.engine.model_kit import resolve_dtype
from recipes.vendored_llm.model.modeling_vendored_llama import VendoredLlamaConfig, VendoredLlamaForCausalLM

MODELING = "recipes.vendored_llm.model.modeling_vendored_llama"


class VendoredLlamaEngine(Engine):
    """Custom route pointed at the vendored modeling module."""

    def custom_patches(self) -> dict[str, LigerPatch]:
        """Standard RMSNorm, SwiGLU MLP, standard rope: the vendored module's own symbols."""
        return {
            "rms_norm": LigerPatch(MODELING, "LlamaRMSNorm", LigerRMSNorm),
            "swiglu": LigerPatch(MODELING, "LlamaMLP", LigerSwiGLUMLP),
            "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
        }

    def probe_config(self) -> object:
        """What the kit's probe builds the mapped source modules from."""
        return VendoredLlamaConfig(**self.config.model.config)

    def forward_hidden(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's final hidden states, before ``lm_head`` (fused loss path)."""
        return model.model(batch["input_ids"], attention_mask=batch.get("attention_mask"))

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Build on ``device`` from ``model.config``."""
        with torch.device(device):
            model = VendoredLlamaForCausalLM(VendoredLlamaConfig(**self.config.model.config))
        return model.to(resolve_dtype(self.config.model.dtype, device))
