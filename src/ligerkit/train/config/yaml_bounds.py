"""The YAML loader for configs and ``--set`` values: safe, duplicate keys refused, aliases bounded.

A YAML alias (``*name``) repeats what its anchor (``&name``) holds without copying it in the file, so
nine lines of nested aliases describe 9**9 values: harmless as long as nothing walks them, an hours-long
hang (and gigabytes) once a model config is copied, validated or printed. The loader therefore counts
the values a document holds *with every alias expanded*, before anything is constructed, and refuses a
document over :data:`MAX_VALUES` (a real config holds a few hundred), one whose alias refers to itself,
and one nested deeper than :data:`MAX_DEPTH`.

A config holds text, numbers, true/false, null, lists and mappings, nothing else: a value of any other
YAML type (``!!binary``, ``!!set``, ``!!omap``, ``!!timestamp`` or a bare date such as ``2024-01-01``, a
tag of its own such as ``!python/object``) is refused before anything is constructed, naming its key and
line (:func:`check_types`), never read into bytes, a set or a date that no config key expects.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_VALUES = 100_000
MAX_DEPTH = 100


class YamlBoundError(yaml.YAMLError):
    """A YAML document too large once its aliases are expanded, self-referring, or nested too deep."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def expanded_size(root: yaml.Node, limit: int = MAX_VALUES) -> int:
    """How many values ``root`` holds with every alias expanded (stops counting above ``limit``).

    Iterative, so neither a deep document nor a large count can exhaust Python's stack; a node reached
    again from inside itself (``&a [*a]``) is a :class:`YamlBoundError`.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = size = 1 + sum(sizes[id(c)] for c in _children(node))
            if size > limit:
                return size
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise YamlBoundError(f"line {node.start_mark.line + 1}: an alias refers to a value that contains it "
                                 "(a loop); write the value out instead of aliasing it inside itself")
        if depth > MAX_DEPTH:
            raise YamlBoundError(f"line {node.start_mark.line + 1}: values nested more than {MAX_DEPTH} deep; a "
                                 "config needs a few levels: flatten it")
        open_nodes.add(id(node))
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


PLAIN = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map", "merge")}
"""The YAML types a config holds: plain scalars, lists and mappings."""


def _shown(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def check_types(root: yaml.Node) -> None:
    """Refuse (:class:`YamlBoundError`) a value that is not plain text, a number, true/false, null, a list or a
    mapping, naming its key path and line. Each node is looked at once, so aliases cost nothing more."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, key = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in PLAIN:
            at = f"line {node.start_mark.line + 1}: " + (f"{key}: " if key else "")
            what = "reads as a date" if node.tag.endswith(":timestamp") else f"has the YAML type {_shown(node.tag)}"
            raise YamlBoundError(f"{at}the value {str(node.value)[:40]!r} {what}; a config holds only text, numbers, "
                                 "true/false, null, lists and mappings: write the value plainly (quoted, to give it "
                                 "as text)" if isinstance(node, yaml.ScalarNode) else
                                 f"{at}a value {what}; a config holds only text, numbers, true/false, null, lists "
                                 "and mappings: write it as a plain list or mapping")
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                stack += [(k, key), (v, f"{key}.{name}" if key else str(name))]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(child, f"{key}[{i}]") for i, child in enumerate(node.value)]


class BoundedLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML would keep the last), a
    document whose aliases expand beyond :data:`MAX_VALUES` values, and a value of a type no config holds
    (:func:`check_types`; see the module docstring)."""

    def get_single_node(self) -> Any:
        """The document's node, refused when it is too large with its aliases expanded."""
        node = super().get_single_node()
        if node is not None:
            size = expanded_size(node)
            if size > MAX_VALUES:
                raise YamlBoundError(
                    f"with its aliases (*name) expanded it holds more than {MAX_VALUES:,} values (a config holds a "
                    "few hundred); write the repeated values out, or alias fewer levels inside each other")
            check_types(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping, refused when a key appears twice."""
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool, type(None))):
                continue  # SafeLoader names an unhashable key itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (line {key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_bounded(text: str) -> Any:
    """``text`` as YAML through :class:`BoundedLoader`; a too-deep document is a :class:`YamlBoundError`."""
    try:
        return yaml.load(text, Loader=BoundedLoader)
    except RecursionError:
        raise YamlBoundError(f"values nested too deep to read (more than {MAX_DEPTH} levels is refused); "
                             "flatten them") from None
