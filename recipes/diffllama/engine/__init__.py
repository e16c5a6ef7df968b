"""DiffLlama recipe engine: a transformers family Liger has no helper for, wired through ``suggest``.

The map below is the one ``ligerkit suggest`` wrote for this family (pasted as printed):

    ligerkit suggest transformers.models.diffllama.modeling_diffllama --config transformers.DiffLlamaConfig

Every entry is probed by the kit against the config this recipe builds before anything is swapped;
the differential attention's ``groupnorm`` (a plain ``nn.RMSNorm`` without weight) is not a class of
this module, so nothing touches it.
"""

from __future__ import annotations

from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.rope import liger_rotary_pos_emb
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

import torch

from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.train import RecipeEngine

MODELING = "transformers.models.diffllama.modeling_diffllama"
# ``ligerkit suggest``'s matched map for this family (Liger's registry has no ``diffllama``).
PATCHES = {
    "swiglu": LigerPatch(MODELING, "DiffLlamaMLP", LigerSwiGLUMLP),
    "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
    "rms_norm": LigerPatch(MODELING, "DiffLlamaRMSNorm", LigerRMSNorm),
}


class DiffLlamaEngine(RecipeEngine):
    """Custom route on a transformers family: no official helper, the suggested map instead."""

    liger_kit: LigerKernelKit

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """The suggested map, probed against the recipe's own DiffLlama config, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.custom_liger(PATCHES, self.model_config()))
        return self.build_model(device)
