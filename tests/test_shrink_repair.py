"""Default configs that do not build are repaired from their own derived fields, and images fit their connector.

A family whose default config leaves a derived field unset (``head_dim``, the key/value head count) is
not unproven for that: the repaired copy is what every checkpoint of the family sets, and the label of
each shrunk config says it was repaired. A repair never invents a setting and is dropped when the model
still does not build. Images keep a patch grid their connector can merge (a pixel shuffle's scale
factor), head dims are counted from every hidden size of a vision config, and a family derived from
another (``modular_*``) finds that family's image processor.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import torch

from ligerkit.probe.inputs import _with_image_tokens, parent_families, processor_classes
from ligerkit.probe.top_model import meta_build_error
from ligerkit.shrink import repaired_config, whole_model_configs
from ligerkit.shrink.parts import merge_factor, small_images
from ligerkit.shrink.repair import missing_setting, unset_derived_fields
from ligerkit.shrink.tree import divide_widths, width_shift


class _Config:
    """A plain config: attributes only."""

    def __init__(self, **values: Any):
        vars(self).update(values)


def _needs(*names: str):
    """A build-error function: the error of a model that reads ``names`` from the config and needs them set."""
    def error(config: Any) -> BaseException | None:
        for name in names:
            owner, _, attr = name.rpartition(".")
            node = getattr(config, owner) if owner else config
            try:
                value = getattr(node, attr)
            except AttributeError as exc:
                return exc
            if value is None:
                return TypeError(f"{attr} is None")
        return None
    return error


def test_an_unset_head_dim_is_derived_from_the_hidden_size_and_head_count():
    config = _Config(hidden_size=256, num_attention_heads=8, head_dim=None)
    fixed, notes = repaired_config(config, _needs("head_dim"))
    assert fixed.head_dim == 32 and config.head_dim is None  # a copy: the default itself stays as it is
    assert notes == ["head_dim = hidden_size // num_attention_heads"]


def test_unset_key_value_heads_become_the_head_count():
    config = _Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=None)
    assert unset_derived_fields(config) == ["num_key_value_heads = num_attention_heads"]
    assert config.num_key_value_heads == 4


def test_tuples_of_ints_become_lists_as_json_loads_them():
    config = _Config(hidden_sizes=(8, 16), name=("a", "b"))
    unset_derived_fields(config)
    assert config.hidden_sizes == [8, 16] and config.name == ("a", "b")


def test_a_config_that_builds_is_never_repaired():
    config = _Config(hidden_size=256, num_attention_heads=8, head_dim=None)
    fixed, notes = repaired_config(config, lambda c: None)
    assert fixed is config and notes == []


def test_a_repair_that_does_not_make_it_build_is_dropped():
    config = _Config(hidden_size=256, num_attention_heads=8, head_dim=None, clip=None)
    fixed, notes = repaired_config(config, _needs("head_dim", "clip"))  # clip is no derived field
    assert fixed is config and notes == [] and config.head_dim is None


def test_a_setting_missing_on_a_sub_config_is_taken_from_the_config_holding_it():
    sub = _Config(hidden_size=64, kv_heads=2)
    config = _Config(hidden_size=64, attn=sub, rope_parameters={"rope_theta": 5e5, "rope_type": "default"})
    fixed, notes = repaired_config(config, _needs("attn.rope_theta"))
    assert fixed.attn.rope_theta == 5e5 and notes == ["_Config.rope_theta from _Config"]


def test_a_missing_setting_nothing_derives_is_left_missing():
    config = _Config(hidden_size=64, attn=_Config(hidden_size=64, kv_heads=2))
    failure = AttributeError("'_Config' object has no attribute 'clip_qkv'")
    assert missing_setting(config, failure) is None and not hasattr(config.attn, "clip_qkv")


def test_a_real_default_without_head_dim_builds_repaired_and_its_label_says_so():
    from transformers import MinistralConfig, MinistralForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = MinistralConfig(hidden_size=256, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2,
                                 num_hidden_layers=2, vocab_size=128, head_dim=None)
    assert meta_build_error(MinistralForCausalLM, config) is not None
    trials = whole_model_configs(config, error=lambda c: meta_build_error(MinistralForCausalLM, c))
    label, shrunk = trials[0]
    assert "default repaired: head_dim = hidden_size // num_attention_heads" in label
    assert meta_build_error(MinistralForCausalLM, shrunk) is None
    assert config.head_dim is None
    given = whole_model_configs(config, given=True, error=lambda c: meta_build_error(MinistralForCausalLM, c))
    assert all("repaired" not in label for label, _ in given)  # a caller's config is never repaired


def test_a_pixel_shuffle_keeps_a_patch_grid_it_can_merge():
    vision = _Config(hidden_size=64, image_size=224, patch_size=32)  # 7 patches a side: no 2x2 shuffle fits
    config = _Config(hidden_size=64, vision_config=vision, scale_factor=2)
    assert merge_factor(config) == 2
    small_images(config)
    assert (vision.image_size // vision.patch_size) % 2 == 0
    big = _Config(vision_config=_Config(hidden_size=64, image_size=448, patch_size=14), downsample_ratio=0.25)
    small_images(big)
    assert big.vision_config.image_size // 14 == 4  # 32 patches a side, shrunk to a multiple of four


def test_head_dims_are_counted_from_every_hidden_size_of_a_vision_config():
    vision = _Config(embed_dim=1280, hidden_size=3584, num_heads=16)  # 80 per head; 3584 is the output width
    config = _Config(hidden_size=4096, num_attention_heads=32, vision_config=vision)
    divide_widths(config, width_shift(config))
    assert (vision.embed_dim // vision.num_heads) % 2 == 0


def test_a_derived_family_finds_the_image_processor_of_the_family_it_derives_from():
    assert "qwen3_vl" in parent_families("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe")
    model = types.new_class("M", (torch.nn.Module,))
    model.__module__ = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
    found = processor_classes(_Config(model_type="qwen3_vl_moe"), model())
    assert any("Qwen2VLImageProcessor" in cls.__name__ for cls in found)


def test_image_tokens_follow_the_configs_count_when_the_features_do_not_come_alone():
    class Model(torch.nn.Module):  # no get_image_features: the count comes from the config
        def forward(self, input_ids=None, pixel_values=None):
            return input_ids

    config = _Config(vocab_size=100, image_token_id=99, mm_tokens_per_image=5)
    ids = torch.ones(2, 8, dtype=torch.long)
    made = _with_image_tokens(config, Model(), ids, {"pixel_values": torch.zeros(2, 3, 8, 8)},
                              {"input_ids", "pixel_values"}, torch.Generator())
    assert (made["input_ids"] == 99).sum(-1).tolist() == [5, 5]
