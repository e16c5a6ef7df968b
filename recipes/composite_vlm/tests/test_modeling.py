"""CPU checks for the composite VLM: shapes, gradients, batch layout, and the Liger swap.

The swap test only builds on the meta device: Liger's Triton kernels do not
run on CPU, but construction-time class swapping and state-dict compatibility
can be proven without running them.
"""

from __future__ import annotations

import torch
from ligerkit.loss import token_loss_sum, valid_tokens
from liger_kernel.transformers.rms_norm import LigerRMSNorm
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

from recipes.composite_vlm.data import IGNORE_INDEX, make_batch
from recipes.composite_vlm.model import modeling_vision
from recipes.composite_vlm.model.modeling_composite import (
    CompositeVLM,
    tiny_composite_vlm_config,
)

B, T = 3, 24


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    return make_batch(
        tiny_composite_vlm_config(), B, T, generator=torch.Generator().manual_seed(seed)
    )


def test_forward_backward_shapes() -> None:
    torch.manual_seed(0)
    config = tiny_composite_vlm_config()
    model = CompositeVLM(config)
    batch = _batch()
    logits = model(**batch)  # labels are ignored by forward
    P = config.image_token_count
    assert logits.shape == (B, P + T, config.text.vocab_size)
    labels = batch["labels"]
    assert labels.shape == logits.shape[:2]
    loss = token_loss_sum(logits, labels) / valid_tokens(labels)  # the trainer's own loss
    loss.backward()
    assert torch.isfinite(loss)
    for module in (
        model.vision.patch_embed,
        model.projector.linear_1,
        model.llm.lm_head,
    ):
        assert module.weight.grad is not None and module.weight.grad.abs().sum() > 0
    assert model.get_output_embeddings() is model.llm.lm_head
    assert model.get_input_embeddings() is model.llm.model.embed_tokens


def test_batch_layout_and_determinism() -> None:
    config = tiny_composite_vlm_config()
    a, b = _batch(5), _batch(5)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a["input_ids"], _batch(6)["input_ids"])
    P, pad_id = config.image_token_count, config.text.pad_token_id
    ids, mask, labels = a["input_ids"], a["attention_mask"], a["labels"]
    assert a["pixel_values"].shape == (
        B,
        3,
        config.vision.image_size,
        config.vision.image_size,
    )
    assert (labels[:, :P] == IGNORE_INDEX).all()
    assert torch.equal(labels[:, P:], ids.masked_fill(mask == 0, IGNORE_INDEX))
    assert (mask == 0).any(1).any()
    assert (ids[mask == 0] == pad_id).all() and (ids[mask == 1] != pad_id).all()
    lengths = mask.sum(1)
    assert torch.equal(
        mask, (torch.arange(T)[None] < lengths[:, None]).long()
    )  # trailing padding


def _meta_build() -> CompositeVLM:
    with torch.device("meta"):
        return CompositeVLM(tiny_composite_vlm_config())


def test_liger_swap_by_rebinding_module_globals() -> None:
    reference = _meta_build()
    original_norm, original_mlp = (
        modeling_vision.VisionRMSNorm,
        modeling_vision.VisionMLP,
    )
    try:
        modeling_vision.VisionRMSNorm = LigerRMSNorm
        modeling_vision.VisionMLP = LigerSwiGLUMLP
        patched = _meta_build()
    finally:
        modeling_vision.VisionRMSNorm, modeling_vision.VisionMLP = (
            original_norm,
            original_mlp,
        )

    assert type(patched.vision.post_norm) is LigerRMSNorm
    for layer in patched.vision.layers:
        assert type(layer.norm1) is LigerRMSNorm and type(layer.norm2) is LigerRMSNorm
        assert type(layer.mlp) is LigerSwiGLUMLP
    assert type(reference.vision.layers[0].mlp) is original_mlp
    assert not any(
        isinstance(m, (LigerRMSNorm, LigerSwiGLUMLP)) for m in patched.llm.modules()
    )
    assert (
        patched.vision.post_norm.variance_epsilon
        == reference.vision.post_norm.variance_epsilon
    )

    ref_sd, new_sd = reference.state_dict(), patched.state_dict()
    assert list(ref_sd) == list(new_sd)
    assert {k: v.shape for k, v in ref_sd.items()} == {
        k: v.shape for k, v in new_sd.items()
    }
    assert type(_meta_build().vision.post_norm) is original_norm  # restored
