"""Relations a shrunk config must keep that only the built model shows, or that tie a width to a
shape: rotary sections that must add up to the rotary frequencies a rotary module holds, axial
position embeddings whose widths add up to the hidden size and whose shape multiplies to the
sequence length.

A multimodal rotary embedding splits its frequencies into per-axis sections (``mrope_section``);
the section list may come from the config's rope dict or from the modeling code's own default
(tied to a checkpoint's head dim, not to the config's). Once widths change, or where a default
config's head dim differs from the checkpoint's, the sections no longer add up to the frequencies and
the forward fails (``split_with_sizes expects split_sizes to sum exactly to ...``). The module's own
attributes say both sides of the relation, so a meta-device build checks it: :func:`fitted_sections`
writes sections scaled to fit into the config's rope dict, under the module's attribute name. The
shrink fits them only for a config whose sections misfit at its own widths (:func:`sections_misfit`):
a family whose sections fit there keeps its own head dims when widths shrink (a copy that divides them
fails and the next one is tried), as it did before.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from torch import nn

from ligerkit.shrink.tree import read_attr, int_attrs, write_attr, config_tree

_ROPE_DICTS = ("rope_parameters", "rope_scaling")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value)


def fit_section(section: list[int], total: int) -> list[int] | None:
    """``section`` scaled to add up to ``total``, each entry at least one (largest remainders get the
    rounding); ``None`` when ``total`` is smaller than the number of entries."""
    if total < len(section) or sum(section) <= 0:
        return None
    whole = sum(section)
    raw = [v * total / whole for v in section]
    out = [max(1, int(r)) for r in raw]
    while sum(out) < total:
        i = max(range(len(out)), key=lambda j: (raw[j] - out[j], -j))
        out[i] += 1
    while sum(out) > total:
        i = max((j for j in range(len(out)) if out[j] > 1), key=lambda j: (out[j] - raw[j], j))
        out[i] -= 1
    return out


def section_misfits(model: nn.Module) -> list[tuple[nn.Module, str, list[int], int]]:
    """Every rotary module of ``model`` holding a section list (an int-list attribute named
    ``*section*``) that does not add up to its frequencies (the last size of its ``inv_freq``):
    ``(module, attribute, section, frequencies)``."""
    found = []
    for module in model.modules():
        inv = getattr(module, "inv_freq", None)
        shape = getattr(inv, "shape", None)
        if not shape:
            continue
        for name, value in vars(module).items():
            if "section" in name and not name.startswith("_") and _int_list(value) and sum(value) != shape[-1]:
                found.append((module, name, list(value), int(shape[-1])))
    return found


def _rope_owners(config: Any, module: nn.Module) -> list[Any]:
    """The configs of ``config``'s tree whose rope dict ``module`` reads: those of the type of its own
    ``config`` attribute, else the text config, else every config with a rope dict."""
    tree = config_tree(config)
    with_rope = [n for n in tree if any(isinstance(read_attr(n, k), dict) for k in _ROPE_DICTS)]
    own = getattr(module, "config", None)
    if own is not None:
        typed = [n for n in with_rope if type(n) is type(own)]
        if typed:
            return typed
    getter = getattr(config, "get_text_config", None)
    try:
        text = getter() if callable(getter) else None
    except Exception:  # noqa: BLE001 - a config whose text config cannot be found
        text = None
    if text is not None and any(text is n for n in with_rope):
        return [text]
    return with_rope


def sections_misfit(config: Any, build: Callable[[Any], nn.Module | None] | None) -> bool:
    """Whether ``config``'s own model (``build``: a meta-device build) holds a rotary section that does
    not add up to its frequencies: a default whose sections do not fit even at its own widths (the
    modeling code's default sections tied to another head dim)."""
    model = build(config) if build is not None else None
    return model is not None and bool(section_misfits(model))


def fitted_sections(config: Any, build: Callable[[Any], nn.Module | None] | None) -> tuple[Any, bool]:
    """``config`` with every rotary section its model's rotary modules hold scaled to add up to their
    frequencies (:func:`section_misfits`, :func:`fit_section`), written into the rope dict of the
    config each module reads under the module's attribute name, and ``True``; ``config`` itself and
    ``False`` when every section fits, nothing can be fitted, or the fitted copy does not build or
    still misfits. ``build`` is a meta-device build (``None`` when it fails)."""
    if build is None:
        return config, False
    model = build(config)
    misfits = section_misfits(model) if model is not None else []
    del model
    if not misfits:
        return config, False
    try:
        fixed = copy.deepcopy(config)
    except Exception:  # noqa: BLE001 - an uncopyable config is used as it is
        return config, False
    for module, name, section, total in misfits:
        fitted = fit_section(section, total)
        if fitted is None:
            return config, False
        for node in _rope_owners(fixed, module):
            for key in _ROPE_DICTS:
                rope = read_attr(node, key)
                if isinstance(rope, dict):
                    rope[name] = list(fitted)
                    break
    again = build(fixed)
    if again is None or section_misfits(again):
        return config, False
    return fixed, True


# --- axial position embeddings ------------------------------------------------------------------------

AXIAL_POSITIONS = 64  # an axial position shape multiplies to at most this many positions after shrinking


def _ints_seq(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)


def axial_positions(config: Any, positions: int = AXIAL_POSITIONS) -> bool:
    """Axial position settings consistent with the (shrunk) config, in place: axial embedding widths
    (``axial_*dim*``, ints that must add up to the hidden size) scaled to add up to it, and an axial
    position shape (``axial_*shape``, whose product is the sequence length a training forward takes)
    halved, largest factor first, until its product is at most ``positions``. Lists and tuples keep
    their type; ``True`` when anything changed."""
    changed = False
    for node in config_tree(config):
        ints = int_attrs(node)
        hidden = next((ints[k] for k in ("hidden_size", "d_model") if ints.get(k)), None)
        for name, value in list(vars(node).items()):
            if not name.startswith("axial") or not _ints_seq(value):
                continue
            if "dim" in name and hidden and sum(value) != hidden:
                fitted = fit_section(list(value), hidden)
                if fitted is not None:
                    write_attr(node, name, type(value)(fitted))
                    changed = True
            elif "shape" in name:
                shape = list(value)
                while math.prod(shape) > positions and max(shape) > 1 and max(shape) % 2 == 0:
                    shape[shape.index(max(shape))] //= 2
                if shape != list(value):
                    write_attr(node, name, type(value)(shape))
                    changed = True
    return changed


def axial_length(config: Any) -> int | None:
    """The sequence length an axial position shape asks for (the product of its factors), if any."""
    for node in config_tree(config):
        for name, value in vars(node).items():
            if name.startswith("axial") and "shape" in name and _ints_seq(value):
                return math.prod(value)
    return None
