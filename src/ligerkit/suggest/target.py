"""The target `suggest` probes: the modeling module a user points at, and the small config it builds from."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

from ligerkit.errors import SuggestError
from ligerkit.hf import config_class_for, config_class_of, small_config
from ligerkit.probe.catalog import CATALOG
from ligerkit.sizes import size_problem

_CONFIG_READ = re.compile(r"\bconfig\.(\w+)")
_CONFIG_GETATTR = re.compile(r"getattr\(\s*(?:self\.)?config\s*,\s*[\"'](\w+)[\"']")


def load_module(spec: str) -> types.ModuleType:
    """A dotted module name, or a ``.py`` file.

    Either way the module's top-level code runs, as ``import`` (or ``python FILE``) runs it. A file is
    imported under its package's dotted name (so its relative imports work) when that name leads to this
    very file; where it leads elsewhere (a file named ``json.py``, whose name the standard library has),
    the file itself is loaded under a name of its own, never the other module.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SuggestError("give a modeling module: a dotted name (transformers.models.llama.modeling_llama) or a .py file")
    if "\x00" in spec or len(spec.encode("utf-8", errors="surrogatepass")) > 4096:
        raise SuggestError("the module name or path holds a NUL or is over 4096 bytes; give a dotted module name or "
                           "the path of a .py file")
    try:
        is_file = spec.endswith(".py") or Path(spec).exists()
    except OSError as exc:
        raise SuggestError(f"cannot look up {spec[:80]!r} ({exc.strerror}); give a shorter path or a dotted name") from exc
    try:
        return _load_file(Path(spec).resolve()) if is_file else importlib.import_module(spec)
    except SuggestError:
        raise
    except (Exception, SystemExit) as exc:  # the module's own failure, named with its cause
        raise SuggestError(f"cannot import {spec}: {type(exc).__name__}: {exc}; fix the module (it must import "
                           "on its own) or point suggest at another") from exc


def _load_file(path: Path) -> types.ModuleType:
    """Import ``path`` under its package's dotted name, or on its own where that name is another module's."""
    if not path.is_file() or path.suffix != ".py":
        raise SuggestError(f"{path} does not exist or is not a Python (.py) file; give a .py file or a dotted name")
    parts, root = [path.stem], path.parent
    while (root / "__init__.py").exists():
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.append(str(root))  # after everything else: the folder never shadows an installed module
    name = ".".join(parts)
    if _origin(name) == path:
        return importlib.import_module(name)
    own = f"ligerkit_file.{name}"
    loader_spec = importlib.util.spec_from_file_location(own, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SuggestError(f"{path} cannot be loaded as a Python module; give a .py file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[own] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[own]
        raise
    return module


def _origin(name: str) -> Path | None:
    """The file ``import name`` would load (``None`` when it finds none, or finding it fails)."""
    loaded = sys.modules.get(name)
    try:
        found = getattr(loaded, "__file__", None) if loaded is not None else getattr(
            importlib.util.find_spec(name), "origin", None)
    except (Exception, SystemExit):  # a parent package that does not import: load the file on its own
        return None
    return Path(found).resolve() if found else None


def load_config(spec: str | None, module: types.ModuleType, overrides: dict[str, Any] | None = None) -> Any:
    """A small config: ``pkg.Class`` / ``pkg.module:Class``, a JSON file, or the module's own config class.

    A JSON file without ``model_type`` fills the module's own config class (:func:`config_class_for`);
    ``overrides`` (and such JSON keys) the config class does not know are errors, with close matches, and so
    is a size that is not a positive integer (``ligerkit.sizes``), before anything is built from it.
    """
    overrides = overrides or {}
    _check_sizes(overrides, "--set {key}={value!r}")
    if spec is None:
        cls = config_class_for(module)
        if cls is None:
            _check_options(None, overrides)
            return None
        if cls is config_class_of(module) or overrides:
            return _small(cls, overrides)
        try:  # a config class found by annotation: used at small dimensions when they fit it
            return small_config(cls)
        except ValueError:
            return None
    if spec.endswith(".json"):
        return _json_config(Path(spec), module, overrides)
    module_name, _, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    if not module_name or not attr:
        raise SuggestError(f"--config {spec!r}: give a config class as pkg.module:Class (or pkg.Class) or a .json file")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:
        raise SuggestError(f"cannot load config class {spec}: {type(exc).__name__}: {exc}; check the module and class "
                           "names (pkg.module:Class), or pass a JSON file of config values") from exc
    if not isinstance(cls, type):
        raise SuggestError(f"--config {spec} is a {type(cls).__name__}, not a config class; name the class itself "
                           "(pkg.module:Class) or pass a JSON file")
    return _small(cls, overrides)


def _json_config(path: Path, module: types.ModuleType, overrides: dict[str, Any]) -> Any:
    if not path.is_file():
        raise SuggestError(f"--config {path}: no such JSON file; check the path, or pass a config class "
                           "(pkg.module:Class)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SuggestError(f"--config {path} is not readable JSON: {exc}; fix the file (one JSON object of config "
                           "values)") from exc
    if not isinstance(data, dict):
        raise SuggestError(f"--config {path} holds a JSON {type(data).__name__}; make it one object of config values, "
                           "e.g. {\"hidden_size\": 64}")
    _check_sizes(data, f"--config {path}: {{key}}")
    if "model_type" in data:
        return _auto_config({**data, **overrides}, path, overrides)
    cls = config_class_for(module)
    data = {**data, **overrides}
    if cls is None:
        _check_used(data, module, path)
        return types.SimpleNamespace(**data)
    _check_options(cls, data)
    missing = [p.name for p in inspect.signature(cls).parameters.values()
               if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               and p.name not in data]
    if missing:
        raise SuggestError(f"--config {path}: {cls.__name__} needs {', '.join(missing)}; add "
                           f"{'it' if len(missing) == 1 else 'them'} to the file (or --set {missing[0]}=VALUE)")
    try:
        return cls(**data)
    except Exception as exc:
        raise SuggestError(f"--config {path}: {cls.__name__} does not take these values ({exc}); change the values "
                           "it names") from exc


def _auto_config(data: dict[str, Any], path: Path, overrides: dict[str, Any]) -> Any:
    """A transformers config from a JSON with a ``model_type`` (its own keys as they are, ``--set`` keys checked)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING.get(data["model_type"]) if isinstance(data["model_type"], str) else None
    if cls is None:
        raise SuggestError(f"--config {path}: model_type {data['model_type']!r} is not one transformers knows; fix "
                           "it, or remove model_type to fill the module's own config class")
    _check_options(cls, overrides)
    try:
        return AutoConfig.for_model(**data)
    except Exception as exc:
        raise SuggestError(f"--config {path}: transformers cannot make a config from it ({exc}); change the values "
                           "it names") from exc


def _check_sizes(values: dict[str, Any], where: str) -> None:
    """Refuse a size-like value that is not a positive integer (or a count past the bound), naming it as ``where``
    (a format of ``key`` and ``value``) says: the same rule as a recipe config's ``model.config``."""
    problems = [f"{where.format(key=key, value=value)}: {problem}" for key, value in values.items()
                if (problem := size_problem(key, value)) is not None]
    if problems:
        raise SuggestError("; ".join(problems) + f"; fix {'the values' if len(problems) > 1 else 'the value'} (or "
                           "leave the key out: suggest builds the config at small sizes of its own)")


def _check_used(data: dict[str, Any], module: types.ModuleType, path: Path) -> None:
    """Without a config class, a key must be one the module (or a Liger replacement) reads from its config."""
    used = config_reads(module)
    for entry in CATALOG:
        if isinstance(entry.obj, type):
            used |= config_reads(entry.obj)
    unknown = [key for key in data if key not in used]
    if unknown:
        hints = [key + (f" (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, used, n=1)) else "")
                 for key in unknown]
        raise SuggestError(f"--config {path}: {module.__name__} and Liger's replacements never read config."
                           f"{', config.'.join(hints)}; remove {'it' if len(unknown) == 1 else 'them'} (read: "
                           f"{', '.join(sorted(used)) or 'nothing'})")


def config_reads(obj: object) -> set[str]:
    """Config attributes ``obj``'s source reads (``config.x``, ``getattr(config, "x", ...)``)."""
    try:
        source = inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return set()
    return set(_CONFIG_READ.findall(source)) | set(_CONFIG_GETATTR.findall(source))


def _known_options(cls: type) -> set[str]:
    known = set(inspect.signature(cls).parameters) - {"self", "kwargs", "args"}
    try:
        known |= set(vars(cls()).keys())  # transformers configs: every attribute a default instance has
    except Exception:  # a config class without defaults: its signature is what it takes
        pass
    return known


def _check_options(cls: type | None, options: dict[str, Any]) -> None:
    """Refuse options the config class does not know (a typo must not be probed as a new setting)."""
    if not options:
        return
    if cls is None:
        raise SuggestError(f"--set {', '.join(options)}: the module has no config class to set them on; "
                           "pass --config pkg.module:Class or a JSON file")
    known = _known_options(cls)
    unknown = [key for key in options if key not in known]
    if unknown:
        hints = [f"{key}" + (f" (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, known, n=1))
                             else "") for key in unknown]
        raise SuggestError(f"{cls.__name__} has no option {', '.join(hints)}; fix the --set key (or the JSON key), "
                           "or leave it out")


def _small(cls: type, overrides: dict[str, Any]) -> Any:
    """The config class at small dimensions, as a :class:`SuggestError` when it cannot be built."""
    _check_options(cls, overrides)
    try:
        return small_config(cls, overrides)
    except ValueError as exc:
        raise SuggestError(str(exc)) from exc
