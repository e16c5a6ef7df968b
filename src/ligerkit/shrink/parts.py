"""The smaller parts of a shrunk config: a few experts (groups and top-k consistent), a small
vocabulary with its special tokens inside, short sliding windows, small images, matched towers."""

from __future__ import annotations

import math
from typing import Any

from ligerkit.shrink.tree import (
    EXPERT_DEFAULTS,
    FEW_EXPERTS,
    MAX_TOP_K,
    MIN_LAYERS,
    SMALL_VOCAB,
    WINDOW,
    GROUP_KEYS,
    IMAGE_TOKEN_KEYS,
    SHARED_EXPERT_KEYS,
    TOPK_GROUP_KEYS,
    TOP_K_KEYS,
    read_attr,
    int_attrs,
    write_attr,
    config_tree,
    expert_count,
)


def few_experts(config: Any, count: int = FEW_EXPERTS) -> None:
    """At most ``count`` routed experts everywhere in the tree, with top-k, groups and shared experts
    consistent (every group keeps two experts or more, the chosen groups hold top-k of them); an
    expert count left unset by a MoE config's defaults gets :data:`EXPERT_DEFAULTS`. In place."""
    for node in config_tree(config):
        values = vars(node)
        for name, default in EXPERT_DEFAULTS.items():
            if name in values and values[name] is None:
                write_attr(node, name, default)
        groups = next((values[g] for g in GROUP_KEYS if isinstance(values.get(g), int) and values[g] > 1), 1)
        new_groups = min(groups, 2)
        total = max(count, 2 * new_groups)
        for name in [n for n in values if expert_count(n)]:
            value = values.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > total:
                write_attr(node, name, total)
            elif isinstance(value, list) and all(isinstance(v, int) for v in value):
                write_attr(node, name, [min(v, total) for v in value])
        for name in GROUP_KEYS:
            if isinstance(values.get(name), int) and values[name] > 1:
                write_attr(node, name, new_groups)
        for name in TOPK_GROUP_KEYS:
            value = values.get(name)
            if isinstance(value, int) and value > 0:
                write_attr(node, name, new_groups if value >= groups else max(1, min(value, new_groups - 1)))
        for name in TOP_K_KEYS:
            value = values.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOP_K:
                write_attr(node, name, MAX_TOP_K)
        for name in SHARED_EXPERT_KEYS:
            value = values.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                write_attr(node, name, 1)


def _token_names(node: Any) -> list[str]:
    return [k for k in vars(node) if not k.startswith("_") and ("token_id" in k or "token_index" in k
                                                                or k.endswith("_token"))]


def special_token_ids(config: Any) -> set[int]:
    """Every token id a config names (pad/bos/eos, image and other placeholder tokens)."""
    found: set[int] = set()
    for node in config_tree(config):
        for name in _token_names(node):
            value = read_attr(node, name)
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                    found.add(v)
    return found


def small_vocabulary(config: Any, size: int = SMALL_VOCAB) -> None:
    """Every vocabulary larger than ``size`` shrinks to it; special token ids outside it move to its top
    end, in their original order (ranges between them stay ranges). In place."""
    tree = config_tree(config)
    shrunk = False
    for node in tree:
        for name, value in int_attrs(node).items():
            if "vocab" in name and "type_vocab" not in name and not name.startswith("_") and value > size:
                write_attr(node, name, size)
                shrunk = True
    if not shrunk:
        return
    outside = sorted(v for v in special_token_ids(config) if v >= size)
    moved = {old: size - len(outside) + i for i, old in enumerate(outside)}
    for node in tree:
        for name in _token_names(node):
            value = read_attr(node, name)
            if isinstance(value, list):
                write_attr(node, name, [moved.get(v, v) if isinstance(v, int) else v for v in value])
            elif isinstance(value, int) and not isinstance(value, bool):
                write_attr(node, name, moved.get(value, value))


def placeholder_tokens(config: Any) -> None:
    """Image and video placeholder token ids a config leaves unset get free ids at the top of its
    vocabulary (the model then finds its images in the token ids). In place."""
    vocab = next((v for node in config_tree(config) if isinstance(v := read_attr(node, "vocab_size"), int)), None)
    if not isinstance(vocab, int):
        return
    taken = special_token_ids(config)
    free = (i for i in range(vocab - 1, 0, -1) if i not in taken)
    for node in config_tree(config):
        for name, value in list(vars(node).items()):
            if value is None and ("image_token" in name or "video_token" in name) and \
                    name.endswith(("_id", "_index")) and not name.startswith("_"):
                write_attr(node, name, next(free, None))


def matched_towers(config: Any) -> None:
    """A tower's output width (``out_hidden_size`` of a vision or audio sub-config) equal to the text
    model's hidden size, which it feeds: a family's default config may pair towers and text models
    of different sizes. In place."""
    getter = getattr(config, "get_text_config", None)
    text = getter() if callable(getter) else None
    hidden = read_attr(text, "hidden_size") if text is not None and text is not config else None
    if not isinstance(hidden, int):
        return
    for node in config_tree(config):
        if node is not text and isinstance(read_attr(node, "out_hidden_size"), int) and node.out_hidden_size != hidden:
            write_attr(node, "out_hidden_size", hidden)


def shallow_stages(config: Any, blocks: int = MIN_LAYERS) -> None:
    """Per-stage block counts (``depths`` lists of hierarchical vision and audio encoders) at most
    ``blocks`` each: two keep a stage's alternating blocks (shifted windows). In place."""
    for node in config_tree(config):
        for name, value in list(vars(node).items()):
            if (name == "depths" or name.endswith("_depths")) and isinstance(value, list) and value and \
                    all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                write_attr(node, name, [min(v, blocks) for v in value])


def short_windows(config: Any, window: int = WINDOW) -> None:
    """Sliding windows and attention chunks shorter than the probe sequence, so they take effect."""
    for node in config_tree(config):
        for name, value in int_attrs(node).items():
            if name in ("sliding_window", "attention_chunk_size", "sliding_window_size") and value > window:
                write_attr(node, name, window)
        if read_attr(node, "use_cache") is True:
            write_attr(node, "use_cache", False)  # a probe's forward never reads a key/value cache


_MERGES = ("spatial_merge_size", "merge_size", "scale_factor", "pixel_shuffle_factor", "spatial_pool_stride",
           "num_windows_side", "num_windows")  # windows per side of a windowed backbone's partition
_MERGE_RATIOS = ("downsample_ratio", "pixel_shuffle_ratio")


def merge_factor(config: Any) -> int:
    """How many patches per side the tree's image connector merges into one token (a pixel shuffle's
    scale factor, a spatial merge size, the inverse of a downsample ratio) or a windowed backbone splits
    it into (windows per side; a total ``num_windows`` only where no per-side count is given): a patch
    grid's side must be a multiple of it; 1 when nothing merges."""
    factor = 1
    for node in config_tree(config):
        for name, value in vars(node).items():
            if name == "num_windows" and read_attr(node, "num_windows_side") is not None:
                continue  # a total count: the per-side one is what the grid must divide by
            if name in _MERGES and isinstance(value, int) and not isinstance(value, bool) and 1 < value <= 8:
                factor = math.lcm(factor, value)
            elif name in _MERGE_RATIOS and isinstance(value, float) and 0 < value < 1 and (1 / value).is_integer():
                factor = math.lcm(factor, int(1 / value))
    return factor


_SIZE_NAMES = ("image_size", "crop_size", "img_size")


def as_pair(value: Any) -> tuple[int, int] | None:
    """An int or a pair of ints (height, width) as a pair; ``None`` for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return value[0], value[1]
    return None


def _patch(node: Any) -> tuple[int, int] | None:
    """A vision config's patch (height, width): ``patch_size`` (an int or a pair), else the spatial part
    of a video ``tubelet_size`` (time, height, width)."""
    patch = as_pair(read_attr(node, "patch_size"))
    if patch is not None:
        return patch
    tubelet = read_attr(node, "tubelet_size")
    if isinstance(tubelet, (list, tuple)) and len(tubelet) == 3:
        return as_pair(list(tubelet[1:]))
    return None


def _like(old: Any, pair: tuple[int, int]) -> Any:
    """``pair`` in the form of ``old``: an int for an int, else a list or tuple as ``old`` is."""
    if isinstance(old, int):
        return pair[0]
    return type(old)(pair)


def small_images(config: Any, per_side: int = 4, shrink: bool = True) -> bool:
    """Images of a few patches per side (the count divided by a power of two, at least ``per_side``; a
    multiple of :func:`merge_factor`, raised to the next one where a default grid is not), and per-image
    token counts (squares pooled from the patch grid) that fit the new grid. An image size may be an
    int or a (height, width) pair, named ``image_size`` or ``crop_size``; a patch may be ``patch_size``
    or a video tubelet's spatial part. Without ``shrink`` a grid keeps its size, only raised to that
    multiple (token counts then change only with it). In place; ``True`` when anything changed."""
    changed = False
    merge = merge_factor(config)
    for node in config_tree(config):
        name = next((n for n in _SIZE_NAMES if as_pair(read_attr(node, n)) is not None), None)
        size, patch = (as_pair(read_attr(node, name)), _patch(node)) if name else (None, None)
        if size is None or patch is None or size[0] % patch[0] or size[1] % patch[1]:
            continue
        grid = (size[0] // patch[0], size[1] // patch[1])
        shift = 0
        while shrink and all(p % (2 << shift) == 0 and p >> (shift + 1) >= per_side and (p >> (shift + 1)) % merge == 0
                  for p in grid):
            shift += 1
        new = tuple(-(-(p >> shift) // merge) * merge for p in grid)
        if new != grid:
            write_attr(node, name, _like(read_attr(node, name), (new[0] * patch[0], new[1] * patch[1])))
            changed = True
        if grid[0] == grid[1] and (shrink or new != grid):
            changed |= _pooled_tokens(config, grid[0], new[0])
    return changed


_FRAME_COUNTS = ("num_frames", "frames_per_clip")


def short_clips(config: Any, clips: int = 2) -> bool:
    """Video frame counts (``num_frames``, ``frames_per_clip`` of a config that also has an image size)
    cut to ``clips`` temporal tubelets (``tubelet_size``'s time part, else one frame each), so a video
    probe holds a few frames; in place, ``True`` when anything changed."""
    changed = False
    for node in config_tree(config):
        if not any(as_pair(read_attr(node, n)) is not None for n in _SIZE_NAMES):
            continue
        tubelet = read_attr(node, "tubelet_size")
        step = tubelet[0] if isinstance(tubelet, (list, tuple)) and len(tubelet) == 3 else \
            tubelet if isinstance(tubelet, int) and not isinstance(tubelet, bool) else 1
        want = max(1, clips * step)
        for name in _FRAME_COUNTS:
            value = read_attr(node, name)
            if isinstance(value, int) and not isinstance(value, bool) and value > want and value % step == 0:
                write_attr(node, name, want)
                changed = True
    return changed


def _pooled_tokens(config: Any, old: int, new: int) -> bool:
    """Square image-token counts pooled from an ``old``-patch-wide grid, for a ``new``-wide one: the
    same pooling factor where it divides the new grid, else one token per patch."""
    changed = False
    for node in config_tree(config):
        for name, value in int_attrs(node).items():
            side = math.isqrt(value) if value > 0 else 0
            if not any(part in name for part in IMAGE_TOKEN_KEYS) or side * side != value:
                continue
            factor = max(1, old // side) if old % side == 0 or side > old else 0
            fits = new if not factor or new % factor else new // factor
            if fits != side:
                write_attr(node, name, fits * fits)
                changed = True
    return changed
