"""Loading a recipe config: YAML (duplicate keys refused), ``--set a.b=c`` overrides, validation.

Every problem is a :class:`ConfigError` naming the key and the fix: an unknown key gets the closest
known ones ("did you mean"), and common names from other trainers (``learning_rate``) point to ours.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ligerkit.errors import LigerKitError
from ligerkit.train.config.schema import RecipeConfig


class ConfigError(LigerKitError):
    """A recipe config is invalid (unknown key, wrong type, inconsistent values, a missing file)."""


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip() or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set train.steps=20")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML ({exc})") from exc
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
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
    "learning_rate": "train.lr", "lr_warmup_steps": "train.warmup_steps", "max_steps": "train.steps",
    "num_steps": "train.steps", "batch_size": "train.global_batch_size",
    "per_device_train_batch_size": "train.micro_batch_size", "gradient_clipping": "train.grad_clip",
    "max_grad_norm": "train.grad_clip", "max_seq_len": "data.seq_len", "seq_length": "data.seq_len",
    "max_length": "data.seq_len", "dataset": "data.path", "use_liger_kernel": "model.liger_kernel.enabled",
    "model_name_or_path": "model.pretrained_path", "output": "train.output_dir", "epochs": "train.steps",
}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The schema keys known at the location of an unknown key."""
    model: Any = RecipeConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def unknown_key_hint(key: str, known: list[str]) -> str:
    """``(did you mean ...?)`` for a mistyped key, or where another trainer's name lives here."""
    if key in OTHER_NAMES:
        return f" (this config calls it {OTHER_NAMES[key]})"
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _format(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        path = ".".join(str(p) for p in loc) or "<root>"
        if error["type"] == "extra_forbidden":
            message = "unknown key" + unknown_key_hint(str(loc[-1]), _fields_at(loc))
        else:
            message = error["msg"]
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (line {key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, with every read, encoding or syntax problem as a :class:`ConfigError`."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a config file (a recipe folder's configs/*.yaml)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); a config is a YAML file") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc


def validate_config(data: dict[str, Any], source: str = "<dict>") -> RecipeConfig:
    """Validate a raw mapping; raise :class:`ConfigError` naming every bad key path."""
    try:
        return RecipeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not a valid recipe config:\n{_format(exc)}") from None


def load_recipe_config(path: str | Path, overrides: list[str] | None = None) -> RecipeConfig:
    """Load a recipe YAML, apply ``--set`` overrides, validate."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return validate_config(apply_overrides(data, overrides or []), str(path))
