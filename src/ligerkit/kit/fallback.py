"""When Liger's own helper for a family fails: a proven map of ligerkit's instead, never silently.

Liger's family helpers import model classes by name, so a transformers release that renames one
breaks the helper (``HelperFailedError``) until Liger ships a fix. The kit can still give that family
kernels: ``kit.apply(..., fallback=builder)`` asks ``builder`` (the opt-in; by default the error is
raised) for a ``custom_patches`` map of the family's own symbols, and applies it through the custom
route, where every entry is probed, replayed on the model's calls and checked for in-place writes like
any custom map. The report says that the official helper failed, with its error, and what was applied
instead (:attr:`~ligerkit.kit.report.Application.fallback_from`).

The kit does not build maps: ``ligerkit.suggest.proven_map`` does (``suggest``'s verdicts on the
family's modeling modules), and recipes, ``ligerkit plan`` and ``ligerkit check`` pass it for
``model.liger_kernel.fallback: custom``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ligerkit.errors import HelperFailedError
from ligerkit.kit.custom import CustomPatches
from ligerkit.kit.families import Family
from ligerkit.kit.report import Application
from ligerkit.naming import FALLBACKS

__all__ = ["FALLBACKS", "FallbackBuilder", "FallbackMap", "selected", "stand_in"]


@dataclass(frozen=True)
class FallbackMap:
    """What a fallback builder found for a family: the map, the config its probes build the mapped
    modules from, and where the map came from (for the report)."""

    custom_patches: CustomPatches
    config: Any = None
    source: str = ""


FallbackBuilder = Callable[[str, HelperFailedError], FallbackMap]
"""``builder(family, helper_error) -> FallbackMap``: the map for a family whose helper failed."""


def selected(found: FallbackMap, family: str, defaults: Mapping[str, bool], modules: object,
             excluded: tuple[str, ...], strict: bool, error: HelperFailedError) -> FallbackMap:
    """``found`` with the apply's selection kept, as the official route would: excluded keys dropped;
    with ``modules="auto"`` a key Liger's helper turns off by default (``defaults``) dropped; with an
    explicit mapping exactly the keys it turns on. An explicit ``True`` the map has no entry for is an
    error (``strict``), so a module asked for is never reported as applied; a map left empty raises the
    helper's error with why."""
    patches = dict(found.custom_patches)
    explicit = dict(modules) if isinstance(modules, Mapping) else None
    keep = (lambda k: explicit.get(k) is True) if explicit is not None else (lambda k: defaults.get(k, True))
    patches = {k: v for k, v in patches.items() if k not in excluded and keep(k)}
    explicit = explicit or {}
    missing = sorted(k for k, on in explicit.items() if on and k not in patches and k not in excluded)
    if missing and strict:
        raise HelperFailedError(f"{error}\nThe fallback for {family} has no proven replacement for "
                                f"{', '.join(missing)} ({found.source}); turn {'it' if len(missing) == 1 else 'them'} "
                                "off, or pass strict=False to apply the rest") from error
    if not patches:
        raise HelperFailedError(f"{error}\nThe fallback for {family} proved no replacement to apply "
                                f"({found.source}): nothing was applied") from error
    return FallbackMap(patches, found.config, found.source)


def stand_in(builder: FallbackBuilder, family: Family, error: HelperFailedError, modules: object,
             excluded: tuple[str, ...], strict: bool,
             apply_custom: Callable[[str, CustomPatches, Any], Application]) -> Application:
    """The application that stands in for ``family``'s failed helper: ``builder``'s map, kept to the
    apply's selection (:func:`selected`), applied by ``apply_custom(label, patches, config)`` (the
    kit's custom route) and marked with the helper's error (``fallback_from``)."""
    found = selected(builder(family.name, error), family.name, family.defaults, modules, excluded, strict, error)
    cause = error.__cause__
    said = f"{type(cause).__name__}: {cause}" if cause is not None else str(error).split(". ")[0]
    app = apply_custom(family.name, found.custom_patches, found.config)
    return replace(app, fallback_from=f"{family.helper_name} failed: {said}")
