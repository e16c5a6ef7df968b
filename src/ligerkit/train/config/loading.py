"""Loading a recipe config: YAML (duplicate keys refused), ``--set a.b=c`` overrides, validation.

Every problem is a :class:`ConfigError` naming the key and the fix: an unknown key gets the closest
known ones ("did you mean"), and common names from other trainers (``learning_rate``) point to ours.

``train.arm: NAME`` (a ``ligerkit bench`` arm, ``ligerkit.train.config.arms``) is expanded here, after the
overrides and before validation: the arm's lines fill its keys, and a key the file or a ``--set``
already gives another value is an error naming both (never a silent winner).
"""

from __future__ import annotations

import copy
import difflib
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ligerkit.errors import ConfigError
from ligerkit.train.config.arms import ARMS
from ligerkit.train.config.compile_mode import compile_value
from ligerkit.train.config.origin import attributed, invalid_heading
from ligerkit.train.config.paths import check_path
from ligerkit.train.config.recorded import old_key_hint, read_recorded
from ligerkit.train.config.schema import RecipeConfig
from ligerkit.train.config.yaml_bounds import YamlBoundError, load_bounded
from ligerkit.train.config.run_files import CONFIG_FILE, METRICS_FILE, RUN_RECORD


def config_errors(source: str, problems: Sequence[str]) -> ConfigError:
    """One :class:`ConfigError` for every problem found in a config: a single one as it is, several
    listed a line each under a heading, so a copied config shows all its mistakes in one run."""
    if len(problems) == 1:
        return ConfigError(problems[0])
    return ConfigError(f"fix these {len(problems)} problems of {source}:\n" + "\n".join(f"  {p}" for p in problems),
                       problems)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    key, sep, raw = item.partition("=")
    shown = item if len(item) <= 120 else item[:100] + f"... ({len(item):,} characters)"
    if not sep or not key.strip() or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {shown!r}: expected KEY=VALUE with a dotted key, e.g. --set train.steps=20")
    try:
        value = load_bounded(raw) if raw.strip() else ""
    except YamlBoundError as exc:
        raise ConfigError(f"--set {shown!r}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {shown!r}: the value is not valid YAML ({exc}); quote it as YAML would "
                          "(--set 'key=\"text\"') or fix its syntax") from exc
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with every ``a.b=c`` override set (intermediate maps created)."""
    data = copy.deepcopy(data)
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}  # e.g. modules: auto -> modules: {rope: false}
                node[part] = child
            node = child
        node[path[-1]] = value
    return data


# Keys other trainers use, and where ours are.
OTHER_NAMES = {
    "learning_rate": "train.optim.lr", "lr_warmup_steps": "train.optim.warmup_steps", "max_steps": "train.steps",
    "num_steps": "train.steps", "batch_size": "train.global_batch_size",
    "per_device_train_batch_size": "train.micro_batch_size", "gradient_clipping": "train.optim.grad_clip",
    "max_grad_norm": "train.optim.grad_clip", "max_seq_len": "data.seq_len", "seq_length": "data.seq_len",
    "max_length": "data.seq_len", "dataset": "data.path", "use_liger_kernel": "model.liger_kernel.enabled",
    "model_name_or_path": "model.pretrained_path", "output": "train.run.output_dir", "epochs": "train.steps",
    "save_steps": "train.run.checkpoint_every", "logging_steps": "train.run.log_every",
}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The schema keys known at the location of an unknown key."""
    model: Any = RecipeConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        annotation = getattr(field, "annotation", None)
        # an optional section (``LoraConfig | None``) names its keys like a plain one
        members = typing.get_args(annotation) or (annotation,)
        found = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(found) != 1:
            return []
        model = found[0]
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def unknown_key_hint(key: str, known: list[str]) -> str:
    """``(did you mean ...?)`` for a mistyped key, or where another trainer's name (spelled right or
    nearly: ``lerning_rate``) lives here."""
    if key in OTHER_NAMES:
        return f" (this config calls it {OTHER_NAMES[key]})"
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
    if close:
        return f" (did you mean {' or '.join(close)}?)"
    other = difflib.get_close_matches(key, list(OTHER_NAMES), n=1, cutoff=0.8)
    return f" (did you mean {other[0]}? this config calls it {OTHER_NAMES[other[0]]})" if other else ""


def _fix_hint(error: Any) -> str:
    """What to write instead, for the errors pydantic's message only names."""
    kind, given = error["type"], error.get("input")
    if kind in ("int_parsing", "float_parsing") and isinstance(given, str):
        return (f" (got the text {given[:40]!r}); write a plain number such as 1000000 (YAML reads 1e6 as text, "
                "1.0e+6 as a number)")
    if kind == "bool_parsing":
        return f" (got {str(given)[:40]!r}); write true or false"
    if kind in ("literal_error", "enum"):
        return f" (got {str(given)[:40]!r})"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f" (got {str(given)[:40]}); change the value"
    if kind.endswith("_type"):
        return f" (got {type(given).__name__} {str(given)[:40]!r}); change the value's type"
    return ""


def _problems(exc: ValidationError) -> list[str]:
    """Every error pydantic found, one line each: the key path and what is wrong (with the fix)."""
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        path = ".".join(str(p) for p in loc) or "<root>"
        if error["type"] == "extra_forbidden":
            message = "unknown key" + (old_key_hint(path) or unknown_key_hint(str(loc[-1]), _fields_at(loc)))
        else:
            message = error["msg"] + _fix_hint(error)
        lines.append(f"{path}: {message}")
    return lines


MAX_CONFIG_BYTES = 1 << 20


def read_yaml(path: Path) -> Any:
    """A YAML file's content, with every read, encoding, size or syntax problem as a :class:`ConfigError`."""
    try:
        check_path(str(path), "the config path")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a config file (a recipe folder's configs/*.yaml)")
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is {path.stat().st_size:,} bytes; a config is a few kilobytes (at most "
                              f"{MAX_CONFIG_BYTES:,} are read): give the recipe config, not a data file")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); a config is a YAML file") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc}; check the path and its permissions") from exc
    try:
        return load_bounded(text)
    except YamlBoundError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}\nFix the YAML at the line it names") from exc


def _lookup(data: dict[str, Any], path: list[str]) -> tuple[list[str], Any] | None:
    """What ``data`` holds at a dotted key path: ``(path, value)``; ``(prefix, value)`` when a value
    on the way is not a mapping (``train.loss: fused``); ``None`` where a mapping lacks the key."""
    node: Any = data
    for i, part in enumerate(path):
        if not isinstance(node, dict):
            return path[:i], node
        if part not in node:
            return None
        node = node[part]
    return path, node


def _origin(path: list[str], source: str, overrides: Sequence[str]) -> str:
    """Where a key's value comes from: the last ``--set`` giving it (or a map above it), else the file."""
    for item in reversed(overrides):
        key, _ = parse_override(item)
        if path[:len(key)] == key:
            return f"--set {item}"
    return source


def _same(path: list[str], given: Any, wanted: Any) -> bool:
    """Whether a config's value at ``path`` is what an arm's line sets (a bare ``off`` is YAML's false)."""
    if path == ["train", "compile"]:
        return bool(compile_value(given) == compile_value(wanted))
    return bool(given == wanted)


def _show(value: Any) -> str:
    """A value as YAML writes it inline (``true``, ``standard``, ``{path: fused}``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("\n...").strip()


def apply_arm(data: dict[str, Any], source: str = "<dict>", overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Expand ``train.arm: NAME`` into the arm's override lines (a copy of ``data``; unchanged without one).

    A key the arm sets that ``data`` already holds must have the arm's value: anything else is a
    :class:`ConfigError` naming both, as is an arm name that is not in ``ligerkit.train.config.arms.ARMS``.
    ``source`` (the file) and ``overrides`` (the ``--set`` lines already applied) only name where a
    conflicting value came from.
    """
    train = data.get("train")
    name = train.get("arm") if isinstance(train, dict) else None
    if name is None:
        return data
    where = _origin(["train", "arm"], source, overrides)
    if not isinstance(name, str) or name not in ARMS:
        raise ConfigError(f"{where}: train.arm {name!r} is not an arm; use one of {', '.join(ARMS)} "
                          "(`ligerkit bench --help` says what each selects), or leave train.arm out")
    conflicts = []
    for line in ARMS[name]:
        path, value = parse_override(line)
        found = _lookup(data, path)
        if found is None or (found[0] == path and _same(path, found[1], value)):
            continue
        at, given = found
        what = "it" if at == path else f"{'.'.join(at)} (not a mapping)"
        conflicts.append(f"  train.arm={name} ({where}) sets {line}; {_origin(at, source, overrides)} "
                         f"sets {what} to {_show(given)}")
    if conflicts:
        raise ConfigError(f"{source}: train.arm={name} disagrees with keys the config sets:\n" + "\n".join(conflicts)
                          + "\nRemove those keys or give them the arm's values (train.arm sets them), or leave "
                          "train.arm out and set every key yourself")
    return apply_overrides(data, ARMS[name])


def validate_config(data: dict[str, Any], source: str = "<dict>", overrides: Sequence[str] = ()) -> RecipeConfig:
    """Expand ``train.arm`` (:func:`apply_arm`), then validate a raw mapping; raise :class:`ConfigError`
    naming every bad key path, each one a ``--set`` gave led by that ``--set`` (:func:`attributed`).
    ``overrides`` are the ``--set`` lines already in ``data``."""
    data = apply_arm(data, source, overrides)
    try:
        return RecipeConfig.model_validate(data)
    except ValidationError as exc:
        problems = attributed(_problems(exc), overrides)
        raise ConfigError(f"{invalid_heading(source, problems)}:\n" + "\n".join(f"  {p}" for p in problems),
                          problems) from None


def recorded_config(data: Any, source: str = "<recorded config>") -> dict[str, Any]:
    """A run folder's recorded config (raw) with the keys of earlier releases read into today's
    (``ligerkit.train.config.recorded``); a mapping that cannot be read is a :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must hold a mapping at the top level (name:, model:, data:, train:); it holds "
                          f"a {type(data).__name__}")
    try:
        return read_recorded(data)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def raw_config(path: str | Path, overrides: Sequence[str] | None = None) -> dict[str, Any]:
    """A recipe YAML as a mapping with the ``--set`` overrides applied (not validated). A run folder's
    own ``config.yaml`` (:func:`in_run_folder`) is read as it ran (:func:`recorded_config`) before them."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level (name:, model:, data:, train:); it holds "
                          f"a {type(data).__name__}. Start from a shipped config such as recipes/qwen3/configs/cpu.yaml")
    if in_run_folder(path):
        data = recorded_config(data, str(path))
    return apply_overrides(data, list(overrides or []))


def load_recipe_config(path: str | Path, overrides: Sequence[str] | None = None) -> RecipeConfig:
    """Load a recipe YAML, apply ``--set`` overrides, expand ``train.arm``, validate (a run folder's own
    ``config.yaml`` as the run recorded it: :func:`raw_config`)."""
    overrides = list(overrides or [])
    return validate_config(raw_config(path, overrides), str(path), overrides)


def in_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder's ``config.yaml``."""
    return path.name == CONFIG_FILE and is_run_folder(path.parent)


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a training run's folder: it holds ``run.json``, or (folders written before
    ``run.json`` existed) ``config.yaml`` beside ``metrics.jsonl``."""
    return (folder / RUN_RECORD).is_file() or ((folder / CONFIG_FILE).is_file()
                                               and (folder / METRICS_FILE).is_file())
