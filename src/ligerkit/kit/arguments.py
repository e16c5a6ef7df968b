"""Checks of ``apply``'s arguments, before anything is imported or patched.

Every malformed value is an :class:`~ligerkit.errors.InvalidOptionError` naming the argument and
what it takes; an option that means nothing on the route asked for is refused, never ignored.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from ligerkit.errors import InvalidOptionError, InvalidPatchError

_SCALARS = (str, bytes, int, float, bool, list, tuple, set, frozenset)


def names(what: str, value: object) -> tuple[str, ...]:
    """A sequence of module names (not a bare string, no empty or repeated names)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidOptionError(
            f"{what} must be a list of module names, e.g. ['cross_entropy', 'fused_linear_cross_entropy'], "
            f"got {value!r}."
        )
    found = tuple(value)
    bad = [n for n in found if not isinstance(n, str) or not n.strip()]
    if bad:
        raise InvalidOptionError(f"{what} holds {bad!r}; every entry must be a module name.")
    repeated = sorted({n for n in found if found.count(n) > 1})
    if repeated:
        raise InvalidOptionError(f"{what} names {', '.join(repeated)} more than once.")
    return found


def flag(what: str, value: object) -> bool:
    """A true/false option (``strict``, ``probe``, ``trust_remote_code``): a real bool only."""
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{what} must be True or False, got {value!r}.")
    return value


def local_path(value: object) -> str | None:
    """``model_name_or_path`` as a string path (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    except Exception as exc:  # a PathLike whose __fspath__ fails
        raise InvalidOptionError(f"model_name_or_path {value!r} does not give a path: {exc}") from exc
    if not isinstance(path, str) or not path.strip():
        raise InvalidOptionError(
            f"model_name_or_path must be a local path to a directory (str or os.PathLike), got {value!r}."
        )
    return path


def family(value: object) -> str | None:
    """``model_family``: a non-empty string, or ``None``."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidOptionError(
            f"model_family must be a non-empty string (a Liger family such as 'qwen3', or a label on the "
            f"custom route), got {value!r}."
        )
    return value


def skip_list(value: object, what: str = "skip_probe") -> tuple[str, ...]:
    """``skip_probe`` / ``in_place_proven``: custom_patches keys, attrs or ``module.attr`` names (a
    collection of strings)."""
    if isinstance(value, str) or not isinstance(value, Collection) or not all(isinstance(v, str) and v for v in value):
        raise InvalidOptionError(
            f"{what} must be a list of custom_patches keys, attrs or 'module.attr' names, got {value!r}."
        )
    return tuple(value)


def probe_config(value: Any) -> Any:
    """``config=``: the model config object the probes build modules from (not a bare value)."""
    if value is not None and isinstance(value, _SCALARS):
        raise InvalidOptionError(
            f"config must be the model's config object (a transformers config, a dataclass, ...), got {value!r}; "
            "pass the object the model is built from."
        )
    return value


def official_only(custom: bool, config: Any, probe: bool, skip: tuple[str, ...], modules: object,
                  proven: tuple[str, ...] = ()) -> None:
    """Refuse options that mean nothing on the route asked for."""
    if custom and modules != "auto":
        raise InvalidPatchError(
            "`modules` selects Liger's official per-family flags and has no meaning with custom_patches. Put the "
            "official family in its own apply() call, then call apply() again with the custom map."
        )
    if not custom and (config is not None or not probe or skip or proven):
        raise InvalidOptionError(
            "config=, probe=, skip_probe= and in_place_proven= configure the probes of a custom_patches map; the "
            "official route takes Liger's own helper as it is. Drop them, or pass custom_patches."
        )


def tiled_mlp_fits(custom: bool, compile: bool, tiled: bool) -> None:
    """``tiled_mlp=True`` takes the official route's MLP in its tiled form: refused with a custom map (name
    ``LigerTiledSwiGLUMLP`` there) and in compile mode (the tiled MLP has no compile-mode operator)."""
    if tiled and custom:
        raise InvalidOptionError("tiled_mlp=True picks the tiled form of the MLP Liger's helper swaps in; a custom map "
                                 "names its classes itself: map the MLP to LigerTiledSwiGLUMLP (or LigerTiledGEGLUMLP)")
    if tiled and compile:
        raise InvalidOptionError("tiled_mlp=True with compile=True: Liger's tiled MLP has no compile-mode operator; "
                                 "drop one of them")
