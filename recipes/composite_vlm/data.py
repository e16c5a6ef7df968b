"""Synthetic, deterministic batches for the composite VLM recipe.

The composite model prepends ``num_patches`` image positions to the text, so
its labels must be ``num_patches + T`` long with -100 over the image part; this
module builds such batches from a ``torch.Generator`` (random pixels, a
repeated random 16-token motif as learnable text, right padding in at least
one row) so tests and training smoke runs need no tokenizer or data set.
"""

from __future__ import annotations

import torch

from ligerkit.naming import IGNORE_INDEX
from recipes.composite_vlm.model.modeling_composite import CompositeVLMConfig

MOTIF_LEN = 16


def make_batch(
    config: CompositeVLMConfig,
    batch_size: int,
    seq_len: int,
    generator: torch.Generator | None = None,
    motif_seed: int | None = None,
) -> dict[str, torch.Tensor]:
    """Build ``pixel_values`` (B, C, H, W), ``input_ids``/``attention_mask`` (B, T), ``labels`` (B, P + T).

    Labels line up with the logits positions (unshifted): -100 over the P image
    positions and over padding, the token id elsewhere. The last row always has
    trailing padding (``pad_token_id``, mask 0). With ``motif_seed`` the text motif is the
    same for every batch (learnable across steps); otherwise it comes from ``generator``.
    """
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    if seq_len < 4:
        raise ValueError("seq_len must be at least 4")
    vision, text = config.vision, config.text
    pad_id = text.pad_token_id if text.pad_token_id is not None else 0
    allowed = torch.tensor([i for i in range(text.vocab_size) if i != pad_id])
    motif_gen = generator if motif_seed is None else torch.Generator().manual_seed(motif_seed)
    motif = allowed[torch.randint(0, len(allowed), (MOTIF_LEN,), generator=motif_gen)]
    phases = torch.randint(0, MOTIF_LEN, (batch_size,), generator=generator)
    max_pad = max(1, seq_len // 4)
    pad_lens = torch.randint(0, max_pad + 1, (batch_size,), generator=generator)
    pad_lens[-1] = pad_lens[-1].clamp(min=1)

    positions = torch.arange(seq_len)
    input_ids = motif[(positions[None, :] + phases[:, None]) % MOTIF_LEN]
    attention_mask = (positions[None, :] < (seq_len - pad_lens)[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, pad_id)

    text_labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
    image_labels = torch.full(
        (batch_size, config.image_token_count), IGNORE_INDEX, dtype=torch.long
    )
    labels = torch.cat([image_labels, text_labels], dim=1)

    pixel_values = torch.randn(
        batch_size,
        vision.num_channels,
        vision.image_size,
        vision.image_size,
        generator=generator,
    )
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "pixel_values": pixel_values,
    }
