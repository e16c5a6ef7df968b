"""A read-only view of Liger's own family registry.

Liger maps a Hugging Face ``model_type`` (aliases such as ``qwen3_vl_text`` included) to an
``apply_liger_kernel_to_<family>`` helper whose keyword arguments are the semantic modules it can
swap (``rope``, ``rms_norm``, ``swiglu``, ...). This module reads that registry instead of copying
it, so a new Liger release brings its families with it, and it works out which modeling modules a
helper touches, so the kit knows which namespaces to snapshot.
"""

from __future__ import annotations

import dis
import functools
import importlib
import inspect
import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ligerkit.errors import UnknownFamilyError

# Keyword arguments of Liger helpers that are not semantic modules.
_NON_MODULE_PARAMS = frozenset({"model", "kwargs"})

_MODELS_PACKAGE = re.compile(r"^transformers\.models\.\w+$")
_MODELING_MODULE = re.compile(r"^transformers\.models\.\w+\.modeling_\w+$")


@dataclass(frozen=True)
class Family:
    """One entry of Liger's registry.

    Attributes:
        name: the ``model_type`` key (an alias shares its helper with the main family).
        helper: Liger's ``apply_liger_kernel_to_*`` function.
        defaults: every semantic module the helper accepts, with Liger's default for it.
    """

    name: str
    helper: Callable[..., None]
    defaults: Mapping[str, bool]

    @property
    def modeling_modules(self) -> tuple[str, ...]:
        """Dotted names of the transformers modules the helper (and helpers it calls) patch."""
        return _modeling_modules(self.helper)

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


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


@functools.cache
def _modeling_modules(helper: Callable[..., None]) -> tuple[str, ...]:
    """Modules a helper imports from ``transformers.models``, following helpers it calls.

    Read from the helper's bytecode (its ``import`` statements), not from its source text.
    """
    found: list[str] = []
    helpers_module = inspect.getmodule(helper)
    for code in _code_objects(helper.__code__):
        fromlist: tuple[str, ...] = ()
        for ins in dis.get_instructions(code):
            if ins.opname == "LOAD_CONST":
                fromlist = ins.argval if isinstance(ins.argval, tuple) else ()
            elif ins.opname == "IMPORT_NAME":
                name = str(ins.argval)
                if _MODELING_MODULE.match(name):
                    found.append(name)
                elif _MODELS_PACKAGE.match(name):
                    found.extend(f"{name}.{item}" for item in fromlist if item.startswith("modeling_"))
        for name in code.co_names:
            callee = getattr(helpers_module, name, None)
            if name.startswith("apply_liger_kernel_to_") and callable(callee) and callee is not helper:
                found.extend(_modeling_modules(callee))
    return tuple(dict.fromkeys(found))


@functools.cache
def all_families() -> dict[str, Family]:
    """Every family in Liger's registry, keyed by ``model_type`` (aliases included)."""
    return {
        name: Family(
            name=name,
            helper=helper,
            defaults=_module_defaults(helper),
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
