"""Inputs a whole model's forward takes: token ids long enough to route every expert, images with
their placeholder tokens, audio features; all on the probe's device."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch
from torch import nn

from ligerkit.hf import quiet_transformers, text_config
from ligerkit.shrink import config_tree, special_token_ids


BATCH = 2


# --- inputs -----------------------------------------------------------------------------------------

SEQ = 32  # text tokens per row, at least; more where experts need them
_NAMED_INPUTS = ("input_ids", "pixel_values", "input_values", "input_features", "inputs_embeds")
_IMAGE_TOKEN_COUNTS = ("mm_tokens_per_image", "image_seq_length", "image_seq_len", "num_image_tokens",
                       "tokens_per_image", "image_token_count")
_MEL = ("num_mel_bins", "feature_size", "input_feat_size", "n_mels", "num_mel_filters", "input_dim")
Inputs = tuple[tuple[Any, ...], dict[str, Any]]


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
    refer to, token ids (and decoder ids), images, audio, then positional token ids or hidden states.
    Token ids avoid every special token id of the config; all tensors are on ``device``."""
    g = torch.Generator().manual_seed(11)
    params = inspect.signature(model.forward).parameters
    accepted = set(params)
    seq = sequence_length(config, batch)
    text = text_config(config)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None)
    ids = _token_ids(vocab, special_token_ids(config), batch, seq, g) if isinstance(vocab, int) and vocab > 3 else None
    found: list[Inputs] = []
    extra = {p.name: ids for p in params.values() if p.name.endswith("_input_ids") and p.default is p.empty
             and p.name != "decoder_input_ids"} if ids is not None else {}  # e.g. a Q-Former's own token ids
    images = _image_inputs(config, model, accepted, batch, g) if "pixel_values" in accepted else []
    if ids is not None and "input_ids" in accepted:
        for pixels in images:
            with_tokens = _with_image_tokens(config, model, ids, pixels, accepted, g)
            if with_tokens is not None:
                found.append(((), {**extra, **with_tokens}))
        plain: dict[str, Any] = {"input_ids": ids, **extra}
        plain.update({name: torch.zeros_like(ids) for name in accepted if name.startswith("mm_") and
                      name.endswith("token_type_ids")})  # text only: every token is text
        if "decoder_input_ids" in accepted:
            plain["decoder_input_ids"] = ids.flip(-1)
        found += [((), {**plain, **pixels}) for pixels in images]  # text and images side by side (CLIP-like)
        found.append(((), plain))
    found += [((), pixels) for pixels in images]
    found += [((), audio) for audio in _audio_inputs(config, accepted, batch, ids, g)]
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional and positional[0].name not in _NAMED_INPUTS:
        if ids is not None:
            found.append(((ids,), {}))
        width = getattr(text, "hidden_size", None) or getattr(config, "hidden_size", None)
        if isinstance(width, int):
            found.append(((torch.randn(batch, seq, width, generator=g),), {}))
    return [_to(device, args, kwargs) for args, kwargs in found]


def _to(device: str | torch.device, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Inputs:
    def move(value: Any) -> Any:
        return value.to(device) if isinstance(value, torch.Tensor) else value

    return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}


def _token_ids(vocab: int, specials: set[int], batch: int, seq: int, g: torch.Generator) -> torch.Tensor:
    pool = torch.tensor([i for i in range(vocab) if i not in specials] or list(range(vocab)))
    return pool[torch.randint(0, len(pool), (batch, seq), generator=g)]


def _vision_node(config: Any) -> Any:
    return next((n for n in config_tree(config) if isinstance(getattr(n, "patch_size", None), int)), None)


def _first_int(config: Any, *names: str) -> int | None:
    """The first int attribute named one of ``names`` in ``config``'s tree."""
    for node in config_tree(config):
        for name in names:
            value = getattr(node, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _image_inputs(config: Any, model: nn.Module, accepted: set[str], batch: int,
                  g: torch.Generator) -> list[dict[str, Any]]:
    """Pixel inputs: images of the vision config's size, and what the family's own image processor
    makes of an image of that size (with its grids, sizes and masks)."""
    node = _vision_node(config) or config
    channels = _first_int(node, "num_channels", "in_channels", "in_chans") or 3
    patch = getattr(node, "patch_size", None)
    size = getattr(node, "image_size", None)
    sizes = [size] if isinstance(size, int) else [patch * 8] if isinstance(patch, int) else [64, 224]
    found = [{"pixel_values": torch.rand(batch, channels, s, s, generator=g)} for s in sizes]
    found += [{"pixel_values": found[0]["pixel_values"].unsqueeze(1)}]  # (batch, images, channels, height, width)
    processed = _processed_images(config, model, sizes[0], batch, accepted, g)
    if processed is not None:
        found.append(processed)
    return found


def _processor_classes(config: Any, model: nn.Module) -> list[type]:
    """The family's image processor classes: transformers' own mapping for the config's model type,
    else the ``image_processing_*`` modules beside the modeling module; for a family derived from others
    without a processor of its own, those of the families it derives from (:func:`parent_families`)."""
    import importlib

    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    family = type(model).__module__.rsplit(".", 1)[0]
    short = family.rsplit(".", 1)[-1]
    found: list[type] = []
    for model_type in [getattr(config, "model_type", ""), short, *parent_families(type(model).__module__)]:
        names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type, {})
        for name in (names.values() if isinstance(names, dict) else [names] if isinstance(names, str) else names or ()):
            try:
                found.append(getattr(transformers, name))
            except Exception:  # a backend (torchvision) this machine lacks
                continue
        root = f"{family.rsplit('.', 1)[0]}.{model_type}"
        for module_name in (f"{root}.image_processing_{model_type}", f"{root}.image_processing_pil_{model_type}"):
            try:
                processing = importlib.import_module(module_name)
            except Exception:
                continue
            found += [v for v in vars(processing).values() if isinstance(v, type) and v.__module__ == module_name
                      and "ImageProcessor" in v.__name__ and not v.__name__.endswith("Kwargs")]
        if found:
            break
    return list(dict.fromkeys(found))


def parent_families(module_name: str) -> list[str]:
    """The families a generated modeling module derives from, in the order its ``modular_*`` source beside
    it imports them (``from ..qwen3_vl.modeling_qwen3_vl import ...``); read as text, never imported."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        return []
    here = Path(spec.origin).parent
    source = here / f"modular_{here.name}.py"
    try:
        text = source.read_text()
    except OSError:
        return []
    return list(dict.fromkeys(m for m in re.findall(r"^from \.\.(\w+)\.", text, re.M) if m != here.name))


def _processed_images(config: Any, model: nn.Module, size: int, batch: int, accepted: set[str],
                      g: torch.Generator) -> dict[str, Any] | None:
    """What the family's own image processor makes of ``batch`` random images ``size`` pixels wide:
    pixels with the grids, sizes and masks the model takes."""
    import numpy as np

    image = (torch.rand(size, size, 3, generator=g) * 255).to(torch.uint8).numpy()
    vision = _vision_node(config) or config
    for cls in _processor_classes(config, model):
        try:
            with quiet_transformers(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                processor = cls()
                _match_processor(processor, vision)
                out = dict(processor([np.asarray(image)] * batch, return_tensors="pt"))
        except Exception:  # noqa: BLE001 - a processor that does not take these images (or returns no mapping)
            continue
        kept = {k: v for k, v in out.items() if k in accepted and isinstance(v, torch.Tensor)}
        if "pixel_values" in kept:
            kept["pixel_values"] = kept["pixel_values"].float()
            return kept
    return None


def _match_processor(processor: Any, vision: Any) -> None:
    """Set the processor's int settings (patch size, merge size) to the vision config's, matched by
    name (``merge_size`` takes ``spatial_merge_size``)."""
    for name, value in list(vars(processor).items()):
        if not isinstance(value, int) or isinstance(value, bool) or name.startswith("_"):
            continue
        for attr, own in vars(vision).items():
            if (attr == name or attr.endswith(f"_{name}")) and isinstance(own, int) and not isinstance(own, bool):
                setattr(processor, name, own)
                break


def _count_features(model: nn.Module, pixels: dict[str, Any]) -> int | None:
    """How many placeholder tokens the images take: the vectors ``get_image_features`` returns."""
    for owner in (model, getattr(model, "model", None)):
        getter = getattr(owner, "get_image_features", None)
        if not callable(getter):
            continue
        accepted = inspect.signature(getter).parameters
        anything = any(p.kind == p.VAR_KEYWORD for p in accepted.values())
        kwargs = {k: v for k, v in pixels.items() if k in accepted or anything}
        try:
            with torch.no_grad():
                out = getter(**kwargs)
        except Exception:
            continue
        features = getattr(out, "pooler_output", None)
        features = features if features is not None else getattr(out, "last_hidden_state", out)
        listed = features if isinstance(features, (list, tuple)) else [features]
        tensors = [t for t in listed if isinstance(t, torch.Tensor)]
        if tensors:
            return sum(t.numel() // t.shape[-1] for t in tensors)
    return None


def _token_attr(config: Any, *words: str) -> int | None:
    for node in config_tree(config):
        for name, value in vars(node).items():
            if isinstance(value, int) and not isinstance(value, bool) and "token" in name and \
                    any(w in name for w in words):
                return value
    return None


def _with_image_tokens(config: Any, model: nn.Module, ids: torch.Tensor, pixels: dict[str, Any], accepted: set[str],
                       g: torch.Generator) -> dict[str, Any] | None:
    """Token ids holding one image's placeholder tokens per row (between its start and end tokens
    where the config names them), with the images and token-type ids that mark them. As many
    placeholders as ``get_image_features`` returns vectors, else as the config's per-image token count
    (``mm_tokens_per_image``, ``image_seq_length``, ...) says."""
    image_token = _token_attr(config, "image_token_id", "image_token_index", "image_token")
    batch = ids.shape[0]
    count = _count_features(model, pixels) if image_token is not None else None
    if count is None and image_token is not None:  # the image features do not come alone: the config's count
        per_image = _first_int(config, *_IMAGE_TOKEN_COUNTS)
        count = per_image * batch if per_image else None
    if count is None or count == 0 or count % batch:
        return None
    start = _token_attr(config, "vision_start", "image_start", "boi", "start_of_image")
    end = _token_attr(config, "vision_end", "image_end", "eoi", "end_of_image")
    image = [image_token] * (count // batch)
    middle = ([start] if start is not None else []) + image + ([end] if end is not None else [])
    rows = [torch.cat([row[:2], torch.tensor(middle, dtype=row.dtype), row[2:]]) for row in ids]
    tokens = torch.stack(rows)
    kwargs = {"input_ids": tokens, **pixels}
    for name in accepted:
        if name.endswith("token_type_ids"):
            kwargs[name] = (tokens == image_token).long()
    return kwargs


def _audio_inputs(config: Any, accepted: set[str], batch: int, ids: torch.Tensor | None,
                  g: torch.Generator) -> list[dict[str, Any]]:
    """Waveforms (batch, time) and (batch, channels, time), spectrogram frames, mel features."""
    found: list[dict[str, Any]] = []
    extra = {"decoder_input_ids": ids} if ids is not None and "decoder_input_ids" in accepted else {}
    bins = _first_int(config, *_MEL)
    if "input_values" in accepted:
        found.append({"input_values": torch.randn(batch, 8000, generator=g), **extra})
        channels = _first_int(config, "audio_channels") or 1
        found.append({"input_values": torch.randn(batch, channels, 8000, generator=g), **extra})
        if bins:  # spectrogram frames (time, bins)
            frames = _first_int(config, "max_length") or 64
            found.append({"input_values": torch.randn(batch, frames, bins, generator=g), **extra})
    if "input_features" in accepted:
        bins = bins or 80
        positions = _first_int(config, "max_source_positions")
        for frames in dict.fromkeys([2 * positions if positions else 64, 64]):
            found.append({"input_features": torch.randn(batch, bins, frames, generator=g), **extra})
            found.append({"input_features": torch.randn(batch, frames, bins, generator=g), **extra})
    return found
