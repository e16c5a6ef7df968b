"""``plan``: apply, build the family's model on the meta device, scan it, report, revert.

Everything a recipe would do before training, without a GPU, memory or weights: the route, the
resolved module selection, the swaps, and proof (the scan) that the swaps reach the modules the
model really instantiates.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ligerkit.errors import InvalidOptionError
from ligerkit.kit.build import apply_build_scan
from ligerkit.naming import FALLBACKS
from ligerkit.kit.core import LOSS_MODULES, LigerKernelKit
from ligerkit.hf import PLAN_LAYERS, build_meta_model, default_config, load_local_config
from ligerkit.kit.official import Modules
from ligerkit.kit.report import LigerKernelReport
from ligerkit.kit.scan import ScanResult

DEFAULT_FAMILY = "qwen3"


@dataclass(frozen=True)
class PlanResult:
    """A plan's report, the scan of the meta-built model, and what was built."""

    report: LigerKernelReport
    scan: ScanResult
    model_class: str
    config_source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "model_class": self.model_class,
            "config": self.config_source,
            "report": self.report.to_dict(),
            "scan": self.scan.to_dict(),
        }


def plan(
    family: str | None = None,
    model_path: str | os.PathLike[str] | None = None,
    modules: Modules = "auto",
    excluded_modules: Sequence[str] = LOSS_MODULES,
    fallback: str = "error",
) -> PlanResult:
    """Apply on a fresh kit, meta-build the model, scan it (the kit's one apply-build-scan path,
    :func:`~ligerkit.kit.apply_build_scan`), and revert (always). ``fallback="custom"``: a family whose
    Liger helper fails gets ligerkit's proven map instead (``ligerkit.suggest.proven_map``)."""
    if fallback not in FALLBACKS:
        raise InvalidOptionError(f"fallback={fallback!r}: use one of {', '.join(FALLBACKS)}")
    builder = None
    if fallback == "custom":
        from ligerkit.suggest import proven_map

        builder = proven_map
    kit = LigerKernelKit()
    if model_path is not None:
        config = load_local_config(model_path)
        source = f"{model_path} (at most {PLAN_LAYERS} layers)"
    else:
        family = family or DEFAULT_FAMILY
        config = None
        source = f"transformers' default {family} config (at most {PLAN_LAYERS} layers)"
    reports: list[LigerKernelReport] = []

    def apply_and_build() -> Any:
        reports.append(kit.apply(model_path, model_family=family, modules=modules, excluded_modules=excluded_modules,
                                 fallback=builder))
        built_from = config if config is not None else default_config(reports[0].applications[0].family or family)
        return build_meta_model(built_from)

    try:
        model, scan = apply_build_scan(kit, apply_and_build)
        assert scan is not None
        return PlanResult(reports[0], scan, f"{type(model).__module__}.{type(model).__qualname__}", source)
    finally:
        kit.revert()
