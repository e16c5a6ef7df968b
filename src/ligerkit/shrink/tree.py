"""Reading a config tree, and its widths: which attributes are hidden sizes, head dims, latent ranks
or head counts, and dividing every width by one power of two so that their relations still hold."""

from __future__ import annotations

import math
from typing import Any


SMALL_HIDDEN = 64  # the widest hidden size small widths aim at (its power-of-two neighbour)
MIN_HEAD_DIM = 8  # no head dim is divided below this (nor below its own value)
MIN_WIDTH = 8  # nor any other width (latent ranks, projections)
SMALL_VOCAB = 512
WINDOW = 16  # sliding windows and attention chunks at most this long: shorter than the probe sequence
FEW_EXPERTS = 4
MAX_TOP_K = 2
MIN_LAYERS = 2
MAX_PREFIX = 16  # a prefix of the layers longer than this is not tried: the depth stays as it is

DEPTH_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth", "encoder_layers", "decoder_layers")
HEAD_KEYS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads",
          "decoder_attention_heads", "attention_heads")
_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts", "num_routed_experts",
            "n_experts")
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_k", "moe_topk", "router_top_k", "experts_per_token",
          "num_selected_experts", "top_k")
_NOT_EXPERT_COUNTS = ("per_tok", "per_token", "shared", "group", "topk", "top_k", "capacity", "layer", "freq", "step")
GROUP_KEYS = ("n_group", "num_expert_group", "moe_num_groups")
TOPK_GROUP_KEYS = ("topk_group", "topk_groups")
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
# MoE configs whose defaults leave an expert count unset (the model then builds no MoE block) get these.
EXPERT_DEFAULTS = {"n_routed_experts": 4, "num_experts": 4, "num_local_experts": 4, "n_shared_experts": 1,
                   "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1}
_NOT_WIDTH = ("vocab", "position", "patch", "image", "window", "kernel", "conv", "chunk", "state", "bucket", "max_",
              "num_", "mel", "sample", "frame", "codebook", "token")
NOT_PER_LAYER = ("token", "mean", "std", "pinpoint", "section", "limit", "range", "shape", "grid", "image")
PATTERN_SUBJECTS = ("layer", "attention", "attn", "sparse", "moe", "expert", "rope", "window", "dense")
PATTERN_STRINGS = ("pattern", "layer", "type", "block")  # a string with one character per layer
IMAGE_TOKEN_KEYS = ("tokens_per_image", "num_image_tokens", "image_seq_length", "image_token_count", "mm_tokens")


# --- the config tree ------------------------------------------------------------------------------

def config_tree(config: Any) -> list[Any]:
    """``config`` and every config object nested in it (sub-configs of sub-configs too), each once."""
    found: list[Any] = []
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        found.append(node)
        for value in list(vars(node).values()):
            if _is_config(value):
                visit(value)

    visit(config)
    return found


def _is_config(value: Any) -> bool:
    if isinstance(value, type) or not hasattr(value, "__dict__"):
        return False
    try:
        from transformers import PretrainedConfig

        if isinstance(value, PretrainedConfig):
            return True
    except ImportError:  # plain configs only
        pass
    return any(k in vars(value) or k in vars(type(value)) for k in ("hidden_size", "num_hidden_layers", "vocab_size"))


def int_attrs(node: Any) -> dict[str, int]:
    """``node``'s int attributes (bools left out)."""
    return {k: v for k, v in vars(node).items() if isinstance(v, int) and not isinstance(v, bool)}


def _int_lists(node: Any) -> dict[str, list[int]]:
    """Every int attribute of ``node`` as a one-element list, and every list of ints (per-layer widths)."""
    found = {k: [v] for k, v in int_attrs(node).items()}
    found.update({k: list(v) for k, v in vars(node).items() if isinstance(v, list) and v
                  and all(isinstance(x, int) and not isinstance(x, bool) for x in v)})
    return found


_MISSING = object()


def read_attr(node: Any, name: str, default: Any = None) -> Any:
    """``node``'s attribute ``name`` (instance attributes first: a config may refuse ``getattr`` for
    some, e.g. per-layer ones), else ``default``."""
    value = vars(node).get(name, _MISSING) if hasattr(node, "__dict__") else _MISSING
    if value is not _MISSING:
        return value
    try:
        return getattr(node, name, default)
    except Exception:
        return default


def write_attr(node: Any, name: str, value: Any) -> None:
    """Set ``node``'s attribute ``name``; a read-only one (derived by the config) is left as it is."""
    try:
        setattr(node, name, value)
    except Exception:  # a read-only (computed) attribute: the config derives it
        pass


# --- widths -----------------------------------------------------------------------------------------

_HEAD_WIDTHS = ("head_dim", "d_kv", "kv_channels", "rotary_dim", "d_head", "head_size", "attention_head_size",
                "rotary_emb_dim", "attention_head_dim", "dim_head")
_HEAD_ENDS = ("_head_dim", "_head_size", "_d_head", "_dim_head", "_kv_channels", "_headdim")
_LOOSE = ("d_ff", "n_inner", "ffn_dim", "ffn_hidden_size", "mlp_dim")
_LOOSE_ENDS = ("_ffn_dim", "_ffn_size", "_mlp_dim", "_d_ff", "mlp_hidden_dim", "_ffn_hidden_size")
_STRICT = ("hidden_size", "d_model", "n_embd", "embed_dim", "embedding_size", "hidden_dim", "dim", "model_dim",
           "projection_dim", "d_embed", "embedding_dim", "word_embed_proj_dim", "d_inner", "d_ssm")
_STRICT_ENDS = ("_hidden_size", "_embed_dim", "_rank", "_hidden_dim", "_model_dim", "_proj_dim", "_embedding_size",
                "_projection_dim", "_embedding_dim", "_d_inner", "_d_ssm")


def width_kind(name: str) -> str | None:
    """How a config attribute named ``name`` scales: ``"head"`` (a per-head width), ``"strict"`` (a
    width other widths relate to exactly: hidden sizes, latent ranks), ``"loose"`` (a feed-forward
    width, rounded when it does not divide) or ``None`` (not a width)."""
    low = name.lower()
    if low.endswith("filters") and not low.startswith("_"):  # a convolution stack's base channel count
        return "strict"
    if low.startswith("_") or any(part in low for part in _NOT_WIDTH):
        return None
    if low in _HEAD_WIDTHS or low.endswith(_HEAD_ENDS):
        return "head"
    if "intermediate" in low or low.startswith("ffn_") or low in _LOOSE or low.endswith(_LOOSE_ENDS):
        return "loose"
    if low.startswith(("hidden_size", "embed_dim")) or low in _STRICT or low.endswith(_STRICT_ENDS):
        return "strict"
    return None


def _rotary_factor(node: Any) -> float | None:
    factor = read_attr(node, "partial_rotary_factor")
    for key in ("rope_parameters", "rope_scaling"):
        rope = read_attr(node, key)
        if isinstance(rope, dict):
            factor = rope.get("partial_rotary_factor", factor)
    return factor if isinstance(factor, float) and 0 < factor < 1 else None


def _sections(node: Any) -> list[list[int]]:
    """mRoPE-style sections (lists of ints in the rope dicts) that add up to a part of a head."""
    found = []
    for key in ("rope_parameters", "rope_scaling"):
        rope = read_attr(node, key)
        for value in (rope.values() if isinstance(rope, dict) else ()):
            if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                found.append(value)
    return found


def _head_dims(node: Any) -> list[int]:
    """Every per-head width of one config: explicit ones, else each hidden size over the head count (a
    vision config may name both its own width, ``embed_dim``, and the width it hands on, ``hidden_size``)."""
    ints = int_attrs(node)
    dims = [v for k, v in ints.items() if width_kind(k) == "head" and v > 0]
    heads = next((ints[h] for h in HEAD_KEYS if ints.get(h)), None)
    if not isinstance(read_attr(node, "head_dim"), int) and heads:
        dims += [ints[k] // heads for k in ("hidden_size", "d_model", "n_embd", "embed_dim")
                 if ints.get(k) and ints[k] % heads == 0]
    return dims


def head_count(name: str) -> bool:
    """Whether a config attribute named ``name`` counts attention (or SSM) heads."""
    low = name.lower()
    return not low.startswith("_") and (low in HEAD_KEYS or "heads" in low) and width_kind(name) is None


def _fits(tree: list[Any], shift: int, head_dims: bool) -> bool:
    div = 1 << shift
    for node in tree:
        ints = int_attrs(node)
        for name, values in _int_lists(node).items():
            kind = width_kind(name)
            for value in values:
                if kind == "strict" and value > 0 and (value % div or value // div < min(value, MIN_WIDTH)):
                    return False
                if not head_dims and head_count(name) and value >= div and value % div:
                    return False
        heads = next((ints[h] for h in HEAD_KEYS if ints.get(h)), None)
        if not head_dims:
            if heads is not None and heads < div:
                return False
            continue
        factor = _rotary_factor(node)
        for dim in _head_dims(node):
            new = dim // div
            if dim % div or new < min(dim, MIN_HEAD_DIM) or (new % 2 and dim % 2 == 0):
                return False
            if factor is not None and (new * factor) % 2:
                return False
        for section in _sections(node):
            if any(v % div for v in section):
                return False
    return True


def width_shift(config: Any, head_dims: bool = True) -> int:
    """The largest ``k`` such that dividing every width of ``config``'s tree by ``2**k`` keeps every
    latent rank whole and above its floor and the widest hidden size at least :data:`SMALL_HIDDEN`;
    with ``head_dims`` the head dims and mRoPE sections are divided too (and stay whole, even and
    above :data:`MIN_HEAD_DIM`), else the head *counts* are (and stay whole, at least one)."""
    tree = config_tree(config)
    widest = max((v for node in tree for k, v in int_attrs(node).items()
                  if k in ("hidden_size", "d_model", "n_embd", "embed_dim")), default=SMALL_HIDDEN)
    shift = max(0, int(math.floor(math.log2(max(widest, 1) / SMALL_HIDDEN))))
    while shift > 0 and not _fits(tree, shift, head_dims):
        shift -= 1
    return shift


def _tied_widths(config: Any) -> set[tuple[int, str]]:
    """Unnamed widths: int settings of a config equal to its own hidden size (e.g. a depthwise
    convolution's group count), which must scale with it."""
    tied = set()
    for node in config_tree(config):
        ints = int_attrs(node)
        hidden = next((ints[k] for k in ("hidden_size", "d_model", "n_embd", "embed_dim") if ints.get(k)), None)
        for name, value in ints.items():
            if hidden and hidden >= 64 and value == hidden and width_kind(name) is None and not head_count(name) \
                    and not expert_count(name) and not name.startswith("_") and \
                    not any(part in name for part in ("vocab", "position", "token", "window", "max_", "chunk")):
                tied.add((id(node), name))
    return tied


def divide_widths(config: Any, shift: int, head_dims: bool = True) -> None:
    """Divide every width in ``config``'s tree by ``2**shift``, in place (loose widths round up to a
    multiple of 8); with ``head_dims`` the per-head widths too, else the head counts instead (at
    least one, group counts kept dividing them)."""
    if shift <= 0:
        return
    div = 1 << shift
    tied = _tied_widths(config)
    before = {id(node): int_attrs(node) for node in config_tree(config)}

    def divided(kind: str | None, value: int) -> int:
        if value <= 0:
            return value
        if kind == "loose":  # a multiple of 8: grouped matmuls want 16-byte strides
            return max(8, -(-value // div // 8) * 8)
        return max(1, value // div)

    for node in config_tree(config):
        for name, values in _int_lists(node).items():
            kind = "strict" if (id(node), name) in tied else width_kind(name)
            if (kind is None and not (not head_dims and head_count(name))) or (kind == "head" and not head_dims):
                continue
            new = [divided(kind, v) for v in values]
            write_attr(node, name, new if isinstance(read_attr(node, name), list) else new[0])
        for section in _sections(node) if head_dims else ():
            section[:] = [max(1, v // div) for v in section]
        if not head_dims:
            _regroup(node, before[id(node)])


def _regroup(node: Any, before: dict[str, int]) -> None:
    """Group counts that divided a head count before it was divided still divide it (SSM groups)."""
    heads = {k: v for k, v in int_attrs(node).items() if head_count(k)}
    for name, value in int_attrs(node).items():
        if "group" not in name.lower() or name.startswith("_") or expert_count(name) or value <= 1:
            continue
        for head, count in heads.items():
            if before.get(head, 0) % value == 0 and count % value:
                write_attr(node, name, math.gcd(value, count))
                break


# --- experts, vocabulary, windows, images -----------------------------------------------------------

def expert_count(name: str) -> bool:
    """Whether a config attribute named ``name`` counts experts of some kind (routed, local, zero-cost),
    rather than experts per token, shared experts or expert groups."""
    low = name.lower()
    return not low.startswith("_") and (low in _EXPERTS or "expert" in low and ("num" in low or low.startswith("n_"))
                                        and not any(x in low for x in _NOT_EXPERT_COUNTS))
