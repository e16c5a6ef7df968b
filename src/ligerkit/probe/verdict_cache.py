"""The checks' verdicts, kept on disk: each is a pure function of its inputs, so it is computed once.

``apply`` checks every swap before it makes it: the in-place verdict (``aliasing.py``: the module's
whole model built and run twice) and the probe of the source against the replacement's reference
(``probe.py``). On a CPU they cost seconds per family, against milliseconds for Liger's helper. Each
verdict depends only on what this module puts in its key: the symbol and the replacement (their names,
the hash of the files that define them), the modeling module (its source's hash and what it binds
now: classes, functions, table entries, class methods), the full config (its JSON form and class), the
device, the checker's own version (ligerkit's version and the hash of its checking code: ``probe``,
``shrink``, ``hf``, ``naming``, the kit's ``swap_checks`` and ``official_probe``), the Python, torch,
transformers and liger-kernel versions, and whether a CUDA GPU is there.

Each verdict is one JSON file, named by the key's hash, under ``$LIGERKIT_CACHE_DIR/verdicts`` (else
``$XDG_CACHE_HOME/ligerkit/verdicts``, else ``~/.cache/ligerkit/verdicts``: the families view's folder),
written atomically (a temporary file, then a rename). A file is trusted only when it parses, has this
format, holds exactly the key asked for and a verdict whose fields all validate; anything else
(stale, truncated, garbage, another schema) is ignored, recomputed and rewritten. Only plain JSON is
read: the caller rebuilds its result from checked fields, nothing is executed or unpickled. A key that
cannot be made (a symbol not importable by its name, a module without a source file, a value whose
text holds a memory address) means the check just runs. ``LIGERKIT_VERDICT_CACHE=off`` turns it off.
The folder keeps the :data:`MAX_ENTRIES` most recently used verdicts (a read marks an entry used); older
ones are removed when a new one is written.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import platform
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ligerkit.cache_files import CACHE_ENV  # noqa: F401 (re-exported)
from ligerkit.cache_files import cache_root, prune, touch, write_json_atomically
from ligerkit.environment import installed_version
from ligerkit.naming import qualified_name, stands_for

SWITCH_ENV = "LIGERKIT_VERDICT_CACHE"  # "off" (or 0, false, no) turns the verdict cache off
FORMAT = 1
MAX_ENTRIES = 4096  # verdicts kept on disk (about 2 KB each); the least recently used go first
_CHECKER = ("probe", "shrink", "hf.py", "naming.py", "kit/swap_checks.py", "kit/official_probe.py")
_PACKAGES = ("torch", "transformers", "liger-kernel", "ligerkit")

T = TypeVar("T")

# What this process did with its verdicts: "read" (a valid entry), "rejected" (an entry there but not
# trusted: stale, truncated, garbage, another schema), "computed", "written", "uncached" (computed
# with the cache off or without a key).
COUNTS: Counter[str] = Counter()


class Uncacheable(Exception):
    """No stable key can be made for these inputs: the check runs, and nothing is kept."""


def enabled() -> bool:
    """Whether verdicts are read from and written to disk (``LIGERKIT_VERDICT_CACHE=off``: no)."""
    return os.environ.get(SWITCH_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    """``$LIGERKIT_CACHE_DIR/verdicts``, else ``$XDG_CACHE_HOME/ligerkit/verdicts`` or ``~/.cache/ligerkit/verdicts``."""
    return cache_root() / "verdicts"


# --- the key ----------------------------------------------------------------------------------------

@functools.cache
def code_version(parts: tuple[str, ...] = ("",)) -> str:
    """The hash of ligerkit's source files under ``parts`` (folders or files of the package; ``""``: all of
    it), read once per process."""
    root = Path(__file__).resolve().parents[1]
    return source_digest(root, [path for part in parts for path in
                                (sorted((root / part).rglob("*.py")) if (root / part).is_dir() else [root / part])])


def source_digest(root: Path, files: Iterable[Path]) -> str:
    """The SHA-256 of ``files`` (under ``root``), each by its path inside ``root`` and its bytes, in the
    order given; a file that cannot be read counts as a marker naming the error, so its state is part of
    the hash instead of an exception."""
    digest = hashlib.sha256()
    for path in files:
        try:
            content = path.read_bytes()
        except OSError as exc:  # a dangling link or an unreadable file
            content = f"<unreadable: {type(exc).__name__}>".encode()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def checker_version() -> str:
    """The hash of ligerkit's checking code (the files in ``_CHECKER``), read once per process."""
    return code_version(_CHECKER)


@functools.cache
def versions() -> dict[str, str | None]:
    """The installed torch, transformers, liger-kernel and ligerkit versions (read once per process)."""
    return {name: installed_version(name) for name in _PACKAGES}


def environment() -> dict[str, Any]:
    """What every verdict also depends on: versions, the checker's own version, the platform."""
    import torch

    return {"python": platform.python_version(), "machine": platform.machine(), "versions": versions(),
            "checker": checker_version(), "cuda": torch.cuda.is_available(), "cuda_runtime": torch.version.cuda}


def file_hash(path: str | os.PathLike[str] | None) -> str:
    """The sha256 of a source file's bytes; :class:`Uncacheable` when there is none."""
    if not path or not str(path).endswith(".py"):
        raise Uncacheable(f"no source file ({path})")
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise Uncacheable(f"unreadable source {path}: {exc}") from exc


def describe(obj: object) -> str:
    """A class, function or partial as stable text: its dotted name, where its code starts, and a
    partial's arguments (a hub-kernel wrapper as the function it stands for)."""
    obj = stands_for(obj)
    if isinstance(obj, functools.partial):
        return f"partial({describe(obj.func)}, {obj.args!r}, {sorted(obj.keywords.items())!r})"
    code = getattr(inspect.unwrap(obj) if callable(obj) else obj, "__code__", None)
    where = f"@{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return qualified_name(obj) + where


def symbol(obj: object) -> dict[str, str]:
    """A class or function as a key: its description and the hash of the file that defines it.
    :class:`Uncacheable` unless importing its module and following its name gives the object back."""
    target = stands_for(obj.func if isinstance(obj, functools.partial) else obj)
    found: Any = sys.modules.get(getattr(target, "__module__", None) or "")
    for part in (getattr(target, "__qualname__", None) or "<none>").split("."):
        found = getattr(found, part, None)
    if found is None or stands_for(found) is not target:
        raise Uncacheable(f"{qualified_name(obj)} cannot be found again by its name")
    return {"name": describe(obj), "file": file_hash(getattr(sys.modules[target.__module__], "__file__", None))}


def _binding(value: object) -> str | None:
    value = stands_for(value)
    if inspect.isclass(value) or inspect.isroutine(value) or isinstance(value, functools.partial):
        return describe(value)
    if isinstance(value, tuple) and value and inspect.isclass(value[0]):  # a table's (class, kwargs) entry
        return f"{describe(value[0])}{value[1:]!r}"
    return None


def module_state(module: Any) -> dict[str, str]:
    """A modeling module as a key: its name, its source's hash, and the hash of what it binds now
    (globals, the entries of its tables, the methods of its own classes): another swap already made
    there changes the model a verdict is taken in."""
    bound: list[str] = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("__"):
            continue
        if (text := _binding(value)) is not None:
            bound.append(f"{name}={text}")
        if isinstance(value, dict):  # a table (``ACT2FN``), read with dict's own items (some build on ``[]``)
            bound += sorted(f"{name}[{k!r}]={t}" for k, v in list(dict.items(value)) if (t := _binding(v)) is not None)
        if inspect.isclass(value) and value.__module__ == module.__name__:
            bound += [f"{name}.{attr}={t}" for attr, v in sorted(vars(value).items())
                      if (t := _binding(getattr(v, "__func__", v))) is not None]
    text = "\n".join(bound)
    if " at 0x" in text:
        raise Uncacheable(f"{module.__name__} binds an object known only by its address")
    return {"name": module.__name__, "file": file_hash(getattr(module, "__file__", None)),
            "bindings": hashlib.sha256(text.encode()).hexdigest()}


def bindings_now(module: Any) -> str | None:
    """The hash of what ``module`` binds now (:func:`module_state`), for a key kept in the process: a
    verdict taken while another swap was made there is not the verdict once it is undone. ``None`` when
    the module binds an object known only by its address (such a verdict is not kept)."""
    try:
        return module_state(module)["bindings"]
    except Uncacheable:
        return None


def config_key(config: Any) -> dict[str, Any] | None:
    """A config as a key: its class (name and file) and all of its values; ``None`` for none."""
    if config is None:
        return None
    from ligerkit.probe.top_model import config_fingerprint

    return {"class": symbol(type(config)), "values": config_fingerprint(config)}


def config_classes(module: Any) -> list[dict[str, str]]:
    """The config classes ``module``'s models declare (their defaults build a model when no config is given)."""
    from ligerkit.hf import config_class_for

    found = {getattr(v, "config_class", None) for v in list(vars(module).values()) if inspect.isclass(v)}
    found.add(config_class_for(module))
    return [symbol(c) for c in sorted((c for c in found if inspect.isclass(c)), key=qualified_name)]


# --- reading and writing ----------------------------------------------------------------------------

def fields(data: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` when it is a dict with exactly ``schema``'s keys, each of its type: ``str``, ``bool``,
    ``float``, ``(str, None)`` (either), ``[str]`` (a list of them) or ``{str: float}``; else ``ValueError``."""
    if not isinstance(data, dict) or set(data) != set(schema):
        raise ValueError("not the verdict's fields")
    for name, kind in schema.items():
        if not _is(data[name], kind):
            raise ValueError(f"{name}: not {kind!r}")
    return data


def _is(value: Any, kind: Any) -> bool:
    if kind is None:
        return value is None
    if isinstance(kind, tuple):
        return any(_is(value, k) for k in kind)
    if isinstance(kind, list):
        return isinstance(value, list) and all(_is(v, kind[0]) for v in value)
    if isinstance(kind, dict):
        ((k_kind, v_kind),) = kind.items()
        return isinstance(value, dict) and all(_is(k, k_kind) and _is(v, v_kind) for k, v in value.items())
    if kind is float:
        return type(value) in (int, float)
    return type(value) is kind


def cached(kind: str, key: Callable[[], Mapping[str, Any]], compute: Callable[[], T],
           dump: Callable[[T], dict[str, Any]], load: Callable[[Any], T], keep: Callable[[T], bool] = lambda _: True) -> T:
    """The verdict for ``key()``: read from disk when a valid entry is there, else ``compute()``d and
    written (when ``keep`` says it lasts). ``key`` may raise :class:`Uncacheable`; ``load`` rebuilds the
    result from the stored fields and raises ``ValueError``, ``TypeError`` or ``KeyError`` for any it
    does not accept."""
    try:
        if not enabled():
            raise Uncacheable(f"{SWITCH_ENV} is off")
        text = json.dumps({"kind": kind, "environment": environment(), **key()}, sort_keys=True)
        if " at 0x" in text:  # a memory address: this key would never be asked again
            raise Uncacheable("the key holds a memory address")
    except Exception:  # Uncacheable, or a value JSON cannot hold: no key, the check just runs
        COUNTS["uncached"] += 1
        return compute()
    path = cache_dir() / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        stored = json.loads(path.read_text())
        if stored["format"] != FORMAT or json.dumps(stored["key"], sort_keys=True) != text:
            raise ValueError("another format or key")
        result = load(stored["verdict"])
        COUNTS["read"] += 1
        touch(path)
        return result
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        COUNTS["rejected"] += 1  # stale, truncated, garbage or of another schema: recomputed, rewritten
    result = compute()
    COUNTS["computed"] += 1
    if keep(result):
        _write(path, {"format": FORMAT, "key": json.loads(text), "verdict": dump(result)})
    return result


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write atomically; a folder that cannot be written is not an error (the verdict was computed)."""
    if write_json_atomically(path, data):
        COUNTS["written"] += 1
        prune(path.parent, MAX_ENTRIES)