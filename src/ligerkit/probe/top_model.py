"""The top model class of a modeling module: the one that holds every use of its symbols.

A verdict about how a symbol's output is consumed must see the model around it, so the probes build
a module's *top* class: its causal LM, else its conditional-generation model, else the model that no
other class of the module contains (read from the classes' source and checked on the meta device),
never a decoder layer or a block. Also the config it is built from: the caller's, or the family's
own default.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import re
import sys
import types
import warnings
from typing import Any

import torch
from torch import nn

from ligerkit.hf import build_model, config_class_for, config_class_of, quiet_transformers, small_config
from ligerkit.shrink import iter_whole_model_configs


_PREFERRED = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model", "Transformer", "Encoder",
              "Decoder", "Layer", "Block")


def module_config(module: types.ModuleType, config: Any) -> Any:
    """``config``, else the module's own config class at small dimensions, else ``None``."""
    if config is not None:
        return config
    cls = config_class_of(module)
    if cls is None:
        return None
    try:
        return small_config(cls)
    except ValueError:
        return None


# --- the top model class ----------------------------------------------------------------------------

def _own_classes(module: types.ModuleType) -> list[type]:
    return [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, nn.Module)
            and v.__module__ == module.__name__]


def _takes_config(cls: type) -> bool:
    try:
        params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return len(required) == 1


def make_model(cls: type, config: Any) -> nn.Module:
    """``cls`` built from ``config`` in float32, quietly (:func:`ligerkit.hf.build_model`)."""
    return build_model(config, cls, dtype=torch.float32, quiet=True)


def meta_model(cls: type, config: Any) -> nn.Module | None:
    """``cls`` built from ``config`` on the meta device, or ``None`` when it does not build."""
    try:
        with torch.device("meta"):
            return make_model(cls, config)
    except Exception:
        return None


def meta_build_error(cls: type, config: Any) -> BaseException | None:
    """Why ``cls`` does not build from ``config`` on the meta device; ``None`` when it builds."""
    try:
        with torch.device("meta"):
            make_model(cls, config)
    except Exception as exc:
        return exc
    return None


@functools.lru_cache(maxsize=64)
def class_references(module: types.ModuleType) -> dict[str, frozenset[str]]:
    """For every class and function defined at the top of ``module``'s source, the names its body
    refers to (not its base classes; parsed once per module; empty without the source)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return {}
    return {node.name: frozenset(n.id for statement in node.body for n in ast.walk(statement)
                                 if isinstance(n, ast.Name))  # the body: not the base classes
            for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}


def _reachable(cls: type) -> set[str]:
    """Names of the module's classes and functions ``cls`` refers to, directly or through others."""
    refs = class_references(sys.modules[cls.__module__])
    seen: set[str] = set()
    todo = [cls.__name__]
    while todo:
        for name in refs.get(todo.pop(), frozenset()) - seen:
            if name in refs:
                seen.add(name)
                todo.append(name)
    seen.discard(cls.__name__)
    return seen


def _rank(cls: type) -> float:
    name = cls.__name__
    rank = next((i for i, suffix in enumerate(_PREFERRED) if name.endswith(suffix)), len(_PREFERRED))
    return 2.5 if rank > 2 and re.search(r"For[A-Z]", name) else rank  # a task head: before a bare Model


def config_fingerprint(config: Any) -> str:
    """A config as a string, for cache keys (its JSON form, else its attributes)."""
    try:
        return json.dumps(config.to_dict(), sort_keys=True, default=repr)
    except Exception:
        return repr(sorted(vars(config).items())) if hasattr(config, "__dict__") else repr(config)


_TOPS: dict[tuple[str, str], type | None] = {}


def top_model_class(module: types.ModuleType, config: Any = None) -> type | None:
    """The class of ``module`` that holds every other: the model a verdict about a symbol must see.

    Candidates are the module's own ``nn.Module`` classes built from one config (not the abstract
    bases of other classes of the module). Each is built on the meta device from a small copy of
    ``config`` (``None``: of its own ``config_class``'s defaults, else of the module's config
    class). A class is *held* by another when that one's instance contains an instance of it or
    builds strictly fewer of the module's building blocks (a generating head only yields to
    another), or, where that one does not build, when its source reaches it (through classes and
    functions of the module). Of the classes no other holds: a pretrained-model class (with a
    ``config_class``) first, then the first by name (``ForCausalLM``, ``ForConditionalGeneration``,
    ``LMHeadModel``, any other task head, ``Model``, ``Transformer``, ...), then the one building
    (or reaching) the most of the module's classes. A top class that does not build is still the
    top: it is never replaced by a block it contains. ``None`` when no class of the module takes a
    config. Cached per module and config.
    """
    base, is_given = base_config(module, config)
    given = base if is_given else None
    key = (module.__name__, config_fingerprint(given) if given is not None else "")
    if key not in _TOPS:
        _TOPS[key] = _top_model_class(module, given)
    return _TOPS[key]


def _top_model_class(module: types.ModuleType, given: Any) -> type | None:
    own = _own_classes(module)
    bases = {b for cls in own for b in cls.__mro__[1:] if "forward" not in vars(b)}  # abstract bases
    candidates = [cls for cls in own if cls not in bases and _takes_config(cls)]
    if not candidates:
        return None
    names = {cls.__name__: cls for cls in own}
    trials: dict[int, Any] = {}
    built: dict[type, set[type]] = {}
    for cls in candidates:
        base = given if given is not None else _default_config(module, cls)
        if base is None:
            continue
        if id(base) not in trials:
            trials[id(base)] = next(iter(iter_whole_model_configs(base, False)), ("", base))[1]
        model = meta_model(cls, trials[id(base)])
        if model is not None:
            built[cls] = {type(m) for m in model.modules()
                          if type(m).__module__ == module.__name__ and m is not model}

    def blocks(c: type) -> set[type]:
        return _blocks(built[c]) if c in built else {names[n] for n in _reachable(c) if n in names} - {c}

    def holds(a: type, b: type) -> bool:
        if a in built and b in built[a] or b not in built and a in built and b.__name__ in _reachable(a):
            return True  # b inside a (or a variant of a's that this config does not pick)
        if a not in built and b.__name__ in _reachable(a):
            return True
        # a builds every block b does, and more (the VLM around a text-only LM; CLIP around its vision
        # classifier); a generating head (causal LM, conditional generation) only yields to another
        return (_tier(a) <= _tier(b) or _tier(b) > 2) and _blocks(blocks(b)) < _blocks(blocks(a))

    tops = [b for b in candidates if not any(holds(a, b) for a in candidates if a is not b)] or candidates
    return min(tops, key=lambda c: (not hasattr(c, "config_class"), _rank(c),
                                    -len(built.get(c) or _reachable(c)), c.__name__))


def _tier(cls: type) -> float:
    """:func:`_rank`, with the generating heads (causal LM, conditional generation, LM head) one tier."""
    return max(_rank(cls), 2)


def _blocks(classes: set[type]) -> set[type]:
    """The building blocks among ``classes``: not pretrained-model wrappers (classes with a ``config_class``)."""
    return {c for c in classes if not hasattr(c, "config_class")}


_DEFAULTS: dict[type, Any] = {}


def _default_config(module: types.ModuleType, cls: type | None = None) -> Any:
    """The family's own config for ``cls`` (its ``config_class``, else the module's config class) at
    its defaults; the module's small config when the defaults do not build; ``None`` without one."""
    config_cls = getattr(cls, "config_class", None) if cls is not None else None
    config_cls = config_cls if isinstance(config_cls, type) else config_class_for(module)
    if config_cls is None:
        return None
    if config_cls not in _DEFAULTS:
        try:
            with quiet_transformers(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _DEFAULTS[config_cls] = config_cls()
        except Exception:
            try:
                _DEFAULTS[config_cls] = small_config(config_cls)
            except ValueError:
                _DEFAULTS[config_cls] = None
    return _DEFAULTS[config_cls]


# --- building and running ---------------------------------------------------------------------------

def base_config(module: types.ModuleType, config: Any, top: type | None = None) -> tuple[Any, bool]:
    """The config to shrink and whether the caller gave it. ``None``, or a config equal to the
    module's small default (:func:`module_config`), means the family's own default config (of
    ``top``'s ``config_class`` when given)."""
    if config is not None and not _same_config(config, module_config(module, None)):
        return config, True
    default = _default_config(module, top)
    return (default, False) if default is not None else (config, False)


def _same_config(a: Any, b: Any) -> bool:
    try:
        return a is b or (b is not None and type(a) is type(b) and a.to_dict() == b.to_dict())
    except Exception:
        return False
