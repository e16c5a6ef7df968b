"""Small readers the input builders share: a config tree's first int of some names, its vision config
and image size, a token id it names, how many vectors a feature getter returns."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from ligerkit.shrink import config_tree
from ligerkit.shrink.parts import as_pair

SEQ = 32  # text tokens per row, at least; more where experts need them


# the width a feature projection takes first: stacked frames are wider than the mel bins
MEL_KEYS = ("feature_projection_input_dim", "num_mel_bins", "feature_size", "input_feat_size", "n_mels",
            "num_mel_filters", "input_dim")


MAX_FRAMES = 3000  # feature frames at most (Whisper's 30 s): longer encoders get a short clip


def vision_node(config: Any) -> Any:
    """The first part of ``config`` with an int ``patch_size`` (its vision config), or ``None``."""
    return next((n for n in config_tree(config) if isinstance(getattr(n, "patch_size", None), int)), None)


_IMAGE_SIZES = ("image_size", "crop_size", "img_size")


def image_size(node: Any) -> tuple[int, int] | None:
    """A vision config's image (height, width): its ``image_size`` (or crop size), an int or a pair."""
    for name in _IMAGE_SIZES:
        found = as_pair(getattr(node, name, None))
        if found is not None:
            return found
    return None


def first_int(config: Any, *names: str) -> int | None:
    """The first int attribute named one of ``names`` in ``config``'s tree."""
    for node in config_tree(config):
        for name in names:
            value = getattr(node, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def count_features(model: nn.Module, pixels: dict[str, Any], getter_name: str = "get_image_features") -> int | None:
    """How many placeholder tokens the images (or the audio) take: the vectors ``get_image_features``
    (``getter_name``) returns."""
    for owner in (model, getattr(model, "model", None)):
        getter = getattr(owner, getter_name, None)
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


def token_attr(config: Any, *words: str) -> int | None:
    """The first int setting of ``config``'s parts whose name says ``token`` and one of ``words``."""
    for node in config_tree(config):
        for name, value in vars(node).items():
            if isinstance(value, int) and not isinstance(value, bool) and "token" in name and \
                    any(w in name for w in words):
                return value
    return None


def config_names(config: Any) -> set[str]:
    """Every setting name of ``config`` and of the configs it holds."""
    return {name for node in config_tree(config) for name in vars(node)}
