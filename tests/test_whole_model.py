"""Whole-model probes: the module's top model, built from consistently shrunk configs, or Unrunnable.

A verdict about how a symbol's output is used must see the model that holds every use of it. These
tests pin the choice of that model (never a block), the refusal when it cannot be built (no fallback),
the shrinking that keeps a family's relations (latent-attention ranks, layer types, expert groups,
first dense layers), and, on a handful of real families that need that care, that the shrunk top
model runs, uses every symbol ``suggest`` would probe, and gives every parameter a gradient.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext

import pytest
import torch
from torch import nn

from ligerkit.probe.runnable import Unrunnable, class_references, runnable_model, top_model_class
from ligerkit.shrink import config_tree, whole_model_configs
from ligerkit.suggest import discover
from toy_models import modeling_layouts as L
from toy_models import modeling_unbuildable as U


@contextmanager
def _uses(module: types.ModuleType, model: nn.Module, used: set[str]) -> Iterator[Callable[[], bool]]:
    """Record every discovered symbol of ``module`` a forward of ``model`` uses."""
    with ExitStack() as stack:
        for name, obj, _ in discover(module):
            if isinstance(obj, type):
                for m in model.modules():
                    if type(m) is obj:
                        stack.callback(m.register_forward_hook(lambda *_, n=name: used.add(n)).remove)
            else:
                bound = [k for k, v in vars(module).items() if v is obj]

                def counting(*args, _fn=obj, _name=name, **kwargs):
                    used.add(_name)
                    return _fn(*args, **kwargs)

                for k in bound:
                    vars(module)[k] = counting
                stack.callback(vars(module).update, {k: obj for k in bound})
        yield lambda: bool(used)


def _watch(module: types.ModuleType, used: set[str]) -> Callable[[nn.Module], object]:
    def watch(model: nn.Module) -> object:
        used.clear()
        return _uses(module, model, used)

    return watch


def _watch_class(cls: type) -> Callable[[nn.Module], object]:
    return lambda model: nullcontext(lambda: any(type(m) is cls for m in model.modules()))


# --- the top model, or nothing ----------------------------------------------------------------------

def test_the_top_class_of_a_toy_module_is_its_causal_lm_never_a_block():
    assert top_model_class(L, L.LayoutConfig()) is L.LayoutForCausalLM
    run = runnable_model(L, L.LayoutConfig(layout="post"), _watch_class(L.LayoutRMSNorm))
    assert type(run.model) is L.LayoutForCausalLM
    assert run.config.layout == "post" and run.label.startswith("given widths")


def test_a_top_model_that_does_not_build_is_unrunnable_with_what_was_tried():
    assert top_model_class(U, U.UnbuildableConfig()) is U.UnbuildableForCausalLM
    with pytest.raises(Unrunnable) as caught:
        runnable_model(U, U.UnbuildableConfig(), _watch_class(U.UnbuildableRMSNorm))
    message = str(caught.value)
    assert message.startswith("UnbuildableForCausalLM could not be built and run")
    assert "given widths" in message and "needs weights this toy does not have" in message
    assert "DecoderLayer" not in message


def test_a_top_model_that_never_uses_the_symbol_says_so():
    with pytest.raises(Unrunnable, match="LayoutForCausalLM runs but never uses Foo"):
        runnable_model(L, L.LayoutConfig(), lambda model: nullcontext(lambda: False), symbol="Foo")


def test_a_config_over_the_parameter_budget_is_counted_not_built(monkeypatch):
    import ligerkit.probe.runnable as runnable

    monkeypatch.setattr(runnable, "CPU_PARAMETER_BUDGET", 1000)
    with pytest.raises(Unrunnable, match=r"parameters, over the 0M budget"):
        runnable_model(L, L.LayoutConfig(), _watch_class(L.LayoutRMSNorm))


# --- consistent shrinking ---------------------------------------------------------------------------

def test_latent_attention_and_grouped_experts_stay_consistent():
    from transformers import DeepseekV3Config

    label, small = whole_model_configs(DeepseekV3Config())[0]
    assert label.startswith("small widths")
    assert small.qk_head_dim == small.qk_nope_head_dim + small.qk_rope_head_dim
    assert small.head_dim == small.qk_rope_head_dim and small.qk_rope_head_dim % 2 == 0
    assert small.kv_lora_rank < small.hidden_size < DeepseekV3Config().hidden_size
    assert small.n_routed_experts % small.n_group == 0 and small.topk_group <= small.n_group
    assert small.n_routed_experts // small.n_group >= 2  # the router sums the top two of each group
    assert small.num_experts_per_tok <= small.n_routed_experts // small.n_group * small.topk_group
    assert 1 <= small.first_k_dense_replace < small.num_hidden_layers  # a dense and an MoE layer


def test_hybrid_layer_types_keep_every_type_at_the_new_depth():
    from transformers import Qwen3NextConfig

    original = Qwen3NextConfig()
    for _, small in whole_model_configs(original):
        assert len(small.layer_types) == small.num_hidden_layers < original.num_hidden_layers
        assert set(small.layer_types) == set(original.layer_types)


def test_every_sub_config_of_a_vision_language_config_shrinks_together():
    from transformers import Gemma3Config

    _, small = whole_model_configs(Gemma3Config())[0]
    text, vision = small.text_config, small.vision_config
    assert text.num_hidden_layers <= 4 and vision.num_hidden_layers <= 4
    assert vision.image_size // vision.patch_size <= Gemma3Config().vision_config.image_size // vision.patch_size
    assert text.vocab_size <= 512 and small.image_token_id < text.vocab_size
    assert len(config_tree(small)) == 3


# --- real families that need that care --------------------------------------------------------------

FAMILIES = {
    "deepseek_v3": "DeepseekV3ForCausalLM",  # multi-head latent attention, grouped experts, first dense layers
    "qwen3_next": "Qwen3NextForCausalLM",  # linear / full attention layer types, experts
    "glm4_moe": "Glm4MoeForCausalLM",  # first dense layer, experts, partial rotary
    "cohere2": "Cohere2ForCausalLM",  # sliding / full attention every fourth layer
    "jamba": "JambaForCausalLM",  # attention and expert layers at periods and offsets
    "paddleocr_vl": "PaddleOCRVLForConditionalGeneration",  # vision tower and text model, images with M-RoPE
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_top_model_of_a_real_family_runs_uses_every_symbol_and_gets_every_gradient(family):
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    used: set[str] = set()
    run = runnable_model(module, None, _watch(module, used))
    assert type(run.model).__name__ == FAMILIES[family] == top_model_class(module).__name__
    with _uses(module, run.model, used):
        used.clear()
        run.loss().backward()
    present = {type(m) for m in run.model.modules()}
    named = set().union(*(class_references(module).get(c.__name__, frozenset()) for c in present))
    expected = {name for name, obj, _ in discover(module)
                if (obj in present if isinstance(obj, type) else name in named and _called(name, run))}
    assert expected and expected <= used, (run.label, expected - used)
    missing = [n for n, p in run.model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, (run.label, missing[:5])


def _called(name: str, run: object) -> bool:
    """Whether the family's config takes the path that calls the function bound as ``name`` (e.g. not an
    interleaved rotary; a hub-kernel wrapper has no ``__name__`` of its own)."""
    interleave = [getattr(node, "rope_interleave", False) for node in config_tree(run.config)]
    return not (any(interleave) and name == "apply_rotary_pos_emb")
