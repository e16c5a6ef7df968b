"""GPU: ``train.activation_checkpointing: offload`` with Liger's kernels: the loss and gradients of
checkpointing alone, and the layers' kept inputs no longer on the device after the forward; and
``model.liger_kernel.tiled_mlp`` (Liger's tiled MLP): the gradients of Liger's MLP.

One micro-batch of each recipe's model with Liger on (the qwen3 shape below also with LoRA and the
fused loss), run three times on separately built, identically seeded models: checkpointed, offloaded,
checkpointed again. Every gradient of the offloaded run is at least as close to the first as the second
checkpointed run is (zero where the kernels are deterministic: then offload is equal bit for bit), and
at the qwen3 shape the forward leaves at least 90% of the layers' inputs less on the device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import GPU_SHAPE, RECIPE_SETS, RECIPES, requested_bytes

ROOT = Path(__file__).resolve().parents[2]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SHAPE = GPU_SHAPE


def _one_micro_batch(config: Path, sets: list[str], form: str, tiled: bool = False):  # noqa: ANN202
    """Loss, gradients, the bytes the forward left on the device, and the engine's offload (if any)."""
    from ligerkit.proof.arm_grads import recipe_loss
    from ligerkit.train import load_engine, set_up_model

    engine = load_engine(config, [*sets, "model.liger_kernel.enabled=true", "train.run.progress=false",
                                  f"train.activation_checkpointing={form}", f"model.liger_kernel.tiled_mlp={tiled}"])
    device = torch.device("cuda")
    try:
        model = set_up_model(engine, device)
        model.train()
        torch.cuda.synchronize()
        before = requested_bytes()
        loss = recipe_loss(engine, device, 0, engine.config.train.micro_batch_size)(model)
        torch.cuda.synchronize()
        left = requested_bytes() - before
        loss.backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
        return loss.detach().float(), grads, left, engine.offload, model.config
    finally:
        engine.liger_kit.revert()


def _compare(config: Path, sets: list[str], offload_sets: tuple[str, ...] = ()):  # noqa: ANN202
    (loss, grads, kept, _, model_config), (moved_loss, moved, lean, offload, _), (again_loss, again, _, _, _) = [
        _one_micro_batch(config, [*sets, *(offload_sets if form == "offload" else ())], form)
        for form in ("true", "offload", "true")]
    assert grads.keys() == moved.keys() and grads
    assert (moved_loss - loss).abs() <= (again_loss - loss).abs()
    for name, grad in grads.items():
        assert (moved[name] - grad).abs().max() <= (again[name] - grad).abs().max(), name
    assert offload is not None and offload.packed > 0
    return kept - lean, offload, model_config


@pytest.mark.gpu
@pytest.mark.parametrize("sets", [["train.loss.path=fused"], ["train.loss.path=fused", "train.lora={rank: 8, alpha: 16}"]],
                         ids=["fused", "lora_fused"])
def test_offload_changes_no_gradient_and_keeps_the_layer_inputs_off_the_device(sets):
    saved, offload, config = _compare(QWEN3_CPU, [*SHAPE, *sets])
    inputs = config.num_hidden_layers * 2 * 1024 * config.hidden_size * 2  # layers x tokens x width, bf16
    assert offload.packed == config.num_hidden_layers and offload.bytes_offloaded == inputs
    assert saved >= 0.9 * inputs, (saved, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_trains_the_same_gradients_with_offload(recipe):
    _compare(ROOT / "recipes" / recipe / "configs" / "cpu.yaml", ["model.dtype=bfloat16", *RECIPE_SETS])


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["qwen3", "composite_vlm"])  # the recipes whose official route swaps the MLP
def test_the_tiled_mlp_trains_the_gradients_of_liger_s_mlp(recipe):
    config = ROOT / "recipes" / recipe / "configs" / "cpu.yaml"
    sets = [*SHAPE, "train.loss.path=fused"] if recipe == "qwen3" else ["model.dtype=bfloat16", *RECIPE_SETS]
    (loss, grads, _, _, _), (tiled_loss, tiled, _, _, _), (again_loss, again, _, _, _) = [
        _one_micro_batch(config, sets, "false", tiled) for tiled in (False, True, False)]
    assert grads.keys() == tiled.keys() and grads
    # tiles sum the weight gradients in another order: within twice the spread of two untiled runs, or 1e-2
    assert (tiled_loss - loss).abs() <= max(2 * (again_loss - loss).abs(), 1e-3 * loss.abs())
    for name, grad in grads.items():
        bound = max(2 * float((again[name] - grad).abs().max()), 1e-2 * float(grad.abs().max()))
        assert float((tiled[name] - grad).abs().max()) <= bound, name


@pytest.mark.gpu
def test_past_the_budget_the_inputs_stay_on_the_device_and_no_gradient_changes():
    from ligerkit.train import load_engine

    sets = [*SHAPE, "train.loss.path=fused"]
    config = load_engine(QWEN3_CPU, sets).model_config()
    one = 2 * 1024 * config.hidden_size * 2  # one layer's input: 2 x 1024 tokens, bf16
    half = config.num_hidden_layers // 2
    budget = f"train.memory.offload_budget_gib={(half * one + one // 2) / 2**30!r}"
    saved, offload, _ = _compare(QWEN3_CPU, sets, (budget,))
    assert (offload.packed, offload.kept) == (half, config.num_hidden_layers - half)
    assert saved >= 0.9 * half * one, (saved, half * one)


@pytest.mark.gpu
def test_a_large_input_comes_back_from_its_pinned_pieces_bit_for_bit():
    from ligerkit.train.memory.offload import HostOffload, SPLIT_FROM, host_pieces

    offload = HostOffload()
    t = torch.randn((SPLIT_FROM + SPLIT_FROM // 2 + 4096) // 2, dtype=torch.bfloat16, device="cuda").reshape(-1, 2048)
    with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
        x = t.detach().requires_grad_(True)
        y = x.sin()  # sin saves its input
    assert len(host_pieces(t.numel() * 2)) == 3 and all(p.is_pinned() for p in offload._last().host)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, t.cos(), rtol=0, atol=0)
