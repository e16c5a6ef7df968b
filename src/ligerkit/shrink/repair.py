"""Repairing a family's default config that does not build: standard derived fields it leaves unset.

Some families ship their config class as a placeholder: ``MinistralConfig()`` leaves ``head_dim``
``None`` (every checkpoint's ``config.json`` sets it), ``NemotronConfig()`` leaves the key/value head
count ``None``, a sub-config lacks a setting the modeling code reads from it though the config holding
it has one. The model then does not build from the defaults, and a probe would call the family
unproven for a reason no real checkpoint has. The repairs here only *derive*: each fills a field from
others of the same config by the rule transformers itself uses where it derives it, never invents a
size or a count the family leaves open (those families stay unproven):

- ``head_dim`` unset: ``hidden_size // num_attention_heads`` (where it divides);
- ``num_key_value_heads`` unset or missing: ``num_attention_heads`` (no grouping);
- tuples of ints: lists, as a config saved and loaded as JSON holds them;
- a setting the model reads from a sub-config that lacks it: the same setting of a config that holds
  the sub-config (an attribute, or a key of its rope parameters).

A repair is applied only when the default does not build and the repaired copy does; each says what it
set, for the label of every config shrunk from it (a verdict then says what config it ran).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from ligerkit.shrink.tree import HEAD_KEYS, read_attr, write_attr, config_tree

_HIDDEN = ("hidden_size", "d_model", "n_embd", "embed_dim")
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_ROUNDS = 4  # missing settings repaired one at a time, at most this many


def repaired_config(config: Any, error: Callable[[Any], BaseException | None]) -> tuple[Any, list[str]]:
    """``config`` as it is when it builds (``error`` returns ``None``), else a repaired copy that builds
    and the notes saying what each repair set; ``config`` and no notes when no repair makes it build."""
    failure = error(config)
    if failure is None:
        return config, []
    try:
        fixed = copy.deepcopy(config)
    except Exception:  # an uncopyable config is used as it is
        return config, []
    notes = unset_derived_fields(fixed)
    for _ in range(_ROUNDS):
        failure = error(fixed)
        if failure is None:
            return (fixed, notes) if notes else (config, [])
        note = missing_setting(fixed, failure)
        if note is None:
            break
        notes.append(note)
    return config, []


def unset_derived_fields(config: Any) -> list[str]:
    """Fill the standard derived fields every config of ``config``'s tree leaves ``None`` (head dim, key/value
    heads) and turn tuples of ints into lists, in place; a note for each kind of field set."""
    notes: dict[str, None] = {}
    for node in config_tree(config):
        values = vars(node)
        heads = next((values[h] for h in HEAD_KEYS if _is_int(values.get(h)) and values[h] > 0), None)
        hidden = next((values[h] for h in _HIDDEN if _is_int(values.get(h)) and values[h] > 0), None)
        if "head_dim" in values and values["head_dim"] is None and heads and hidden and hidden % heads == 0:
            write_attr(node, "head_dim", hidden // heads)
            notes["head_dim = hidden_size // num_attention_heads"] = None
        if "num_key_value_heads" in values and values["num_key_value_heads"] is None and heads:
            write_attr(node, "num_key_value_heads", heads)
            notes["num_key_value_heads = num_attention_heads"] = None
        for name, value in list(values.items()):
            if isinstance(value, tuple) and value and all(_is_int(v) for v in value) and not name.startswith("_"):
                write_attr(node, name, list(value))
                notes["tuples as lists (as JSON loads them)"] = None
    return list(notes)


def missing_setting(config: Any, failure: BaseException) -> str | None:
    """Repair the setting ``failure`` (an ``AttributeError``: ``'XConfig' object has no attribute 'y'``)
    says a config of ``config``'s tree lacks, in place, from the same config or one holding it; a note,
    else ``None`` when it names no config of the tree or nothing derives the setting."""
    found = _MISSING.search(str(failure)) if isinstance(failure, AttributeError) else None
    if found is None:
        return None
    owner, name = found.groups()
    tree = config_tree(config)
    for node in (n for n in tree if type(n).__name__ == owner and name not in vars(n)):
        if name == "num_key_value_heads":
            heads = next((read_attr(node, h) for h in HEAD_KEYS if _is_int(read_attr(node, h))), None)
            if heads:
                write_attr(node, name, heads)
                return f"{owner}.num_key_value_heads = num_attention_heads"
        for holder in _holders(node, tree):
            value = _setting(holder, name)
            if value is not None:
                write_attr(node, name, copy.deepcopy(value))
                if name in vars(node):
                    return f"{owner}.{name} from {type(holder).__name__}"
    return None


def _holders(node: Any, tree: list[Any]) -> list[Any]:
    """The configs of ``tree`` that hold ``node``, nearest first (its holder, then that one's, ...)."""
    parent = {id(child): holder for holder in tree for child in vars(holder).values() if child is not holder
              and any(child is n for n in tree)}
    found, current = [], parent.get(id(node))
    while current is not None and all(current is not f for f in found):
        found.append(current)
        current = parent.get(id(current))
    return found


def _setting(holder: Any, name: str) -> Any:
    value = vars(holder).get(name)
    if value is not None:
        return value
    for key in ("rope_parameters", "rope_scaling"):
        rope = vars(holder).get(key)
        if isinstance(rope, dict) and rope.get(name) is not None:
            return rope[name]
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
