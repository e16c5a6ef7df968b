"""What a model config's sizes may be, checked before anything is built from them.

A key named like a size (``hidden_size``, ``head_dim``, ``num_hidden_layers``, ``vocab_size``, ...) holds a
positive integer; a count that a config class loops
over as it is built (layers, experts) holds at most :data:`MAX_COUNT`. A negative width passed on to a
config class is not refused there: it fails deep inside a model's build, or builds something no one
asked for. The recipe config's ``model.config`` keys (``ligerkit.train.config.checks``) and ``suggest``'s
``--set`` and JSON values are held to this one rule. ``None`` (a size the class derives) and lists (not
always of sizes) are left to the config class.
"""

from __future__ import annotations

from typing import Any

SIZE_SUFFIXES = ("_size", "_dim", "_layers", "_heads", "vocab_size", "_experts", "_embeddings")
COUNT_SUFFIXES = ("_layers", "_experts")
WIDTH_SUFFIXES = ("_size", "_dim", "_heads")  # never a switch: true or false there is a mistake
MAX_COUNT = 10_000
"""Beyond this many layers or experts, building a config alone takes seconds to minutes; the deepest trained
models have a few hundred layers, the widest a few hundred experts."""


def size_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the config key ``key`` (a dotted path ends with the key), or ``None``:
    a size-like key whose value is not a positive integer, or a count over :data:`MAX_COUNT`."""
    name = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):  # a switch named like a count (tie_word_embeddings, copy_layers): not a size;
        return f"{value!r} is not a size; it must be a positive integer" if name.endswith(WIDTH_SUFFIXES) else None
    if not name.endswith(SIZE_SUFFIXES) or value is None or isinstance(value, (dict, list, tuple)):
        return None  # a list is not always of sizes (``no_rope_layers: [1, 0, ...]``): left to the config class
    if not isinstance(value, int) or value <= 0:
        return f"{value!r} is not a size; it must be a positive integer"
    if name.endswith(COUNT_SUFFIXES) and value > MAX_COUNT:
        return f"{value:,} is more than {MAX_COUNT:,} (the deepest trained models have a few hundred layers); lower it"
    return None
