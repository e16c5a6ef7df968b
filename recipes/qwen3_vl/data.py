"""Synthetic, deterministic image+text batches for transformers' Qwen3-VL.

The Qwen3-VL recipe needs batches that look exactly like what the real
processor produces (placeholder tokens wrapped by vision start/end ids,
flattened patch rows in ``pixel_values``, ``image_grid_thw``, the
``mm_token_type_ids`` that M-RoPE needs, right padding) without a tokenizer,
an image processor or any download. The text is a repeated random motif, so a
tiny model can visibly lower its loss on it, and everything is drawn from a
caller-supplied ``torch.Generator`` so equal seeds give equal batches.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

from ligerkit.hf import SMALL_DIMS
from ligerkit.naming import IGNORE_INDEX

PAD_TOKEN_ID = 0
VISION_START_TOKEN_ID = 508
VISION_END_TOKEN_ID = 509
IMAGE_TOKEN_ID = 510
VIDEO_TOKEN_ID = 511
MOTIF_LEN = 16
PREFIX_LEN = 4  # text tokens before the image


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim // 2 rotary frequencies over (t, h, w) like Qwen3-VL's [24, 20, 20] of 64."""
    half = head_dim // 2
    hw = max(1, half * 5 // 16)
    return [half - 2 * hw, hw, hw]


def tiny_qwen3_vl_config(**text_overrides: Any) -> transformers.Qwen3VLConfig:
    """A CPU-sized ``Qwen3VLConfig``; keyword arguments override text-config fields.

    The vision tower's ``out_hidden_size`` follows the text ``hidden_size`` and the
    M-RoPE ``mrope_section`` follows ``head_dim`` unless ``rope_parameters`` is given.
    """
    text: dict[str, Any] = {**SMALL_DIMS, "vocab_size": 512, "hidden_act": "silu", "max_position_embeddings": 512,
                            "pad_token_id": PAD_TOKEN_ID, **text_overrides}
    if text["vocab_size"] <= VIDEO_TOKEN_ID:
        raise ValueError(
            f"vocab_size must exceed the special ids (max {VIDEO_TOKEN_ID})"
        )
    text.setdefault(
        "rope_parameters",
        {
            "rope_type": "default",
            "rope_theta": 500000.0,
            "mrope_section": _mrope_section(text["head_dim"]),
            "mrope_interleaved": True,
        },
    )
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "in_channels": 3,
        "patch_size": 8,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": text["hidden_size"],
        "num_position_embeddings": 64,  # an 8x8 learned grid, resampled per image
        "deepstack_visual_indexes": [0],
    }
    return transformers.Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_TOKEN_ID,
        video_token_id=VIDEO_TOKEN_ID,
        vision_start_token_id=VISION_START_TOKEN_ID,
        vision_end_token_id=VISION_END_TOKEN_ID,
        tie_word_embeddings=False,
    )


def _special_ids(config: transformers.Qwen3VLConfig) -> set[int]:
    ids = {
        config.image_token_id,
        config.video_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
    }
    pad = config.text_config.pad_token_id
    return ids | ({pad} if pad is not None else set())


def _draw_motif(
    config: transformers.Qwen3VLConfig, generator: torch.Generator
) -> torch.Tensor:
    """MOTIF_LEN ordinary token ids (no special id), drawn from the generator."""
    special = _special_ids(config)
    allowed = torch.tensor(
        [i for i in range(config.text_config.vocab_size) if i not in special]
    )
    pick = torch.randint(0, len(allowed), (MOTIF_LEN,), generator=generator)
    return allowed[pick]


def make_batch(
    config: transformers.Qwen3VLConfig,
    batch_size: int,
    seq_len: int,
    image_size: tuple[int, int] = (4, 4),
    generator: torch.Generator | None = None,
    motif_seed: int | None = None,
) -> dict[str, torch.Tensor]:
    """Build one right-padded batch with one image per sample.

    ``image_size`` is (grid_h, grid_w) in patches; both must be multiples of
    ``spatial_merge_size``. Row layout: PREFIX_LEN text tokens, vision_start,
    (grid_h * grid_w) / merge**2 image placeholders, vision_end, text, padding.
    Text follows one random 16-token motif repeated, each row starting at its
    own random phase. The last row always has at least one padding token.
    With ``motif_seed`` the motif is the same for every batch (learnable across
    steps by a small model); otherwise it is drawn from ``generator``.
    Returns input_ids, attention_mask, labels, mm_token_type_ids, pixel_values
    and image_grid_thw.
    """
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    vis = config.vision_config
    merge = vis.spatial_merge_size
    grid_h, grid_w = image_size
    if grid_h % merge or grid_w % merge:
        raise ValueError(
            f"image_size {image_size} must be multiples of spatial_merge_size={merge}"
        )
    n_image_tokens = grid_h * grid_w // merge**2
    fixed = PREFIX_LEN + n_image_tokens + 2  # prefix + placeholders + start/end
    max_pad = (seq_len - fixed - 1) // 4  # keep >= 1 text token after the image
    if max_pad < 1:
        raise ValueError(
            f"seq_len={seq_len} too short for {n_image_tokens} image tokens; need > {fixed + 4}"
        )

    pad_id = (
        config.text_config.pad_token_id
        if config.text_config.pad_token_id is not None
        else 0
    )
    motif_gen = generator if motif_seed is None else torch.Generator().manual_seed(motif_seed)
    motif = _draw_motif(config, motif_gen)
    phases = torch.randint(0, MOTIF_LEN, (batch_size,), generator=generator)
    pad_lens = torch.randint(0, max_pad + 1, (batch_size,), generator=generator)
    pad_lens[-1] = pad_lens[-1].clamp(min=1)

    input_ids = torch.full((batch_size, seq_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(batch_size, seq_len, dtype=torch.long)
    mm_token_type_ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    for b in range(batch_size):
        n_real = seq_len - int(pad_lens[b])
        n_text = n_real - fixed + PREFIX_LEN
        text = motif[(torch.arange(n_text) + phases[b]) % MOTIF_LEN]
        img = slice(PREFIX_LEN + 1, PREFIX_LEN + 1 + n_image_tokens)
        input_ids[b, :PREFIX_LEN] = text[:PREFIX_LEN]
        input_ids[b, PREFIX_LEN] = config.vision_start_token_id
        input_ids[b, img] = config.image_token_id
        input_ids[b, img.stop] = config.vision_end_token_id
        input_ids[b, img.stop + 1 : n_real] = text[PREFIX_LEN:]
        attention_mask[b, :n_real] = 1
        mm_token_type_ids[b, img] = 1

    ignore = (attention_mask == 0) | torch.isin(
        input_ids,
        torch.tensor(
            [
                config.image_token_id,
                config.vision_start_token_id,
                config.vision_end_token_id,
            ]
        ),
    )
    labels = input_ids.masked_fill(ignore, IGNORE_INDEX)

    patch_dim = vis.in_channels * vis.temporal_patch_size * vis.patch_size**2
    pixel_values = torch.randn(
        batch_size * grid_h * grid_w, patch_dim, generator=generator
    )
    image_grid_thw = torch.tensor([[1, grid_h, grid_w]] * batch_size, dtype=torch.long)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "mm_token_type_ids": mm_token_type_ids,
        "pixel_values": pixel_values,
        "image_grid_thw": image_grid_thw,
    }
