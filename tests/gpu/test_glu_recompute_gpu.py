"""GPU: ``train.memory.recompute_glu_product`` with Liger's own SwiGLU, and ``train.memory.recompute_norm_output``
with Liger's own RMSNorm and rotary: the same loss and gradients as keeping the outputs, and their
bytes no longer kept by the forward (full fine-tune and LoRA).

One micro-batch of the qwen3 recipe (q and k normalized per head, then rotated in place by Liger's
rotary) at a width where the outputs are large enough to see, run three times on one model: kept,
recomputed, kept again (each run a new step module, so each first forward checks every note bit for
bit). Every gradient of the recomputed run is at least as close to the first as the second kept run
is (both zero where the kernels are deterministic: then the recompute is equal bit for bit), and the
forward keeps at least 90% of what the notes stand for less.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import GPU_SHAPE, RECIPE_SETS, RECIPES, requested_bytes

ROOT = Path(__file__).resolve().parents[2]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SHAPE = GPU_SHAPE


def _kept_and_recomputed(lora: bool, kept: tuple[bool, bool], lean: tuple[bool, bool], config: Path = QWEN3_CPU,
                         sets: list[str] | None = None):  # noqa: ANN202
    """Three runs of one micro-batch, with the step module's (glu, norm) keys ``kept``, ``lean``, ``kept``:
    each run's loss, gradients and bytes the forward left allocated, and the model's config and tokens.
    ``sets`` replaces the qwen3 shape and fused loss the first tests train with."""
    from ligerkit.train import Trainer, load_engine, set_up_model
    from ligerkit.train.step import StepModule, device_batch

    sets = [*(sets if sets is not None else [*SHAPE, "train.loss.path=fused"]), "model.liger_kernel.enabled=true",
            "train.run.progress=false", *(["train.lora={rank: 8, alpha: 16}"] if lora else [])]
    engine = load_engine(config, sets)
    device = torch.device("cuda")
    try:
        model = set_up_model(engine, device)
        vocab = model.get_output_embeddings().weight.shape[0]
        first = Trainer(engine).micro_batches(0, vocab)[0]
        batch = device_batch(first, device, engine.config.train.drop_right_padding_mask)
        runs = []
        for keys in (kept, lean, kept):
            module = StepModule(engine, model, engine.loss, False, *keys)
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            before = requested_bytes()
            loss = module(batch, 1.0)
            torch.cuda.synchronize()
            left = requested_bytes() - before
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            runs.append((loss.detach(), grads, left))
            del loss
    finally:
        engine.liger_kit.revert()
    (loss, grads, _), (lean_loss, lean_grads, _), (loss_again, again, _) = runs
    assert grads.keys() == lean_grads.keys() and grads
    assert (lean_loss - loss).abs() <= (loss_again - loss).abs()
    for name, grad in grads.items():
        spread = (again[name].float() - grad.float()).abs().max()
        assert (lean_grads[name].float() - grad.float()).abs().max() <= spread, name
    return runs[0][2] - runs[1][2], model.config, batch["input_ids"].numel()


@pytest.mark.gpu
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_liger_swiglu_product_recomputed_changes_no_gradient_and_is_not_kept(lora):
    saved, config, tokens = _kept_and_recomputed(lora, kept=(False, False), lean=(True, False))
    product = config.num_hidden_layers * tokens * config.intermediate_size * 2  # bf16
    assert saved >= 0.9 * product, (saved, product)


@pytest.mark.gpu
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_liger_norm_outputs_and_rotary_recomputed_change_no_gradient_and_are_not_kept(lora):
    # beside the product's key, as the 4B table trains
    saved, config, tokens = _kept_and_recomputed(lora, kept=(True, False), lean=(True, True))
    # per layer: two layer norms' outputs (hidden wide) and the rotated q and k (heads + kv heads wide)
    per_token = 2 * config.hidden_size + (config.num_attention_heads + config.num_key_value_heads) * config.head_dim
    expected = config.num_hidden_layers * tokens * per_token * 2  # bf16
    assert saved >= 0.9 * expected, (saved, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_s_norm_outputs_recompute_changes_no_gradient(recipe):
    # each recipe's tiny model with Liger's kernels: its first forward finds norm outputs to recompute
    # (or raises) and checks each bit for bit; the gradients are those of keeping them
    _kept_and_recomputed(False, kept=(False, False), lean=(False, True),
                         config=ROOT / "recipes" / recipe / "configs" / "cpu.yaml",
                         sets=["model.dtype=bfloat16", *RECIPE_SETS])
