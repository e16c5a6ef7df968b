"""``ligerkit families``: a view of Liger's registry, cached on disk per Liger and transformers version.

Importing Liger's registry (``liger_kernel.transformers.monkey_patch``) pulls in torch and every
Triton kernel, seconds before a word is printed. What ``families`` shows of it (each family's
helper, the modules it accepts with Liger's defaults, and the modeling modules it patches) only
changes with the installed liger-kernel, so it is kept as JSON under ``$LIGERKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/ligerkit``, else ``~/.cache/ligerkit``, keyed by the liger-kernel and transformers
versions and the registry file's size and time. A miss, or a cache folder that cannot be written,
reads the live registry (``ligerkit.kit.families``), which is also what the kit always uses.
The view lives with the command line, not the kit: importing the kit package means importing torch.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path
from typing import Any

from ligerkit.cache_files import CACHE_ENV, cache_root, write_json_atomically  # noqa: F401 (CACHE_ENV: re-exported)
from ligerkit.environment import installed_version
from ligerkit.naming import LOSS_MODULES

_FORMAT = 1
_REGISTRY_FILE = ("transformers", "monkey_patch.py")  # under the liger_kernel package
_ROW_KEYS = {"family", "helper", "modules", "modeling_modules"}


def cache_dir() -> Path:
    """Where the view is kept: ``$LIGERKIT_CACHE_DIR``, ``$XDG_CACHE_HOME/ligerkit`` or ``~/.cache/ligerkit``."""
    return cache_root()


def _stamp() -> dict[str, Any]:
    """What the cached view is valid for: the two versions and the registry file, found without importing it."""
    stamp: dict[str, Any] = {"format": _FORMAT, "liger_kernel": installed_version("liger-kernel"),
                             "transformers": installed_version("transformers"), "registry_file": None}
    spec = importlib.util.find_spec("liger_kernel")  # a top-level name: found, not imported
    if spec is not None and spec.origin:
        try:
            found = Path(spec.origin).parent.joinpath(*_REGISTRY_FILE).stat()
            stamp["registry_file"] = [found.st_size, found.st_mtime_ns]
        except OSError:
            pass
    return stamp


def cache_file(stamp: dict[str, Any] | None = None) -> Path:
    """The cache file for the installed versions."""
    stamp = stamp or _stamp()
    return cache_dir() / f"families-liger-kernel-{stamp['liger_kernel']}-transformers-{stamp['transformers']}.json"


def live_view() -> list[dict[str, Any]]:
    """The view read from Liger's registry itself (imports liger_kernel), sorted by family name."""
    from ligerkit.kit.families import all_families

    return [{"family": f.name, "helper": f.helper.__name__, "modules": dict(f.defaults),
             "modeling_modules": list(f.modeling_modules)}
            for f in sorted(all_families().values(), key=lambda f: f.name)]


def registry_view() -> list[dict[str, Any]]:
    """The view from the cache when it is valid for what is installed, else live (and cached for next time)."""
    stamp = _stamp()
    path = cache_file(stamp)
    try:
        cached = json.loads(path.read_text())
        if cached["stamp"] == stamp and cached["families"] and all(set(r) == _ROW_KEYS for r in cached["families"]):
            return cached["families"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or one from another version or format: rebuilt below
    view = live_view()
    _write(path, {"stamp": stamp, "families": view})
    return view


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write the cache atomically; a folder that cannot be written is not an error (the view is live)."""
    write_json_atomically(path, data)


def ligerkit_defaults(liger: dict[str, bool]) -> dict[str, bool]:
    """What ``kit.apply(model_family=...)`` turns on by default: Liger's defaults, the loss kernels off."""
    return {name: on and name not in LOSS_MODULES for name, on in liger.items()}


def json_rows(view: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--json`` rows: the view plus ``ligerkit_defaults`` (the effective default of every module)."""
    return [{**row, "ligerkit_defaults": ligerkit_defaults(row["modules"])} for row in view]


def text_lines(view: list[dict[str, Any]], width: int) -> list[str]:
    """The view as lines of at most ``width`` characters: a block per family, its modules under it."""
    width = max(width, 40)
    lines = textwrap.wrap(
        f"Liger's {len(view)} families, by name. 'on' and 'off' are Liger's default and ligerkit's alike; "
        f"ligerkit keeps the loss kernels ({', '.join(LOSS_MODULES)}) off unless they are asked for "
        "(--modules, or excluded_modules=() in the API).", width)
    for row in view:
        liger, ours = row["modules"], ligerkit_defaults(row["modules"])
        lines += ["", f"{row['family']}: {row['helper']}"]
        lines += _wrapped("on:", [m for m, on in liger.items() if on and ours[m]], width)
        lines += _wrapped("off:", [m for m, on in liger.items() if not on], width)
        for name in (m for m, on in liger.items() if on and not ours[m]):
            lines += textwrap.wrap(f"{name}: Liger on, ligerkit off (loss kernel)", width,
                                   initial_indent="  ", subsequent_indent="    ")
    lines += [""] + textwrap.wrap("`ligerkit plan --family NAME` shows what the kit swaps in a model of the family "
                                  "(a check may still leave a module off there).", width)
    return lines


def _wrapped(label: str, names: list[str], width: int) -> list[str]:
    """``  on:  a, b, c`` wrapped under its label; nothing for an empty list."""
    if not names:
        return []
    return textwrap.wrap(", ".join(names), width, initial_indent=f"  {label:<5}", subsequent_indent=" " * 7,
                         break_on_hyphens=False)
