"""The kit: apply / revert / scan, Liger's family registry, the ledger, the report, the scan, and the one
apply-build-scan path (``apply_build_scan``)."""

from ligerkit.kit.build import BuiltModel, apply_build_scan
from ligerkit.kit.core import LOSS_MODULES, LigerKernelKit
from ligerkit.kit.custom import LigerPatch
from ligerkit.kit.report import Application, LigerKernelReport, Swap
from ligerkit.kit.scan import ScanResult, StaleBinding

__all__ = [
    "LOSS_MODULES",
    "Application",
    "BuiltModel",
    "LigerKernelKit",
    "LigerKernelReport",
    "LigerPatch",
    "ScanResult",
    "StaleBinding",
    "Swap",
    "apply_build_scan",
]
