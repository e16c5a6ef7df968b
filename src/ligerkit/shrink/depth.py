"""Depth: the fewest layers whose layer types (checked on the meta device) cover every type the
original model has; per-layer lists sampled, index lists remapped, counts and periods recounted."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from torch import nn

from ligerkit.shrink.tree import (
    MAX_PREFIX,
    MIN_LAYERS,
    DEPTH_KEYS,
    NOT_PER_LAYER,
    PATTERN_STRINGS,
    PATTERN_SUBJECTS,
    read_attr,
    int_attrs,
    write_attr,
    config_tree,
    width_kind,
)


# --- depth ------------------------------------------------------------------------------------------

def _depth_groups(node: Any) -> dict[int, list[str]]:
    """Depth attributes of one config, by value."""
    groups: dict[int, list[str]] = {}
    for name in DEPTH_KEYS:
        value = read_attr(node, name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            groups.setdefault(value, []).append(name)
    return groups


def _per_layer(node: Any, depth: int, names: list[str]) -> tuple[list[str], list[str]]:
    """Attributes of ``node`` that describe layers of a ``depth``-deep stack: sequences with one entry
    per layer, and lists of layer indices."""
    sequences, indices = [], []
    for name, value in vars(node).items():
        if name in names or name.startswith("_") or any(part in name for part in NOT_PER_LAYER):
            continue
        if isinstance(value, str) and len(value) == depth and any(p in name for p in PATTERN_STRINGS):
            sequences.append(name)
        elif isinstance(value, (list, tuple)) and len(value) == depth and not _increasing(value):
            sequences.append(name)
        elif isinstance(value, (list, tuple)) and value and _increasing(value) and value[-1] < depth and \
                any(part in name for part in ("layer", "idx", "ind", "ids")):
            indices.append(name)
        elif isinstance(value, (list, tuple)) and len(value) == depth and depth > 2 and _increasing(value):
            indices.append(name)  # every layer listed by index
    return sequences, indices


def _increasing(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value) and all(a < b for a, b in zip(value, value[1:]))


def _pattern_kind(name: str) -> str | None:
    """How an int setting lays out layer types: ``"first"`` (the first N layers: first dense layers),
    ``"last"`` (the last N: layers sharing another's key/values), ``"period"`` / ``"offset"`` (every
    N-th layer, from an offset), else ``None``."""
    low = name.lower()
    if width_kind(name) is not None or low.startswith("_") or not any(p in low for p in PATTERN_SUBJECTS):
        return None
    if low.startswith("first_k") or "dense" in low and ("layer" in low or "replace" in low):
        return "first"
    if "layer" in low and ("shared" in low or "last" in low):
        return "last"
    if "offset" in low and "layer" in low:
        return "offset"
    if any(part in low for part in ("interval", "period", "_step", "freq", "every", "pattern")):
        return "period"
    return None


def _regions(node: Any, depth: int) -> dict[str, tuple[str, int]]:
    """First-N and last-N layer settings of one config that split a ``depth``-deep stack."""
    return {name: (kind, value) for name, value in int_attrs(node).items()
            if (kind := _pattern_kind(name)) in ("first", "last") and 0 < value < depth}


def _in_region(i: int, depth: int, kind: str, value: int) -> bool:
    return i < value if kind == "first" else i >= depth - value


def _reduce_patterns(node: Any) -> None:
    for name, value in int_attrs(node).items():
        if _pattern_kind(name) == "period" and value > 2:
            write_attr(node, name, 2)
    for name, value in int_attrs(node).items():
        if _pattern_kind(name) == "offset" and value > 1:
            write_attr(node, name, 1)


def _cut(node: Any, keep: list[int], depth: int, names: list[str]) -> None:
    """Keep layers ``keep`` (sorted indices into the original ``depth``) of one depth group."""
    sequences, indices = _per_layer(node, depth, names)
    for name in sequences:
        value = read_attr(node, name)
        picked = [value[i] for i in keep]
        write_attr(node, name, "".join(picked) if isinstance(value, str) else type(value)(picked))
    position = {old: new for new, old in enumerate(keep)}
    for name in indices:
        value = read_attr(node, name)
        write_attr(node, name, type(value)(position[i] for i in value if i in position))
    for name, (kind, value) in _regions(node, depth).items():
        write_attr(node, name, sum(_in_region(i, depth, kind, value) for i in keep))
    for name in names:
        write_attr(node, name, len(keep))
    _cut_stages(node, keep, depth)


def _cut_stages(node: Any, keep: list[int], depth: int) -> None:
    """A backbone's stages (``stage_names``: a stem, then one per layer) cut to the kept layers, and
    its output features moved with them: a feature of a dropped layer is taken from the nearest kept
    layer below it (the stem stays the stem), so a backbone still returns feature maps."""
    stages = read_attr(node, "stage_names")
    if not (isinstance(stages, list) and len(stages) == depth + 1 and all(isinstance(n, str) for n in stages)):
        return
    wanted = read_attr(node, "out_features")
    new = stages[: len(keep) + 1]

    def moved(name: str) -> str:
        layer = stages.index(name) - 1
        if layer < 0:
            return new[0]
        below = [pos for pos, kept in enumerate(keep) if kept <= layer]
        return new[(below[-1] if below else 0) + 1]

    features = list(dict.fromkeys(moved(n) for n in wanted if n in stages)) if isinstance(wanted, list) else None
    write_attr(node, "stage_names", new)
    setter = getattr(node, "set_output_features_output_indices", None)
    if callable(setter) and features is not None:
        try:
            setter(out_features=[f for f in new if f in features], out_indices=None)
        except Exception:  # noqa: BLE001 - a backbone that refuses them keeps its own
            pass


def _distinct_layers(node: Any, depth: int, names: list[str]) -> list[int]:
    """The first layer of every distinct combination of per-layer settings (listed per layer, by
    index, or as first / last N layers), in order."""
    sequences, indices = _per_layer(node, depth, names)
    regions = _regions(node, depth).values()
    seen: dict[tuple[Any, ...], int] = {}
    for i in range(depth):
        key = tuple(repr(read_attr(node, s)[i]) for s in sequences) + tuple(i in read_attr(node, n) for n in indices) + \
            tuple(_in_region(i, depth, kind, value) for kind, value in regions)
        seen.setdefault(key, i)
    return sorted(seen.values())


def layer_types(model: nn.Module) -> set[tuple[str, Any]]:
    """What kinds of layers a model stacks: for every module list (layer indices in its path replaced
    by ``*``), the distinct structures of its entries (submodule classes, parameter shapes, and their
    str / bool / None attributes such as an attention type)."""
    found: set[tuple[str, Any]] = set()
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList):
            where = ".".join("*" if part.isdigit() else part for part in path.split("."))
            found.update((where, _structure(child)) for child in module)
    return found


def _structure(module: nn.Module) -> tuple[Any, ...]:
    parts = []
    for path, sub in module.named_modules():
        where = ".".join("*" if part.isdigit() else part for part in path.split("."))
        shapes = tuple(tuple(p.shape) for p in sub.parameters(recurse=False))
        flags = tuple(sorted((k, v if v is None or isinstance(v, (str, bool)) else "int")
                             for k, v in vars(sub).items() if not k.startswith("_") and k != "training"
                             and (v is None or isinstance(v, (str, bool, int)))))
        parts.append((where, type(sub).__name__, shapes, flags))
    return tuple(sorted(set(parts), key=repr))


def shallow(config: Any, build: Callable[[Any], nn.Module | None] | None = None) -> Any:
    """A copy of ``config`` with the fewest layers that keep every layer type of its model.

    ``build`` (a meta-device build of the top model, ``None`` when it fails) is what checks that:
    the copy's :func:`layer_types` must cover those of ``config`` at its own depth. Tried in order:
    one layer of each distinct per-layer setting (``layer_types``-style lists sampled, index lists
    remapped) with first-dense counts set to one and layer periods to two, growing by a layer up to
    three times; then prefixes of the original layers. Without ``build``, the first of those; when
    none covers, ``config`` itself.
    """
    tried = list(_depth_candidates(config))
    if build is None:
        return tried[0] if tried else config
    full = build(config)
    if full is None:
        return tried[0] if tried else config
    wanted = layer_types(full)
    del full
    for candidate in tried:
        model = build(candidate)
        if model is not None and layer_types(model) >= wanted:
            return candidate
    return config


def _depth_candidates(config: Any) -> Iterable[Any]:
    nodes = [(i, node, _depth_groups(node)) for i, node in enumerate(config_tree(config))]
    if not any(groups for _, _, groups in nodes):
        return
    foreign = _foreign_indices(config, nodes)
    for extra in range(4):
        shrunk = copy.deepcopy(config)
        tree = config_tree(shrunk)
        kept: dict[tuple[int, int], list[int]] = {}
        for i, node, groups in nodes:
            for depth, names in groups.items():
                keep = _distinct_layers(node, depth, names)
                rest = [j for j in range(depth) if j not in keep]
                wanted = max(MIN_LAYERS, len(keep)) + extra - len(keep)
                kept[i, depth] = sorted(keep + rest[:max(0, wanted)])
                _cut(tree[i], kept[i, depth], depth, names)
            _reduce_patterns(tree[i])
        _remap_foreign(tree, foreign, kept)
        yield shrunk
    deepest = max(depth for _, _, groups in nodes for depth in groups)
    for length in range(MIN_LAYERS, min(deepest, MAX_PREFIX) + 1):
        shrunk = copy.deepcopy(config)
        tree = config_tree(shrunk)
        kept = {}
        for i, node, groups in nodes:
            for depth, names in groups.items():
                if depth > length:
                    kept[i, depth] = list(range(length))
                    _cut(tree[i], kept[i, depth], depth, names)
        _remap_foreign(tree, foreign, kept)
        yield shrunk


Foreign = list[tuple[int, str, list[tuple[int, int]]]]


def _foreign_indices(config: Any, nodes: list[tuple[int, Any, dict[int, list[str]]]]) -> Foreign:
    """Layer-index lists a config holds for a stack of one of its sub-configs (a top config's layers
    to take features from, indexing its vision tower; named for layers, not feature levels): for each,
    the index of the config holding it, its name, and the (sub-config index, depth) stacks deep enough
    for every index in it. Lists a config's own depth already remaps are left to that."""
    tree = config_tree(config)
    where = {id(node): i for i, node in enumerate(tree)}
    found = []
    for i, node, groups in nodes:
        own = {name for depth, names in groups.items() for part in _per_layer(node, depth, names) for name in part}
        below = [(where[id(sub)], depth) for sub in config_tree(node)[1:] for depth in _depth_groups(sub)]
        for name, value in vars(node).items():
            if name in own or name.startswith("_") or not _increasing(value) or \
                    "layer" not in name or any(part in name for part in NOT_PER_LAYER):
                continue
            stacks = [(j, depth) for j, depth in below if value[-1] < depth]
            if stacks:
                found.append((i, name, stacks))
    return found


def _remap_foreign(tree: list[Any], foreign: Foreign, kept: dict[tuple[int, int], list[int]]) -> None:
    """Each foreign layer-index list moved to the kept layers of the stacks it may index: an index of a
    dropped layer takes the nearest kept layer below it (the first where none is), repeats merged, so
    every index stays inside every stack it may point into."""
    for i, name, stacks in foreign:
        value = read_attr(tree[i], name)
        moved = [min(_nearest_below(kept.get(stack, list(range(stack[1]))), v) for stack in stacks) for v in value]
        write_attr(tree[i], name, type(value)(dict.fromkeys(moved)))


def _nearest_below(keep: list[int], index: int) -> int:
    below = [pos for pos, old in enumerate(keep) if old <= index]
    return below[-1] if below else 0
