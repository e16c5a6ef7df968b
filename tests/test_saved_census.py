"""``ligerkit.proof.saved_census``: what a forward keeps for backward, by kind of module and by producer,
each storage once, passed on to the hooks below it, leaving training exactly as it is."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import Qwen3Config, Qwen3ForCausalLM

from ligerkit.proof.saved_census import CHECKPOINTED, IN_LAYERS, ON_CONTEXTS, OUTSIDE, SavedCensus, module_kind
from ligerkit.train.config.lora import LoraConfig
from ligerkit.train.memory.checkpointing import recompute_layers
from ligerkit.train.recipe.adapters import add_lora

HIDDEN, LAYERS, TOKENS = 32, 3, 24


def _qwen3() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, vocab_size=96, tie_word_embeddings=False,
                         attn_implementation="eager", use_cache=False)
    return Qwen3ForCausalLM(config).train()


def _ids() -> torch.Tensor:
    return torch.randint(0, 96, (1, TOKENS), generator=torch.Generator().manual_seed(1))


def _grads(model: nn.Module, census: bool) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    ids = _ids()
    if census:
        with SavedCensus(model):
            loss = model(input_ids=ids, labels=ids).loss
    else:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_each_kept_storage_is_counted_once_and_parameters_are_left_out():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    with SavedCensus(model) as census:
        # the tanh output is saved twice (by tanh's backward and by the second linear, as a view): one entry
        out = model(x.view(2, 2, 8)).sum()
    producers = census.table("producer")
    assert producers["TanhBackward0 torch.float32 width 16"] == {"bytes": 4 * 16 * 4, "gib": 0.0, "tensors": 1}
    assert sum(v["tensors"] for v in producers.values()) == 2  # the input and the tanh output, no weight
    assert census.kept_bytes == 4 * 8 * 4 + 4 * 16 * 4
    assert set(census.by_kind) == {IN_LAYERS}  # plain layers inside the top module
    out.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_the_census_leaves_loss_and_every_gradient_bit_equal():
    model = _qwen3()
    loss, grads = _grads(model, census=False)
    loss_c, grads_c = _grads(model, census=True)
    assert loss_c == loss and grads_c.keys() == grads.keys()
    assert all(torch.equal(grads[n], grads_c[n]) for n in grads)
    assert not model._forward_pre_hooks and not any(m._forward_hooks for m in model.modules())  # hooks gone


def test_kinds_of_a_decoder_model_and_checkpointed_layers_keep_only_their_inputs():
    model = _qwen3()
    ids = _ids()
    with SavedCensus(model) as plain:
        model(input_ids=ids, labels=ids).loss.sum()
    for kind in ("attention", "MLP", "norm", "output head", "embedding", OUTSIDE):
        assert plain.by_kind[kind].bytes > 0, kind
    recompute_layers(model, ["Qwen3DecoderLayer"])
    loss_plain, grads_plain = _grads(_qwen3(), census=False)
    with SavedCensus(model) as ckpt:
        loss = model(input_ids=ids, labels=ids).loss
    assert ckpt.by_kind[CHECKPOINTED].tensors == LAYERS  # one hidden state per layer, nothing from inside
    assert ckpt.by_kind[CHECKPOINTED].bytes == LAYERS * TOKENS * HIDDEN * 4
    assert "attention" not in ckpt.by_kind and "MLP" not in ckpt.by_kind
    assert ckpt.kept_bytes < plain.kept_bytes
    loss.backward()  # checkpointing's recompute runs under the hooks that were below the census
    assert loss.item() == loss_plain
    assert all(torch.equal(p.grad, grads_plain[n]) for n, p in model.named_parameters())


def test_a_hook_below_gets_every_tensor_and_what_it_keeps_in_a_tensors_place_is_counted_as_replaced():
    model = _qwen3()
    loss_plain, grads_plain = _grads(model, census=False)
    model.zero_grad(set_to_none=True)
    seen = {"packed": 0, "unpacked": 0}

    class Note:  # what a recompute key keeps instead of a tensor
        def __init__(self, tensor: torch.Tensor):
            self.tensor = tensor

    def pack(tensor: torch.Tensor):
        seen["packed"] += 1
        return Note(tensor) if tensor.dim() and tensor.shape[-1] == 64 else tensor  # the MLP's wide tensors

    def unpack(packed):
        seen["unpacked"] += 1
        return packed.tensor if isinstance(packed, Note) else packed

    ids = _ids()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack), SavedCensus(model) as census:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert census.replaced > 0 and seen["packed"] > census.replaced and seen["unpacked"] > 0
    assert not any(k.endswith("width 64") for k in census.by_producer)  # replaced: not kept, not counted
    assert loss.item() == loss_plain
    assert all(torch.equal(p.grad, grads_plain[n]) for n, p in model.named_parameters())


def test_lora_adapters_count_as_their_own_kind():
    model = _qwen3()
    add_lora(model, LoraConfig(rank=4, target_modules=("q_proj", "down_proj")), seed=0)
    ids = _ids()
    with SavedCensus(model) as census:
        model(input_ids=ids, labels=ids).loss.backward()
    assert census.by_kind["LoRA adapters"].bytes > 0


def test_module_kind_reads_the_class_name_and_the_path():
    class MyFancyAttention(nn.Module):
        pass

    class SwiGLUFeedForward(nn.Module):
        pass

    class LigerRMSNorm(nn.Module):
        pass

    head = nn.Linear(2, 2)
    assert module_kind(MyFancyAttention(), "layers.0.attn") == "attention"
    assert module_kind(SwiGLUFeedForward(), "layers.0.ff") == "MLP"
    assert module_kind(LigerRMSNorm(), "layers.0.input_layernorm") == "norm"
    assert module_kind(nn.Linear(2, 2), "layers.0.q_proj.lora_A.default") == "LoRA adapters"
    assert module_kind(head, "lm_head", head) == "output head"
    assert module_kind(nn.Linear(2, 2), "layers.0.q_proj") is None


def test_the_hooks_are_removed_when_the_forward_raises_and_a_census_counts_one_block():
    model = _qwen3()
    census = SavedCensus(model)
    with pytest.raises(ValueError), census:
        raise ValueError("boom")
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    with pytest.raises(RuntimeError, match="one block"):
        census.__enter__()


def test_the_step_module_enters_its_block_around_each_forward():
    from ligerkit.train.step import StepModule

    model = _qwen3()
    entered = []

    def loss(engine, inner, batch, scale):
        return inner(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss * scale

    step = StepModule(None, model, loss)
    census = SavedCensus(model)
    step.within = lambda: (entered.append(1), census)[1]
    step({"input_ids": _ids()}).backward()
    assert entered == [1] and census.by_kind["attention"].bytes > 0
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


class _GradInForward(torch.autograd.Function):
    """A loss that computes its input's gradient in the forward and keeps it on its context, as a fused
    loss does, with one tensor also saved the usual way and one kept in a list."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.save_for_backward(x)
        ctx.grad_x = torch.cos(x) * 2
        ctx.kept = [x, torch.ones(3, 5), "not a tensor"]  # x again (saved above): counted once
        ctx.weight = weight  # a weight: left out
        return torch.sin(x).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        return ctx.grad_x * grad / 2, None


def test_tensors_kept_on_a_function_s_context_are_counted_once_under_their_own_kind():
    model = nn.Linear(8, 6)
    x = torch.randn(4, 8, requires_grad=True)
    with SavedCensus(model) as census:
        hidden = model(x)
        loss = _GradInForward.apply(torch.tanh(hidden), model.weight)
    saved = census.kept_bytes  # the input and tanh's output (saved twice: by tanh and by the loss)
    assert saved == 4 * 8 * 4 + 4 * 6 * 4
    census.count_contexts(loss)
    assert census.table("kind")[ON_CONTEXTS] == {"bytes": (4 * 6 + 3 * 5) * 4, "gib": 0.0, "tensors": 2}
    producers = census.table("producer")
    assert producers["_GradInForwardBackward context .grad_x torch.float32 width 6"]["tensors"] == 1
    assert producers["_GradInForwardBackward context .kept torch.float32 width 5"]["bytes"] == 3 * 5 * 4
    assert census.kept_bytes == saved + (4 * 6 + 3 * 5) * 4
    census.count_contexts(loss)  # a second walk finds nothing new
    assert census.kept_bytes == saved + (4 * 6 + 3 * 5) * 4
    loss.backward()
    assert torch.allclose(x.grad, (torch.cos(torch.tanh(hidden)) * (1 - torch.tanh(hidden) ** 2)) @ model.weight)
