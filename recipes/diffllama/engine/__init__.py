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

from ligerkit import LigerPatch
from ligerkit.engine import Engine
from ligerkit.engine.model_kit import transformers_config

MODELING = "transformers.models.diffllama.modeling_diffllama"


class DiffLlamaEngine(Engine):
    """Custom route on a transformers family: no official helper, the suggested map instead."""

    def official_family(self) -> str | None:
        """Liger's registry has no ``diffllama``: the custom map is the whole wiring."""
        return None

    def custom_patches(self) -> dict[str, LigerPatch]:
        """``ligerkit suggest``'s verified map for this family."""
        return {
            "swiglu": LigerPatch(MODELING, "DiffLlamaMLP", LigerSwiGLUMLP),
            "rope": LigerPatch(MODELING, "apply_rotary_pos_emb", liger_rotary_pos_emb),
            "rms_norm": LigerPatch(MODELING, "DiffLlamaRMSNorm", LigerRMSNorm),
        }

    def probe_config(self) -> object:
        """The recipe's own DiffLlama config: the probe builds the mapped modules from it."""
        return transformers_config(self.config.model)
