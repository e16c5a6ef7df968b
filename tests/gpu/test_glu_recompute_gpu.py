"""GPU: ``train.recompute_glu_product`` with Liger's own SwiGLU: the same loss and gradients as keeping
the product, and the product's bytes no longer kept by the forward (full fine-tune and LoRA).

One micro-batch of the qwen3 recipe at a width where the product is large enough to see, run three
times on one model: kept, recomputed, kept again. Every gradient of the recomputed run is at least as
close to the first as the second kept run is (both zero where the kernels are deterministic: then the
recompute is equal bit for bit), and the forward keeps at least 90% of one product per layer less.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SHAPE = ["model.config={hidden_size: 512, intermediate_size: 2048, num_hidden_layers: 4, num_attention_heads: 8, "
         "num_key_value_heads: 4, head_dim: 64}", "data.seq_len=1024", "train.micro_batch_size=2",
         "train.global_batch_size=2", "model.dtype=bfloat16"]


@pytest.mark.gpu
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_liger_swiglu_product_recomputed_changes_no_gradient_and_is_not_kept(lora):
    from ligerkit.train import Trainer, load_engine, set_up_model
    from ligerkit.train.step import StepModule, device_batch

    sets = [*SHAPE, "model.liger_kernel.enabled=true", "train.loss.path=fused", "train.progress=false",
            *(["train.lora={rank: 8, alpha: 16}"] if lora else [])]
    engine = load_engine(QWEN3_CPU, sets)
    device = torch.device("cuda")
    try:
        model = set_up_model(engine, device)
        vocab = model.get_output_embeddings().weight.shape[0]
        first = Trainer(engine).micro_batches(0, vocab)[0]
        batch = device_batch(first, device, engine.config.train.drop_right_padding_mask)
        runs = []
        for recompute in (False, True, False):
            module = StepModule(engine, model, engine.loss, False, recompute)
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            loss = module(batch, 1.0)
            torch.cuda.synchronize()
            kept = torch.cuda.memory_allocated() - before
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            runs.append((loss.detach(), grads, kept))
            del loss
    finally:
        engine.liger_kit.revert()
    (loss, grads, kept), (lean_loss, lean_grads, lean_kept), (loss_again, again, _) = runs
    assert grads.keys() == lean_grads.keys() and grads
    assert (lean_loss - loss).abs() <= (loss_again - loss).abs()
    for name, grad in grads.items():
        spread = (again[name].float() - grad.float()).abs().max()
        assert (lean_grads[name].float() - grad.float()).abs().max() <= spread, name
    config = model.config
    product = config.num_hidden_layers * batch["input_ids"].numel() * config.intermediate_size * 2  # bf16
    assert kept - lean_kept >= 0.9 * product, (kept, lean_kept, product)
