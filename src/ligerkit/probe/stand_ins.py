"""Liger objects a module already binds, run as the catalog's pure-PyTorch reference math.

A probe builds and runs a module's whole model. When another swap is already made there (an earlier
module of the same official route, another kit's), the model calls Liger's Triton kernels, which do
not run on a CPU. In :func:`liger_stand_ins` every Liger function the module binds, and every Liger
module instance of a model built in the block, computes the catalog's reference instead: the model
runs, and its calls of the other symbols are what they are with those swaps made.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

__all__ = ["catalog_entry", "liger_stand_ins"]


def catalog_entry(obj: object) -> Any:
    """The catalog entry of ``obj`` or of the nearest class it derives from; ``None`` when none has one."""
    from ligerkit.probe.catalog import lookup

    for cls in getattr(obj, "__mro__", (obj,)):
        entry = lookup(cls)
        if entry is not None:
            return entry
    return None


@contextmanager
def liger_stand_ins(module: types.ModuleType, active: bool = True) -> Iterator[Callable[[nn.Module], None]]:
    """In the block, the Liger functions ``module`` binds are their catalog references (rebound as they
    were on exit, whatever is raised). Yields a function that makes the Liger module instances of a
    built model (rotaries aside, which are functions) run their reference too. With ``active`` false
    (on an accelerator, where the kernels run) nothing is replaced and the function does nothing."""
    namespace = vars(module)
    functions = {name: catalog_entry(value) for name, value in list(namespace.items())
                 if active and inspect.isfunction(value) and (value.__module__ or "").startswith("liger_kernel")}
    functions = {name: entry for name, entry in functions.items() if entry is not None}
    saved = {name: namespace[name] for name in functions}

    def instances(model: nn.Module) -> None:
        for m in model.modules() if active else ():
            entry = catalog_entry(type(m)) if type(m).__module__.startswith("liger_kernel") else None
            if entry is not None and entry.kind != "rope":
                m.forward = functools.partial(entry.reference, m)

    try:
        for name, entry in functions.items():
            namespace[name] = entry.reference
        yield instances
    finally:
        namespace.update(saved)
