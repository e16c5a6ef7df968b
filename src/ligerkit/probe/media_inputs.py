"""Audio, video and time-series inputs built from a config's own declared sizes, audio placeholder
tokens, and the arguments a forward requires filled by their names."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ligerkit.hf import text_config
from ligerkit.probe.input_parts import (
    MAX_FRAMES,
    MEL_KEYS,
    SEQ,
    count_features,
    first_int,
    config_names,
    token_attr,
    vision_node,
    image_size,
)
from ligerkit.shrink import config_tree

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

def audio_inputs(config: Any, accepted: set[str], batch: int, ids: torch.Tensor | None,
                  g: torch.Generator) -> list[dict[str, Any]]:
    """Waveforms (batch, time) and (batch, channels, time), spectrogram frames, mel features."""
    found: list[dict[str, Any]] = []
    extra: dict[str, Any] = {"decoder_input_ids": ids} if ids is not None and "decoder_input_ids" in accepted else {}
    bins = first_int(config, *MEL_KEYS)
    stacked = _stacked_frames(config)
    if bins and stacked > 1 and "feature_projection_input_dim" not in config_names(config):
        bins *= stacked  # frames stacked into one feature vector (low frame rate): bins times the stack
    if "decoder_input_values" in accepted:  # a speech decoder's own frames (time, bins)
        extra["decoder_input_values"] = torch.randn(batch, SEQ, bins or 80, generator=g)
    if "input_values" in accepted:
        found.append({"input_values": torch.randn(batch, 8000, generator=g), **extra})
        channels = first_int(config, "audio_channels") or 1
        found.append({"input_values": torch.randn(batch, channels, 8000, generator=g), **extra})
        if bins:  # spectrogram frames (time, bins)
            frames = first_int(config, "max_length") or 64
            found.append({"input_values": torch.randn(batch, frames, bins, generator=g), **extra})
    if "input_features" in accepted:
        bins = bins or 80
        positions = first_int(config, "max_source_positions")
        long = 2 * positions if positions and 2 * positions <= MAX_FRAMES else 64  # a Whisper-style fixed length
        for frames in dict.fromkeys([long, 64]):
            found.append({"input_features": torch.randn(batch, bins, frames, generator=g), **extra})
            found.append({"input_features": torch.randn(batch, frames, bins, generator=g), **extra})
    return found


_AUDIO_TOKENS = ("audio_token_id", "audio_token_index", "audio_token")


_FEATURE_MASKS = ("input_features_mask", "feature_attention_mask", "audio_attention_mask")


def _stacked_frames(config: Any) -> int:
    """How many mel frames an audio encoder stacks into one feature vector (an int setting named
    ``*stacked_frames*``), else 1."""
    for node in config_tree(config):
        for name, value in vars(node).items():
            if "stacked_frames" in name and isinstance(value, int) and not isinstance(value, bool) and value > 1:
                return value
    return 1


def with_features_mask(audio: list[dict[str, Any]], accepted: set[str]) -> list[dict[str, Any]]:
    """Each feature input of ``audio`` with the all-ones frame mask the forward takes beside it
    (``input_features_mask``, ...), one per time axis the features may have (last, or first after the
    batch); waveform inputs as they are."""
    masks = [m for m in _FEATURE_MASKS if m in accepted]
    found = []
    for sound in audio:
        features = sound.get("input_features")
        if features is None or not masks:
            found.append(sound)
            continue
        for axis in dict.fromkeys([features.shape[-1], features.shape[1]]):
            found.append({**sound, masks[0]: torch.ones(features.shape[0], axis, dtype=torch.long)})
    return found


def with_audio_tokens(config: Any, model: nn.Module, ids: torch.Tensor, sound: dict[str, Any],
                       accepted: set[str]) -> dict[str, Any] | None:
    """Token ids holding one clip's audio placeholder tokens per row (between the audio start and end
    tokens where the config names them), with the audio they stand for: as many placeholders as
    ``get_audio_features`` returns vectors; ``None`` without an audio token or a count."""
    audio_token = token_attr(config, *_AUDIO_TOKENS)
    if audio_token is None:
        return None
    batch = ids.shape[0]
    count = count_features(model, sound, "get_audio_features")
    if count is None or count == 0 or count % batch:
        return None
    start = token_attr(config, "audio_start", "audio_bos", "begin_of_audio", "start_of_audio")
    end = token_attr(config, "audio_end", "audio_eos", "end_of_audio")
    middle = ([start] if start is not None else []) + [audio_token] * (count // batch) + \
        ([end] if end is not None else [])
    rows = [torch.cat([row[:2], torch.tensor(middle, dtype=row.dtype), row[2:]]) for row in ids]
    tokens = torch.stack(rows)
    kwargs = {**sound, "input_ids": tokens}
    if "decoder_input_ids" in kwargs:
        kwargs.pop("decoder_input_ids")
    return kwargs


_FRAMES = ("num_frames", "frames_per_clip")


def video_inputs(config: Any, accepted: set[str], batch: int, g: torch.Generator) -> list[dict[str, Any]]:
    """Videos (batch, frames, channels, height, width) of the config's own frame count (``num_frames``,
    ``frames_per_clip``) and image size, under the name the forward takes (``pixel_values_videos``,
    else ``pixel_values``); none when the config names no frame count."""
    name = next((n for n in ("pixel_values_videos", "pixel_values") if n in accepted), None)
    frames = first_int(config, *_FRAMES)
    if name is None or not frames or frames <= 0:
        return []
    node = vision_node(config) or next((n for n in config_tree(config) if image_size(n) is not None), config)
    channels = first_int(node, "num_channels", "in_channels", "in_chans") or 3
    size = image_size(node)
    if size is None:
        return []
    return [{name: torch.rand(batch, frames, channels, *size, generator=g)}]


_SERIES = ("past_values",)


_SERIES_CAP = 512  # time steps at most, a multiple of the patch length


def series_inputs(config: Any, accepted: set[str], batch: int, g: torch.Generator) -> list[dict[str, Any]]:
    """Time series (batch, time) and (batch, time, channels) of the config's context length (at most
    :data:`_SERIES_CAP` steps, a multiple of its patch length) and input channel count, for a forward
    that takes ``past_values``."""
    name = next((n for n in _SERIES if n in accepted), None)
    length = first_int(config, "context_length")
    if name is None or not length or length <= 0:
        return []
    patch = first_int(config, "patch_length") or 1
    if length > _SERIES_CAP:
        length = max(patch, _SERIES_CAP // patch * patch)
    channels = first_int(config, "num_input_channels", "input_size")
    found = [{name: torch.randn(batch, length, generator=g)}]
    if channels:
        found.insert(0, {name: torch.randn(batch, length, channels, generator=g)})
    return found


class Makers:
    """What :func:`fill_required` fills a required argument with, made from the config and the
    candidates already made: token ids, images, waveforms, features, hidden states, masks."""

    def __init__(self, config: Any, ids: torch.Tensor | None, images: list[dict[str, Any]],
                 audio: list[dict[str, Any]], batch: int, seq: int, g: torch.Generator):
        self.config, self.ids, self.batch, self.seq, self.g = config, ids, batch, seq, g
        self.pixels = images[0]["pixel_values"] if images else None
        self.values = _distinct(a["input_values"] for a in audio if "input_values" in a)
        self.features = _distinct(a["input_features"] for a in audio if "input_features" in a)

    def hidden(self) -> list[torch.Tensor]:
        text = text_config(self.config)
        width = getattr(text, "hidden_size", None) or getattr(self.config, "hidden_size", None)
        if isinstance(width, int) and not isinstance(width, bool):
            return [torch.randn(self.batch, self.seq, width, generator=self.g)]
        return []

    def make(self, name: str, given: dict[str, Any]) -> list[Any]:
        """Values for the required argument ``name``, the likeliest first; none when no rule makes one."""
        if name.endswith("input_ids"):
            return [self.ids] if self.ids is not None else []
        if name.endswith("pixel_values"):
            pixels = given.get("pixel_values", self.pixels)
            return [pixels] if pixels is not None else []
        if name.endswith("input_values"):
            return self.values or [torch.randn(self.batch, 8000, generator=self.g)]
        if name.endswith("input_features"):
            return self.features
        if name.endswith(("_embeds", "hidden_states")):
            return self.hidden()
        if name.endswith(("_mask", "_masks")):
            stem = name.rsplit("_", 1)[0]
            like = next((v for k, v in given.items() if isinstance(v, torch.Tensor) and k.startswith(f"{stem}_")),
                        None)
            return [torch.ones_like(like)] if like is not None else []
        return []


def _distinct(tensors: Any) -> list[torch.Tensor]:
    found: dict[tuple[int, ...], torch.Tensor] = {}
    for t in tensors:
        found.setdefault(tuple(t.shape), t)
    return list(found.values())


_MAX_FILLED = 4  # filled copies of one candidate at most


def fill_required(params: Any, args: tuple[Any, ...], kwargs: dict[str, Any], makers: Makers) -> list[Inputs]:
    """``(args, kwargs)`` with every argument the forward requires (no default) and they lack made by
    its name (:class:`Makers`): token ids, images, waveforms, features (each layout the audio inputs
    have, a copy each, at most :data:`_MAX_FILLED`), hidden states, masks of the input they are named
    after. Without such an argument the forward cannot be called at all, so a candidate that already
    binds is the only one returned, unchanged."""
    listed = [p for p in params.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    bound = {p.name for p in listed[:len(args)]} | set(kwargs)
    missing = [p.name for p in listed if p.default is p.empty and p.name not in bound and p.name != "self"]
    if not missing:
        return [(args, kwargs)]
    filled = [dict(kwargs)]
    for name in sorted(missing, key=lambda n: n.endswith(("_mask", "_masks"))):  # masks after what they mask
        grown = [{**done, name: value} for done in filled for value in makers.make(name, done)]
        filled = grown[:_MAX_FILLED] or filled
    return [(args, done) for done in filled]
