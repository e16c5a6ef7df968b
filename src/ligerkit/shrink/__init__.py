"""Consistent shrinking of a model config, so that a probe can build the *whole* model cheaply.

A verdict about how a symbol's output is used must see the model that holds every use of it (the
causal LM, the conditional-generation model), not a block. Building that model at a family's own
size is too costly for a probe, and shrinking it naively breaks families: a hybrid layer-type list
cut to its first entry drops the full-attention layers, latent-attention ranks no longer fit the
hidden size, a grouped router asks for more groups than there are experts, a model with its first
three layers dense keeps no MoE layer in two. The copies made here keep what the family needs:

- widths (hidden sizes, head dims, latent ranks, intermediate sizes, widths tied to a hidden size)
  are all divided by one power of two across the whole config tree, head *counts* untouched, so
  every sum and product relation among them (``qk_head_dim = nope + rope``, ``heads * head_dim =
  hidden``, a vision tower's output width equal to the text width, mRoPE sections adding up to half
  a head) still holds; or, where per-head widths must stay (a rotary section the code fixes), the
  head counts are divided instead of the head dims, group counts kept dividing them;
- expert counts drop to a few, with their group and top-k settings kept consistent;
- depth drops to the fewest layers whose *layer types* (checked on the meta device against the
  original depth) cover every type the original model has: per-layer lists are sampled, index
  lists remapped, first-N / last-N layer counts recounted, layer periods reduced, else a long
  enough prefix is kept;
- a default config that does not build is repaired first where a standard derived field is unset
  (:mod:`ligerkit.shrink.repair`: ``head_dim`` from the hidden size and head count, ...), and every
  label built from it says so;
- the vocabulary shrinks (special token ids moved inside it, unset image placeholders given one),
  a default config's vision or audio tower hands the text model its own width,
  sliding windows fall below the probe sequence, images shrink to a few patches per side with the
  per-image token counts that fit them (sizes as ints or (height, width) pairs, crop sizes, video
  tubelets), video clips to two tubelets, a backbone's stages and output features with its layers,
  a layer-index list a config holds for a sub-config's stack moved to the layers kept there; a patch
  grid (own or small) a multiple of what merges it or splits it into windows;
- relations only the built model shows (:mod:`ligerkit.shrink.relations`): rotary sections fitted to
  the frequencies a rotary module holds (where they misfit at the config's own widths), axial position
  widths adding up to the hidden size and a shape short enough to be the probe sequence.

Nothing here knows a family by name: every rule is keyed on config attribute names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import nn

from ligerkit.shrink.depth import layer_types, shallow
from ligerkit.shrink.parts import (
    few_experts,
    matched_towers,
    placeholder_tokens,
    shallow_stages,
    short_clips,
    short_windows,
    small_images,
    small_vocabulary,
    special_token_ids,
)
from ligerkit.shrink.relations import axial_length, axial_positions, fitted_sections, sections_misfit
from ligerkit.shrink.repair import repaired_config
from ligerkit.shrink.tree import DEPTH_KEYS, read_attr, config_tree, divide_widths, width_shift

__all__ = ["axial_length", "config_tree", "iter_whole_model_configs", "layer_types", "repaired_config",
           "special_token_ids", "whole_model_configs"]

BuildError = Callable[[Any], BaseException | None]


# --- the configs a whole-model probe tries ----------------------------------------------------------

def whole_model_configs(config: Any, given: bool = False, build: Callable[[Any], nn.Module | None] | None = None,
                        error: BuildError | None = None) -> list[tuple[str, Any]]:
    """Copies of ``config`` to build the whole model from, cheapest first, each with a label.

    A module's default config (``given=False``): small widths (every width divided by one power of
    two, :func:`width_shift`), few experts, a small vocabulary, short windows, small images, the
    fewest layers that keep every layer type (:func:`shallow`; ``build`` checks it); small widths
    with the family's own head dims (head counts divided instead); small widths with the config's
    own image size; then the family's own widths with the same depth, expert and vocabulary
    reductions. A config the caller gave (``given=True``) is honoured first at its own widths (fewer
    layers, every type kept, few experts), then the small-width copies. Copies equal to an earlier
    one are left out. Every copy keeps axial position embeddings consistent (widths adding up to the
    hidden size, a short shape) and, with small images, few video frames; where the config's rotary
    sections misfit its rotary dims even at its own widths, each copy's sections are fitted to them
    (:mod:`ligerkit.shrink.relations`), the label then saying so. A default config that does not build (``error``: its build error, ``None``
    when it builds) is repaired first where that derives what it lacks (:func:`repaired_config`),
    each label then ending with what the repair set; a given config is never repaired.
    """
    return list(iter_whole_model_configs(config, given, build, error))


def iter_whole_model_configs(config: Any, given: bool = False, build: Callable[[Any], nn.Module | None] | None = None,
                             error: BuildError | None = None) -> Iterator[tuple[str, Any]]:
    """:func:`whole_model_configs`, made one at a time (a caller that stops early builds no more)."""
    notes: list[str] = []
    if not given and error is not None:
        config, notes = repaired_config(config, error)
    plans = [("given widths", None, False), ("small widths", True, True), ("small widths, own head dims", False, True),
             ("small widths, own image size", True, False)]
    if not given:
        plans = [*plans[1:], ("own widths", None, False)]
    made: list[Any] = []
    fit: bool | None = None  # rotary sections are fitted only where they misfit at the config's own widths
    for label, head_dims, images in plans:
        try:
            shrunk = copy.deepcopy(config)
        except Exception:  # an uncopyable config is only used as it is
            yield "as given", config
            return
        shift = width_shift(shrunk, head_dims) if head_dims is not None else 0
        divide_widths(shrunk, shift, bool(head_dims))
        few_experts(shrunk)
        small_vocabulary(shrunk)
        placeholder_tokens(shrunk)
        short_windows(shrunk)
        shallow_stages(shrunk)
        axial_positions(shrunk)
        if images:
            small_images(shrunk)
            short_clips(shrunk)
        else:  # the config's own images, their patch grid only raised to what merges or windows divide
            small_images(shrunk, shrink=False)
        if not given:
            matched_towers(shrunk)
        if any(_same(shrunk, other) for other in made):
            continue  # e.g. no image to shrink: the copy with the config's own images is the same
        made.append(copy.deepcopy(shrunk))
        shrunk = shallow(shrunk, build)
        if fit is None:
            fit = sections_misfit(config, build)
        shrunk, fitted = fitted_sections(shrunk, build) if fit else (shrunk, False)
        yield _label(label, shift, shrunk, notes, fitted), shrunk


def _label(label: str, shift: int, config: Any, notes: Sequence[str] = (), fitted: bool = False) -> str:
    depths = sorted({read_attr(n, k) for n in config_tree(config) for k in DEPTH_KEYS
                     if isinstance(read_attr(n, k), int) and not isinstance(read_attr(n, k), bool)})
    details = [f"widths / {1 << shift}" if shift else "", f"{'/'.join(map(str, depths))} layers" if depths else "",
               f"default repaired: {', '.join(notes)}" if notes else "",
               "rope sections fitted to the rotary dims" if fitted else ""]
    details = [d for d in details if d]
    return f"{label} ({', '.join(details)})" if details else label


def _same(a: Any, b: Any) -> bool:
    as_dict = getattr(a, "to_dict", None)
    try:
        if type(a) is not type(b):
            return False
        return as_dict() == b.to_dict() if callable(as_dict) else repr(vars(a)) == repr(vars(b))
    except Exception:
        return False
