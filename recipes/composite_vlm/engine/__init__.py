"""Composite VLM engine: official Qwen3 for the LLM, a small custom map for the novel encoder.

The LLM is transformers' shared Qwen3, so the official route reaches it with Liger's full Qwen3
kernel set; the vision encoder is this recipe's own code, so only its norm and MLP are mapped.
The projector (Linear-GELU-Linear) has nothing Liger replaces and is left alone. One kit, one
aggregated report.
"""

from __future__ import annotations

import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
from transformers import Qwen3Config

from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.train import RecipeEngine
from ligerkit.train.config import ConfigError
from ligerkit.train.config.checks import build_config
from ligerkit.train.data.batches import multimodal_batch
from ligerkit.train.models import resolve_dtype
from recipes.composite_vlm.data import make_batch
from recipes.composite_vlm.model.modeling_composite import CompositeVLM, CompositeVLMConfig
from recipes.composite_vlm.model.modeling_vision import VisionConfig

VISION = "recipes.composite_vlm.model.modeling_vision"
# The encoder's own symbols: its norm and its gated MLP.
VISION_PATCHES = {
    "rms_norm": LigerPatch(VISION, "VisionRMSNorm", LigerRMSNorm),
    "swiglu": LigerPatch(VISION, "VisionMLP", LigerSwiGLUMLP),
}


class CompositeVLMEngine(RecipeEngine):
    """Qwen3 (official) + custom vision encoder (custom map), one kit."""

    liger_kit: LigerKernelKit
    _composite: CompositeVLMConfig | None = None

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """Official Qwen3 for the LLM, the custom map for the encoder, then the model."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.official_liger("qwen3"))
            vision = self.custom_liger(VISION_PATCHES, self.model_config().vision)
            if vision["custom_patches"]:  # model.liger_kernel.modules may turn every encoder entry off
                self.liger_kit.apply(**vision)
        return self.build_model(device)

    def model_config(self) -> CompositeVLMConfig:
        """``model.config`` as ``{vision: {...}, text: {...}}``, every key checked (built once)."""
        if self._composite is None:
            cfg = self.config.model.config
            unknown = sorted(set(cfg) - {"vision", "text"})
            if unknown or not {"vision", "text"} <= set(cfg):
                raise ConfigError(f"model.config needs exactly the keys vision and text (got {sorted(cfg)})")
            self._composite = CompositeVLMConfig(vision=build_config(VisionConfig, cfg["vision"], "model.config.vision"),
                                                 text=build_config(Qwen3Config, cfg["text"], "model.config.text"))
        return self._composite

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Build on ``device`` (classes resolved through the patched modules)."""
        with torch.device(device):
            model = CompositeVLM(self.model_config())
        return model.to(resolve_dtype(self.config.model.dtype, device))

    def forward_hidden(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The LLM's final hidden states over image + text positions (the fused loss)."""
        return model.hidden_states(**{k: v for k, v in batch.items() if k != "labels"})

    def make_batch(self, start: int, size: int, vocab_size: int) -> dict[str, torch.Tensor]:
        """Image + text samples ``start..start+size-1``, deterministic per index."""
        return multimodal_batch(make_batch, self.model_config(), self.config.data, self.config.seed, start, size,
                                self.config.model.dtype)
