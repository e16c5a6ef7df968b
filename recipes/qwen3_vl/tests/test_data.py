"""Checks that the synthetic Qwen3-VL batch is what the real model accepts.

Runs transformers' ``Qwen3VLForConditionalGeneration`` on CPU in float32 with
the tiny config, so a broken placeholder count, grid or M-RoPE setting fails
here rather than on a GPU later.
"""

from __future__ import annotations

import torch
from ligerkit.loss import token_loss_sum, valid_tokens
import transformers

from recipes.qwen3_vl.data import IGNORE_INDEX, make_batch, tiny_qwen3_vl_config

B, T = 3, 40


def _batch(seed: int = 0, **kw) -> dict[str, torch.Tensor]:
    return make_batch(
        tiny_qwen3_vl_config(),
        B,
        T,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


def test_forward_backward_shapes() -> None:
    torch.manual_seed(0)
    config = tiny_qwen3_vl_config()
    model = transformers.Qwen3VLForConditionalGeneration(config).float()
    batch = _batch()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs).logits
    assert logits.shape == (B, T, config.text_config.vocab_size)
    assert torch.isfinite(logits).all()

    labels = batch["labels"]
    loss = token_loss_sum(logits, labels) / valid_tokens(labels)  # the trainer's own loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.model.visual.patch_embed.proj.weight.grad is not None
    assert model.lm_head.weight.grad.abs().sum() > 0


def test_same_seed_same_batch_other_seed_differs() -> None:
    a, b, c = _batch(7), _batch(7), _batch(8)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a["input_ids"], c["input_ids"])


def test_layout_labels_and_padding() -> None:
    config = tiny_qwen3_vl_config()
    grid = (4, 6)
    batch = _batch(3, image_size=grid)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    specials = torch.tensor(
        [
            config.image_token_id,
            config.vision_start_token_id,
            config.vision_end_token_id,
        ]
    )
    expected_ignored = (mask == 0) | torch.isin(ids, specials)
    assert torch.equal(labels == IGNORE_INDEX, expected_ignored)
    assert torch.equal(labels[~expected_ignored], ids[~expected_ignored])

    n_img = grid[0] * grid[1] // config.vision_config.spatial_merge_size**2
    assert ((ids == config.image_token_id).sum(1) == n_img).all()
    assert ((ids == config.vision_start_token_id).sum(1) == 1).all()
    assert ((ids == config.vision_end_token_id).sum(1) == 1).all()
    assert ((ids == config.video_token_id).sum() == 0).item()
    assert torch.equal(batch["mm_token_type_ids"].bool(), ids == config.image_token_id)

    pad_rows = (mask == 0).any(1)
    assert pad_rows.any()
    for row in range(B):  # padding is trailing and uses the pad id
        n_real = int(mask[row].sum())
        assert mask[row, :n_real].all() and not mask[row, n_real:].any()
        assert (ids[row, n_real:] == config.text_config.pad_token_id).all()
        assert not torch.isin(
            ids[row, :n_real][labels[row, :n_real] != IGNORE_INDEX], specials
        ).any()

    vis = config.vision_config
    assert torch.equal(batch["image_grid_thw"], torch.tensor([[1, *grid]] * B))
    patch_dim = vis.in_channels * vis.temporal_patch_size * vis.patch_size**2
    assert batch["pixel_values"].shape == (B * grid[0] * grid[1], patch_dim)
    assert batch["pixel_values"].dtype == torch.float32
