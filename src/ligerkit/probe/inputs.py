"""Inputs a whole model's forward takes: token ids long enough to route every expert, images with
their placeholder tokens, audio with its placeholder tokens, videos, time series, audio features
(:mod:`ligerkit.probe.media_inputs`), required arguments filled by their names; all on the probe's
device."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from ligerkit.hf import text_config
from ligerkit.probe.input_parts import SEQ, count_features, first_int, token_attr, vision_node, image_size
from ligerkit.probe.media_inputs import (
    Inputs,
    audio_inputs,
    fill_required,
    Makers,
    series_inputs,
    video_inputs,
    with_audio_tokens,
    with_features_mask,
)
from ligerkit.probe.processors import processed_images, processor_classes, parent_families
from ligerkit.shrink import axial_length, config_tree, special_token_ids

__all__ = ["BATCH", "SEQ", "Inputs", "processor_classes", "image_size", "input_candidates", "parent_families",
           "sequence_length", "text_length"]

BATCH = 2


# --- inputs -----------------------------------------------------------------------------------------

_NAMED_INPUTS = ("input_ids", "pixel_values", "input_values", "input_features", "inputs_embeds")
_IMAGE_TOKEN_COUNTS = ("mm_tokens_per_image", "image_seq_length", "image_seq_len", "num_image_tokens",
                       "tokens_per_image", "image_token_count")


def sequence_length(config: Any, batch: int = BATCH) -> int:
    """Tokens per row: :data:`SEQ`, or enough that each routed expert gets about eight tokens, or
    twice the longest compression a compressed attention applies (``*compress*`` settings)."""
    experts, top_k, compress = 1, 1, 0
    for node in config_tree(config):
        for name, value in vars(node).items():
            values = value.values() if isinstance(value, dict) else [value]
            for v in values:
                if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or name.startswith("_"):
                    continue
                if "compress" in name and v <= 1024:
                    compress = max(compress, v)
                elif "experts" in name and "per_tok" not in name and "shared" not in name:
                    experts = max(experts, v)
                elif "per_tok" in name or name in ("moe_k", "top_k", "moe_topk", "router_top_k"):
                    top_k = max(top_k, v)
    return max(SEQ, -(-8 * experts // (top_k * batch)), 2 * compress)


def input_candidates(config: Any, model: nn.Module, batch: int = BATCH,
                     device: str | torch.device = "cpu") -> list[Inputs]:
    """Inputs ``model``'s forward may take, the most complete first: token ids with the images they
    refer to, token ids with the audio they refer to, token ids (and decoder ids), images, videos of the
    config's frame count, audio, time series of the config's context length, then positional token
    ids or hidden states. Token ids avoid every special token id of the config and are no longer than
    the text's position count; arguments the forward requires that a candidate lacks are filled by
    their names (:func:`fill_required`); all tensors are on ``device``."""
    g = torch.Generator().manual_seed(11)
    params = inspect.signature(model.forward).parameters
    accepted = set(params)
    seq = axial_length(config) or text_length(config, sequence_length(config, batch))
    text = text_config(config)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None)
    ids = _token_ids(vocab, special_token_ids(config), batch, seq, g) if isinstance(vocab, int) and vocab > 3 else None
    found: list[Inputs] = []
    extra = {p.name: ids for p in params.values() if p.name.endswith("_input_ids") and p.default is p.empty
             and p.name != "decoder_input_ids"} if ids is not None else {}  # e.g. a Q-Former's own token ids
    images = _image_inputs(config, model, accepted, batch, g) if "pixel_values" in accepted else []
    audio = audio_inputs(config, accepted, batch, ids, g)
    videos = video_inputs(config, accepted, batch, g)
    if ids is not None and "input_ids" in accepted:
        for pixels in images:
            with_tokens = _with_image_tokens(config, model, ids, pixels, accepted, g)
            if with_tokens is not None:
                found.append(((), {**extra, **with_tokens}))
        for sound in with_features_mask(audio, accepted):
            with_tokens = with_audio_tokens(config, model, ids, sound, accepted)
            if with_tokens is not None:
                found.append(((), {**extra, **with_tokens}))
        plain: dict[str, Any] = {"input_ids": ids, **extra}
        plain.update({name: torch.zeros_like(ids) for name in accepted if name.startswith("mm_") and
                      name.endswith("token_type_ids")})  # text only: every token is text
        if "decoder_input_ids" in accepted:
            plain["decoder_input_ids"] = ids.flip(-1)
        found += [((), {**plain, **pixels}) for pixels in images]  # text and images side by side (CLIP-like)
        found += [((), {**plain, **video}) for video in videos]
        found.append(((), plain))
    found += [((), pixels) for pixels in images]
    found += [((), video) for video in videos]
    found += [((), sound) for sound in audio]
    found += [((), series) for series in series_inputs(config, accepted, batch, g)]
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional and positional[0].name not in _NAMED_INPUTS:
        if ids is not None:
            found.append(((ids,), {}))
        width = getattr(text, "hidden_size", None) or getattr(config, "hidden_size", None)
        if isinstance(width, int):
            found.append(((torch.randn(batch, seq, width, generator=g),), {}))
    makers = Makers(config, ids, images, audio, batch, seq, g)
    found = [filled for args, kwargs in found for filled in fill_required(params, args, kwargs, makers)]
    return [_to(device, args, kwargs) for args, kwargs in found]


def text_length(config: Any, seq: int) -> int:
    """``seq``, or the text config's position count where that is shorter (and at least 8): a text
    tower with few absolute positions (a detection model's 16-token queries) takes no longer text."""
    positions = getattr(text_config(config), "max_position_embeddings", None)
    if isinstance(positions, int) and not isinstance(positions, bool) and 8 <= positions < seq:
        return positions
    return seq


def _to(device: str | torch.device, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Inputs:
    def move(value: Any) -> Any:
        return value.to(device) if isinstance(value, torch.Tensor) else value

    return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}


def _token_ids(vocab: int, specials: set[int], batch: int, seq: int, g: torch.Generator) -> torch.Tensor:
    pool = torch.tensor([i for i in range(vocab) if i not in specials] or list(range(vocab)))
    return pool[torch.randint(0, len(pool), (batch, seq), generator=g)]


def _image_inputs(config: Any, model: nn.Module, accepted: set[str], batch: int,
                  g: torch.Generator) -> list[dict[str, Any]]:
    """Pixel inputs: images of the vision config's size, and what the family's own image processor
    makes of an image of that size (with its grids, sizes and masks)."""
    node = vision_node(config) or config
    channels = first_int(node, "num_channels", "in_channels", "in_chans") or 3
    patch = getattr(node, "patch_size", None)
    size = image_size(node)
    sizes = [size] if size is not None else [(patch * 8,) * 2] if isinstance(patch, int) else [(64, 64), (224, 224)]
    found = [{"pixel_values": torch.rand(batch, channels, h, w, generator=g)} for h, w in sizes]
    found += [{"pixel_values": found[0]["pixel_values"].unsqueeze(1)}]  # (batch, images, channels, height, width)
    processed = processed_images(config, model, sizes[0][0], batch, accepted, g) if sizes[0][0] == sizes[0][1] \
        else None
    if processed is not None:
        found.append(processed)
    return found


def _with_image_tokens(config: Any, model: nn.Module, ids: torch.Tensor, pixels: dict[str, Any], accepted: set[str],
                       g: torch.Generator) -> dict[str, Any] | None:
    """Token ids holding one image's placeholder tokens per row (between its start and end tokens
    where the config names them), with the images and token-type ids that mark them. As many
    placeholders as ``get_image_features`` returns vectors, else as the config's per-image token count
    (``mm_tokens_per_image``, ``image_seq_length``, ...) says."""
    image_token = token_attr(config, "image_token_id", "image_token_index", "image_token")
    batch = ids.shape[0]
    count = count_features(model, pixels) if image_token is not None else None
    if count is None and image_token is not None:  # the image features do not come alone: the config's count
        per_image = first_int(config, *_IMAGE_TOKEN_COUNTS)
        count = per_image * batch if per_image else None
    if count is None or count == 0 or count % batch:
        return None
    start = token_attr(config, "vision_start", "image_start", "boi", "start_of_image")
    end = token_attr(config, "vision_end", "image_end", "eoi", "end_of_image")
    image = [image_token] * (count // batch)
    middle = ([start] if start is not None else []) + image + ([end] if end is not None else [])
    rows = [torch.cat([row[:2], torch.tensor(middle, dtype=row.dtype), row[2:]]) for row in ids]
    tokens = torch.stack(rows)
    kwargs = {"input_ids": tokens, **pixels}
    for name in accepted:
        if name.endswith("token_type_ids"):
            kwargs[name] = (tokens == image_token).long()
    return kwargs
