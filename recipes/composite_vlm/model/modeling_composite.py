"""Composite VLM: the custom vision encoder here + a projector + transformers' Qwen3 LLM.

This is the recipe's mixed model: one part written in this repo (vision
encoder, projector), one part stock transformers (``Qwen3ForCausalLM``). The
image features are projected to the LLM width and prepended to the text
embeddings, so logits cover ``num_patches + T`` positions. The LLM class is
looked up on ``modeling_qwen3`` at construction time, so module-level patches
of transformers' Qwen3 apply to it just as patches of ``modeling_vision``
apply to the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import transformers
from torch import nn
from transformers.models.qwen3 import modeling_qwen3

from ligerkit.hf import SMALL_DIMS
from recipes.composite_vlm.model.modeling_vision import VisionConfig, VisionEncoder


class Projector(nn.Module):
    """Vision width -> text width: ``Linear -> GELU -> Linear``."""

    def __init__(self, vision_hidden: int, text_hidden: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(vision_hidden, text_hidden)
        self.act = nn.GELU()
        self.linear_2 = nn.Linear(text_hidden, text_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


@dataclass
class CompositeVLMConfig:
    """A :class:`VisionConfig`, a ``Qwen3Config`` and the number of image positions."""

    vision: VisionConfig
    text: transformers.Qwen3Config
    image_token_count: int | None = field(default=None)

    def __post_init__(self) -> None:
        if self.image_token_count is None:
            self.image_token_count = self.vision.num_patches
        if self.image_token_count != self.vision.num_patches:
            raise ValueError(
                f"image_token_count={self.image_token_count} != vision num_patches={self.vision.num_patches}"
            )


def tiny_composite_vlm_config(**text_overrides: Any) -> CompositeVLMConfig:
    """CPU-sized config: 32x32 images in 8x8 patches (16 image positions), a 2-layer Qwen3."""
    text: dict[str, Any] = {**SMALL_DIMS, "vocab_size": 512, "max_position_embeddings": 512, "pad_token_id": 0,
                            "tie_word_embeddings": False, **text_overrides}
    vision = VisionConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
    )
    return CompositeVLMConfig(vision=vision, text=transformers.Qwen3Config(**text))


class CompositeVLM(nn.Module):
    """Vision encoder + projector whose outputs are prepended to a Qwen3 LLM's input embeddings."""

    _no_split_modules: ClassVar[list[str]] = ["Qwen3DecoderLayer", "VisionEncoderLayer"]

    def __init__(self, config: CompositeVLMConfig) -> None:
        super().__init__()
        self.config = config
        self.vision = VisionEncoder(config.vision)
        self.projector = Projector(config.vision.hidden_size, config.text.hidden_size)
        self.llm = modeling_qwen3.Qwen3ForCausalLM(config.text)

    def get_input_embeddings(self) -> nn.Module:
        """The LLM's token embedding."""
        return self.llm.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        """The LLM's ``lm_head``."""
        return self.llm.get_output_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **ignored: Any,
    ) -> torch.Tensor:
        """Logits of shape (B, num_patches + T, vocab); extra keys (e.g. labels) are ignored."""
        inputs_embeds, attention_mask = self._inputs(input_ids, pixel_values, attention_mask)
        return self.llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask).logits

    def hidden_states(
        self, input_ids: torch.Tensor, pixel_values: torch.Tensor, attention_mask: torch.Tensor | None = None,
        **ignored: Any,
    ) -> torch.Tensor:
        """The LLM's final hidden states (B, num_patches + T, hidden), before its ``lm_head``."""
        inputs_embeds, attention_mask = self._inputs(input_ids, pixel_values, attention_mask)
        return self.llm.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask).last_hidden_state

    def _inputs(
        self, input_ids: torch.Tensor, pixel_values: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Projected image features prepended to the token embeddings; the mask extended to match."""
        text_embeds = self.get_input_embeddings()(input_ids)
        image_embeds = self.projector(self.vision(pixel_values)).to(text_embeds.dtype)
        inputs_embeds = torch.cat([image_embeds, text_embeds], dim=1)
        if attention_mask is not None:
            image_mask = attention_mask.new_ones(
                attention_mask.shape[0], image_embeds.shape[1]
            )
            attention_mask = torch.cat([image_mask, attention_mask], dim=1)
        return inputs_embeds, attention_mask
