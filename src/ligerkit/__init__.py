"""ligerkit: wire Liger Kernel into training recipes before the model is built, and prove it.

Public API::

    from ligerkit import LigerKernelKit, LigerPatch, LigerKernelReport

The kit's names are imported on first use (PEP 562), so ``import ligerkit`` and the command line's
``--help`` stay light: the kit pulls in torch, and Liger's registry pulls in its Triton kernels.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ligerkit.errors import LigerKitError
from ligerkit.naming import LOSS_MODULES

if TYPE_CHECKING:
    from ligerkit.kit import (
        Application,
        LigerKernelKit,
        LigerKernelReport,
        LigerPatch,
        ScanResult,
        StaleBinding,
        Swap,
    )

__version__ = "0.3.0"

# Public name -> the module that defines it, imported the first time the name is read.
_LAZY = {
    "Application": "ligerkit.kit",
    "LigerKernelKit": "ligerkit.kit",
    "LigerKernelReport": "ligerkit.kit",
    "LigerPatch": "ligerkit.kit",
    "ScanResult": "ligerkit.kit",
    "StaleBinding": "ligerkit.kit",
    "Swap": "ligerkit.kit",
}

__all__ = [
    "LOSS_MODULES",
    "Application",
    "LigerKernelKit",
    "LigerKernelReport",
    "LigerKitError",
    "LigerPatch",
    "ScanResult",
    "StaleBinding",
    "Swap",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name of the kit the first time it is read (PEP 562)."""
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'ligerkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    """Module attributes, the not-yet-imported public names included."""
    return sorted(set(globals()) | set(__all__))
