"""A read-only view of Liger's own family registry.

Liger maps a Hugging Face ``model_type`` (aliases such as ``qwen3_vl_text`` included) to an
``apply_liger_kernel_to_<family>`` helper whose keyword arguments are the semantic modules it can
swap (``rope``, ``rms_norm``, ``swiglu``, ...). This module reads that registry instead of copying
it, so a new Liger release brings its families with it, and it works out which modeling modules a
helper touches, so the kit knows which namespaces to snapshot.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ligerkit.errors import UnknownFamilyError

# Keyword arguments of Liger helpers that are not semantic modules.
_NON_MODULE_PARAMS = frozenset({"model", "kwargs"})

_MODELING_IMPORT = re.compile(
    r"transformers\.models\.(\w+)(?:\.(modeling_\w+)|\s+import\s+(modeling_\w+))"
)
_HELPER_CALL = re.compile(r"\b(apply_liger_kernel_to_\w+)\(")


@dataclass(frozen=True)
class Family:
    """One entry of Liger's registry.

    Attributes:
        name: the ``model_type`` key (an alias shares its helper with the main family).
        helper: Liger's ``apply_liger_kernel_to_*`` function.
        defaults: every semantic module the helper accepts, with Liger's default for it.
        modeling_modules: dotted names of the transformers modules the helper (and the helpers it
            calls) patch, e.g. ``transformers.models.qwen3.modeling_qwen3``.
    """

    name: str
    helper: Callable[..., None]
    defaults: Mapping[str, bool]
    modeling_modules: tuple[str, ...]

    @property
    def helper_name(self) -> str:
        """Qualified name of the helper, e.g. ``liger_kernel...apply_liger_kernel_to_qwen3``."""
        return f"{self.helper.__module__}.{self.helper.__name__}"

    @property
    def accepted(self) -> frozenset[str]:
        """Semantic module names the helper accepts."""
        return frozenset(self.defaults)

    def import_modules(self) -> list[object]:
        """Import the family's modeling modules (the helper would import them anyway)."""
        return [importlib.import_module(name) for name in self.modeling_modules]


def _liger_registry() -> Mapping[str, Callable[..., None]]:
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    return MODEL_TYPE_TO_APPLY_LIGER_FN


def _module_defaults(helper: Callable[..., None]) -> dict[str, bool]:
    params = inspect.signature(helper).parameters.values()
    return {
        p.name: bool(p.default)
        for p in params
        if p.name not in _NON_MODULE_PARAMS and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _modeling_modules(helper: Callable[..., None], seen: set[str] | None = None) -> list[str]:
    """Modules a helper imports from ``transformers.models``, following helpers it calls."""
    seen = set() if seen is None else seen
    if helper.__name__ in seen:
        return []
    seen.add(helper.__name__)
    source = inspect.getsource(helper)
    found = [
        f"transformers.models.{pkg}.{mod_a or mod_b}"
        for pkg, mod_a, mod_b in _MODELING_IMPORT.findall(source)
    ]
    helpers_module = inspect.getmodule(helper)
    for name in _HELPER_CALL.findall(source):
        callee = getattr(helpers_module, name, None)
        if callable(callee):
            found.extend(_modeling_modules(callee, seen))
    return list(dict.fromkeys(found))


@functools.cache
def all_families() -> dict[str, Family]:
    """Every family in Liger's registry, keyed by ``model_type`` (aliases included)."""
    return {
        name: Family(
            name=name,
            helper=helper,
            defaults=_module_defaults(helper),
            modeling_modules=tuple(_modeling_modules(helper)),
        )
        for name, helper in _liger_registry().items()
    }


def get_family(name: str) -> Family:
    """Look a family up by its exact ``model_type``; raise :class:`UnknownFamilyError` otherwise."""
    families = all_families()
    try:
        return families[name]
    except KeyError:
        raise UnknownFamilyError(name, families) from None


@functools.cache
def known_module_names() -> frozenset[str]:
    """Every semantic module name any Liger helper accepts."""
    return frozenset(m for family in all_families().values() for m in family.defaults)
