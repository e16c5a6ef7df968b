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

from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.train.recipe.custom_model import CustomModelEngine
from recipes.vendored_llm.model.modeling_vendored_llama import VendoredLlamaConfig, VendoredLlamaForCausalLM

MODELING = "recipes.vendored_llm.model.modeling_vendored_llama"
# Standard RMSNorm (pre-norm layers: the in-place backward is safe), SwiGLU MLP, standard rope.
PATCHES = {
    "rms_norm": LigerPatch(MODELING, "LlamaRMSNorm", LigerRMSNorm),
    "swiglu": LigerPatch(MODELING, "LlamaMLP", LigerSwiGLUMLP),
    "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
}


class VendoredLlamaEngine(CustomModelEngine):
    """Custom route pointed at the vendored modeling module (the model is built from ``VendoredLlamaConfig``)."""

    config_class = VendoredLlamaConfig
    model_class = VendoredLlamaForCausalLM
    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """The vendored module's own symbols (the official llama route cannot reach them), then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.custom_liger(PATCHES, self.model_config()))
        return self.build_model(device)
