"""Relations a shrunk config keeps, and inputs built from a config's own declared sizes.

A multimodal rotary embedding's sections must add up to its frequencies (the code's own default
sections too), axial position embeddings must add up to the hidden size and multiply to the sequence
length, image sizes may be (height, width) pairs or crop sizes with a tubelet's spatial patch, video
clips keep a few frames, a backbone cut to fewer layers still outputs a feature map, a top config's
layer indices into a tower follow the tower's kept layers, a windowed backbone's patch grid holds
whole windows. Inputs: audio
placeholder tokens for the vectors the audio encoder returns, feature masks, stacked frames, videos
of the config's frame count, time series of its context length, required forward arguments filled
by their names, text no longer than a text tower's positions. Tiny configs and fake modules only.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from ligerkit.probe.input_parts import image_size
from ligerkit.probe.inputs import input_candidates, text_length
from ligerkit.probe.media_inputs import (
    audio_inputs,
    fill_required,
    Makers,
    series_inputs,
    video_inputs,
    with_audio_tokens,
    with_features_mask,
)
from ligerkit.shrink import axial_length
from ligerkit.shrink.depth import _cut, shallow
from ligerkit.shrink.parts import merge_factor, short_clips, small_images
from ligerkit.shrink.relations import axial_positions, fit_section, fitted_sections, section_misfits


class _Config:
    """A plain config: attributes only."""

    def __init__(self, **values: Any):
        vars(self).update(values)


# --- rotary sections -------------------------------------------------------------------------------

def test_a_section_is_scaled_to_its_total_with_every_entry_kept():
    assert fit_section([8, 12, 12], 64) == [16, 24, 24]
    small = fit_section([8, 12, 12], 4)
    assert sum(small) == 4 and min(small) >= 1
    assert sum(fit_section([8, 12, 12], 11)) == 11
    assert fit_section([8, 12, 12], 2) is None  # fewer frequencies than sections: nothing fits


class _Rotary(nn.Module):
    """A rotary embedding like the multimodal ones: frequencies from the head dim, sections from the
    config's rope dict or the code's own default (tied to another head dim)."""

    def __init__(self, config: Any):
        super().__init__()
        self.config = config
        dim = config.head_dim
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim), persistent=False)
        self.mrope_section = config.rope_parameters.get("mrope_section", [8, 12, 12])


def _build(config: Any) -> nn.Module | None:
    try:
        return _Rotary(config)
    except Exception:
        return None


def test_code_default_sections_are_fitted_to_the_rotary_dims_in_the_config():
    config = _Config(head_dim=8, rope_parameters={"rope_theta": 10000.0})
    assert section_misfits(_Rotary(config))  # the code default adds up to 32, the head has 4 frequencies
    fixed, fitted = fitted_sections(config, _build)
    assert fitted and fixed is not config and "mrope_section" not in config.rope_parameters  # a copy
    assert sum(fixed.rope_parameters["mrope_section"]) == 4 and not section_misfits(_Rotary(fixed))


def test_sections_that_fit_are_left_alone():
    config = _Config(head_dim=64, rope_parameters={"mrope_section": [8, 12, 12]})
    same, fitted = fitted_sections(config, _build)
    assert same is config and not fitted
    assert fitted_sections(config, None) == (config, False)  # no build: nothing checked


# --- axial positions, images, clips, backbone stages ------------------------------------------------

def test_axial_position_widths_add_up_to_the_hidden_size_and_the_shape_stays_short():
    config = _Config(hidden_size=64, axial_pos_embds_dim=(64, 192), axial_pos_shape=(64, 64))
    assert axial_positions(config)
    assert config.axial_pos_embds_dim == (16, 48) and isinstance(config.axial_pos_shape, tuple)
    assert axial_length(config) == 64 and config.axial_pos_shape == (8, 8)


def test_pair_image_sizes_and_tubelets_shrink_by_whole_patches():
    pose = _Config(image_size=(256, 192), patch_size=(16, 16))
    assert small_images(pose) and pose.image_size == (128, 96)
    video = _Config(image_size=224, tubelet_size=[2, 16, 16], num_frames=32)
    assert small_images(video) and video.image_size == 112
    assert short_clips(video) and video.num_frames == 4  # two temporal tubelets
    crop = _Config(crop_size=256, patch_size=16, frames_per_clip=64, tubelet_size=2)
    small_images(crop)
    short_clips(crop)
    assert crop.crop_size == 64 and crop.frames_per_clip == 4
    assert image_size(pose) == (128, 96) and image_size(crop) == (64, 64)


def test_a_backbone_cut_to_fewer_layers_still_outputs_a_feature_map():
    from transformers import VitPoseBackboneConfig

    config = VitPoseBackboneConfig(num_hidden_layers=12, out_indices=[12])
    _cut(config, [0, 1], 12, ["num_hidden_layers"])
    assert config.stage_names == ["stem", "stage1", "stage2"]
    assert config.out_features == ["stage2"] and config.out_indices == [2]


def test_a_layer_index_list_for_a_sub_config_stack_follows_its_kept_layers():
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation

    tower = dict(hidden_size=32, intermediate_size=37, num_attention_heads=2, num_hidden_layers=12)
    config = CLIPSegConfig(text_config={**tower, "vocab_size": 99}, vision_config={**tower, "image_size": 32,
                           "patch_size": 16}, projection_dim=16, reduce_dim=16, extract_layers=(3, 6, 9))
    model = CLIPSegForImageSegmentation  # a feature of a dropped layer comes from the nearest kept one below
    shrunk = shallow(config, lambda c: model(c))
    assert shrunk.vision_config.num_hidden_layers == 2 and tuple(shrunk.extract_layers) == (1,)
    out = model(shrunk).eval()(input_ids=torch.ones(1, 5, dtype=torch.long), pixel_values=torch.randn(1, 3, 32, 32))
    assert out.logits.shape[-1] == 32


def test_a_windowed_backbone_grid_is_a_multiple_of_its_windows_per_side():
    own = _Config(image_size=518, patch_size=14, num_windows=4)  # 37 patches: no four windows a side
    assert merge_factor(own) == 4 and small_images(own, shrink=False) and own.image_size == 560
    fits = _Config(image_size=896, patch_size=14, mm_tokens_per_image=256)  # its own grid: nothing changes
    assert not small_images(fits, shrink=False) and fits.mm_tokens_per_image == 256
    small = _Config(image_size=518, patch_size=14, num_windows=4)
    small_images(small)
    assert (small.image_size // 14) % 4 == 0
    sides = _Config(image_size=1024, patch_size=16, num_windows=16, num_windows_side=4)  # a total and a side
    assert merge_factor(sides) == 4 and small_images(sides) and sides.image_size == 64


# --- inputs ------------------------------------------------------------------------------------------

class _SpeechLM(nn.Module):
    """A speech LM: audio features turned into vectors (four frames each), placed at its audio tokens."""

    def __init__(self):
        super().__init__()
        self.project = nn.Linear(16, 8)

    def get_audio_features(self, input_features: torch.Tensor, input_features_mask: torch.Tensor) -> torch.Tensor:
        frames = input_features.reshape(input_features.shape[0], -1, 4, 16).mean(2)
        return self.project(frames).reshape(-1, 8)

    def forward(self, input_ids=None, input_features=None, input_features_mask=None):
        return self.get_audio_features(input_features, input_features_mask)


def test_audio_placeholder_tokens_match_the_vectors_the_audio_encoder_returns():
    config = _Config(vocab_size=100, audio_token_id=99, audio_bos_token_id=98, num_mel_bins=16)
    model = _SpeechLM()
    accepted = set(inspect.signature(model.forward).parameters)
    g = torch.Generator().manual_seed(0)
    sounds = with_features_mask(audio_inputs(config, accepted, 2, None, g), accepted)
    assert all("input_features_mask" in s for s in sounds)
    ids = torch.randint(0, 90, (2, 8), generator=g)
    made = [m for s in sounds if (m := with_audio_tokens(config, model, ids, s, accepted)) is not None]
    assert made
    tokens = made[0]["input_ids"]
    features = model.get_audio_features(made[0]["input_features"], made[0]["input_features_mask"])
    assert int((tokens == 99).sum()) == features.shape[0] and int((tokens == 98).sum()) == 2
    assert with_audio_tokens(_Config(vocab_size=100), model, ids, sounds[0], accepted) is None  # no audio token


def test_stacked_frames_widen_the_features():
    config = _Config(num_mel_bins=80, num_stacked_frames=7)
    found = audio_inputs(config, {"input_features"}, 2, None, torch.Generator().manual_seed(0))
    assert {f["input_features"].shape[-1] for f in found} >= {560}


class _Codec(nn.Module):
    def forward(self, input_values, input_features, padding_mask=None):
        return input_values.sum() + input_features.sum()


def test_required_arguments_are_filled_by_their_names():
    g = torch.Generator().manual_seed(0)
    audio = [{"input_values": torch.randn(2, 100)}, {"input_features": torch.randn(2, 8, 4)},
             {"input_features": torch.randn(2, 4, 8)}]
    makers = Makers(_Config(hidden_size=16), torch.zeros(2, 8, dtype=torch.long), [], audio, 2, 8, g)
    params = inspect.signature(_Codec().forward).parameters
    filled = fill_required(params, (), {"input_values": audio[0]["input_values"]}, makers)
    assert [tuple(kw["input_features"].shape) for _, kw in filled] == [(2, 8, 4), (2, 4, 8)]  # each layout
    whole = {"input_values": torch.randn(2, 100), "input_features": torch.randn(2, 8, 4)}
    assert fill_required(params, (), whole, makers) == [((), whole)]  # a candidate that binds is unchanged


class _Segmenter(nn.Module):
    def forward(self, pixel_values, prompt_pixel_values, prompt_masks):
        return pixel_values + prompt_pixel_values * prompt_masks


def test_required_prompt_images_and_their_masks_follow_the_images():
    config = _Config(image_size=32, patch_size=8, num_channels=3)
    found = input_candidates(config, _Segmenter())
    kwargs = found[0][1]
    assert kwargs["prompt_pixel_values"].shape == kwargs["pixel_values"].shape == kwargs["prompt_masks"].shape
    _Segmenter()(**kwargs)


def test_videos_take_the_config_frame_count_and_series_its_context_length():
    g = torch.Generator().manual_seed(0)
    video = _Config(image_size=32, patch_size=8, num_channels=3, num_frames=4)
    (clip,) = video_inputs(video, {"pixel_values_videos", "pixel_values"}, 2, g)
    assert clip["pixel_values_videos"].shape == (2, 4, 3, 32, 32)
    assert video_inputs(_Config(image_size=32, patch_size=8), {"pixel_values"}, 2, g) == []  # no frame count
    series = series_inputs(_Config(context_length=2048, patch_length=32, num_input_channels=3), {"past_values"}, 2, g)
    assert series[0]["past_values"].shape == (2, 512, 3) and series[1]["past_values"].shape == (2, 512)


def test_text_is_no_longer_than_a_short_text_tower_positions():
    assert text_length(_Config(max_position_embeddings=16), 32) == 16
    assert text_length(_Config(max_position_embeddings=4096), 32) == 32
    assert text_length(_Config(max_position_embeddings=4), 32) == 32  # too short to be a text tower's


def test_sections_are_fitted_only_for_a_config_that_misfits_at_its_own_widths():
    from ligerkit.shrink import whole_model_configs
    from ligerkit.shrink.relations import sections_misfit

    own = _Config(hidden_size=512, num_attention_heads=8, head_dim=64, rope_parameters={"rope_theta": 1.0})
    assert not sections_misfit(own, _build)  # the code default [8, 12, 12] fits 32 frequencies
    assert not any("fitted" in label for label, _ in whole_model_configs(own, build=_build))
    odd = _Config(hidden_size=1024, num_attention_heads=8, head_dim=128, rope_parameters={"rope_theta": 1.0})
    assert sections_misfit(odd, _build)  # 64 frequencies: the default never fits, at any width
    made = whole_model_configs(odd, build=_build)
    assert made and all("rope sections fitted" in label for label, _ in made)
    assert all(not section_misfits(_Rotary(cfg)) for _, cfg in made)
