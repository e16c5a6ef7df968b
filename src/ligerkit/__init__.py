"""ligerkit: wire Liger Kernel into training recipes before the model is built, and prove it.

Public API::

    from ligerkit import LigerKernelKit, LigerPatch, LigerKernelReport
"""

from ligerkit.errors import LigerKitError
from ligerkit.kit import (
    LOSS_MODULES,
    Application,
    LigerKernelKit,
    LigerKernelReport,
    LigerPatch,
    ScanResult,
    StaleBinding,
    Swap,
)

__version__ = "0.1.0"

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
