"""What a config promises, checked before anything is built: files, the family, the model's own keys.

The schema checks types and ranges; this checks the config against the world: the files it names
exist and are what they should be, the family is one transformers knows, every ``model.config`` key
is one the config class the recipe builds from takes, sizes are positive, and ``modules`` names are
Liger's. Each problem is a :class:`~ligerkit.train.config.ConfigError` naming the key and the fix;
:func:`problems_of` runs several checks and keeps every problem, so one run names them all.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ligerkit.sizes import size_problem
from ligerkit.train.config import ConfigError, RecipeConfig, config_errors, unknown_key_hint



def check_file(key: str, value: str | None, what: str) -> None:
    """``value`` names an existing regular file."""
    if value is not None and not Path(value).is_file():
        raise ConfigError(f"{key}: {value!r} is {'a folder' if Path(value).is_dir() else 'missing'}; give {what}")


def check_text_file(key: str, value: str | None) -> None:
    """``value`` names a file whose first bytes decode as UTF-8 text."""
    check_file(key, value, "a UTF-8 text file")
    if value is None:
        return
    with open(value, "rb") as fh:
        head = fh.read(1 << 16)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end of the sample
            raise ConfigError(f"{key}: {value!r} is not UTF-8 text (byte {exc.start}); give a text file") from exc
    if b"\x00" in head:
        raise ConfigError(f"{key}: {value!r} holds NUL bytes: a binary file, not text")


def check_paths(config: RecipeConfig) -> None:
    """Every file and folder the config names, before anything is built."""
    model, data, train = config.model, config.data, config.train
    if model.pretrained_path is not None and not (Path(model.pretrained_path) / "config.json").is_file():
        raise ConfigError(f"model.pretrained_path: {model.pretrained_path!r} is not a local checkpoint folder with a "
                          "config.json (nothing is downloaded)")
    if data.kind == "corpus":
        check_text_file("data.corpus_path", data.corpus_path)
    if data.kind in ("jsonl", "text"):
        check_text_file("data.path", data.path)
        tokenizer = data.tokenizer or model.pretrained_path
        if tokenizer is None or not Path(tokenizer).is_dir():
            raise ConfigError(f"data.tokenizer: {tokenizer!r} is not a local tokenizer folder; set data.tokenizer, "
                              "or train a pretrained model whose folder holds its tokenizer")
    for key, folder in (("train.run.output_dir", train.run.output_dir), ("train.run.runs_dir", train.run.runs_dir)):
        if folder is None:
            continue
        path = Path(folder)
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{key}: {folder!r} is a file; give a folder")
        existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
        if not existing.is_dir():
            raise ConfigError(f"{key}: {folder!r} lies under {str(existing)!r}, which is a file; choose a folder")
        if not os.access(existing, os.W_OK):
            raise ConfigError(f"{key}: {folder!r} cannot be written (no write permission on {existing}); choose "
                              "another folder")


def config_class_for(family: str) -> type:
    """transformers' config class for ``family``, or a :class:`ConfigError` with close matches."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if family not in CONFIG_MAPPING:
        close = difflib.get_close_matches(family, list(CONFIG_MAPPING.keys()), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"model.family: transformers has no model type {family!r}.{hint} A model of your own uses "
                          "source: custom (its recipe builds it).")
    return CONFIG_MAPPING[family]


def known_options(cls: type) -> set[str]:
    """The keys a config class takes: its signature and every attribute a default instance has."""
    known = {n for n in inspect.signature(cls).parameters if n not in ("self", "kwargs", "args")}
    try:
        known |= set(vars(cls()))
    except Exception:  # a class without defaults: its signature is what it takes
        pass
    return known


def problems_of(*checks: Callable[[], object]) -> list[str]:
    """Run every check; the problems of each one that raised a :class:`ConfigError`, in order."""
    problems: list[str] = []
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            problems += exc.problems
    return problems


def check_model_keys(keys: dict[str, Any], cls: type, where: str = "model.config") -> None:
    """Every key is one ``cls`` takes; every size-like integer is positive (all problems in one error)."""
    known = known_options(cls)
    problems = []
    for key, value in keys.items():
        if key not in known:
            problems.append(f"{where}.{key}: {cls.__name__} has no such option{unknown_key_hint(key, sorted(known))}")
        elif (problem := size_problem(key, value)) is not None:  # positive sizes, bounded counts (ligerkit.sizes)
            problems.append(f"{where}.{key}: {problem}")
    if problems:
        raise config_errors(where, problems)


def build_config(cls: type, keys: dict[str, Any], where: str = "model.config") -> Any:
    """``cls(**keys)`` after :func:`check_model_keys`; a constructor's refusal is a :class:`ConfigError`."""
    if not isinstance(keys, dict):
        raise ConfigError(f"{where} must be a mapping of {cls.__name__} options, got {keys!r}")
    check_model_keys(keys, cls, where)
    try:
        built = cls(**keys)
    except Exception as exc:
        raise ConfigError(f"{where}: {cls.__name__} refuses these values ({type(exc).__name__}: {exc}); change "
                          "them to values it takes") from exc
    check_heads(built, where)
    return built


def check_heads(config: Any, where: str = "model.config") -> None:
    """Attention heads that a model can split: ``num_attention_heads`` a multiple of ``num_key_value_heads``
    (grouped-query attention repeats each key/value head for a whole group), in ``config`` and its
    ``text_config`` / ``vision_config``."""
    for part, prefix in ((config, where), (getattr(config, "text_config", None), f"{where}.text_config"),
                         (getattr(config, "vision_config", None), f"{where}.vision_config")):
        heads, kv = getattr(part, "num_attention_heads", None), getattr(part, "num_key_value_heads", None)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (heads, kv)):
            continue
        if heads % kv:
            fits = [d for d in range(1, heads + 1) if heads % d == 0] if heads <= 4096 else [1, heads]
            raise ConfigError(f"{prefix}.num_key_value_heads: {kv} does not divide num_attention_heads={heads} "
                              f"(each key/value head serves a whole group of query heads); use one of "
                              f"{', '.join(map(str, fits))}, or change num_attention_heads")


def check_modules(config: RecipeConfig, names: set[str]) -> None:
    """``model.liger_kernel.modules`` names only modules in ``names``, even when Liger is off."""
    modules = config.model.liger_kernel.modules
    if not isinstance(modules, dict) or not modules:
        return
    known = sorted(names)
    problems = [f"model.liger_kernel.modules.{name}: not a Liger module name{unknown_key_hint(name, known)}; "
                f"the names are {', '.join(known)}" for name in modules if name not in known]
    if problems:
        raise config_errors("model.liger_kernel.modules", problems)
