"""``LigerKernelKit``: apply Liger before the model is built, report what changed, revert exactly.

    kit = LigerKernelKit()
    report = kit.apply(model_name_or_path=path, modules="auto")          # official route
    report = kit.apply(model_family="myvlm", custom_patches={...})        # custom route
    model = build_model(...)
    kit.verify(model)                                                     # post-build scan
    kit.revert()                                                          # exact undo

Several ``apply`` calls on one kit (official for a known LLM, then a custom map for a novel
encoder) form the composite route: one ledger, one aggregated ``kit.report``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ligerkit.environment import environment_gaps
from ligerkit.errors import FamilyResolutionError, InvalidPatchError
from ligerkit.kit.config import family_of, load_config
from ligerkit.kit.custom import CustomPatches, apply_custom
from ligerkit.kit.families import get_family
from ligerkit.kit.ledger import Ledger
from ligerkit.kit.official import Modules, apply_official
from ligerkit.kit.report import Application, LigerKernelReport
from ligerkit.kit.scan import ScanResult, scan_model

LOSS_MODULES: tuple[str, ...] = ("cross_entropy", "fused_linear_cross_entropy")


class LigerKernelKit:
    """Applies Liger kernels through one ledger; see the module docstring for the routes."""

    def __init__(self) -> None:
        self._ledger = Ledger()
        self._applications: list[Application] = []

    def apply(
        self,
        model_name_or_path: str | os.PathLike[str] | None = None,
        *,
        model_family: str | None = None,
        modules: Modules = "auto",
        excluded_modules: Sequence[str] = LOSS_MODULES,
        custom_patches: CustomPatches | None = None,
        trust_remote_code: bool = False,
        strict: bool = True,
        config: Any = None,
        probe: bool = True,
        skip_probe: Collection[str] = (),
    ) -> LigerKernelReport:
        """Patch before the model is built and return the measured report of this call.

        Args:
            model_name_or_path: local checkpoint or config directory; its ``model_type`` names the
                family when ``model_family`` is not given. Never downloaded.
            model_family: Liger registry key (aliases such as ``qwen3_vl_text`` work), used
                verbatim; on the custom route only a label for the report.
            modules: ``"auto"`` (Liger's per-family defaults, exclusions forced off) or a mapping
                ``{module: bool}`` checked against the family's helper.
            excluded_modules: modules kept off; defaults to the loss kernels, which change how the
                loss is computed and normalized.
            custom_patches: ``{name: LigerPatch | [LigerPatch, ...]}`` for the custom route.
            trust_remote_code: allow remote code when reading a cached config (off by default).
            strict: when false, an enabled module the helper does not accept or that swaps nothing
                is recorded in the report's no-op list instead of raising. Everything else raises.
            config: the model config the custom-route probe builds modules from (read from
                ``model_name_or_path`` when not given); without one, modules whose constructor
                takes a config go unprobed, and the report lists them.
            probe: probe every custom patch's math against the source before swapping (default).
            skip_probe: custom_patches keys, attrs or ``module.attr`` whose probe is skipped (a
                constructor the probe cannot handle); the report lists them as unprobed.

        Raises:
            LigerKitError: a subclass per problem, with what to do in its message.
        """
        excluded = tuple(excluded_modules)
        if custom_patches is not None:
            if modules != "auto":
                raise InvalidPatchError(
                    "`modules` selects Liger's official per-family flags and has no meaning with "
                    "custom_patches. Put the official family in its own apply() call, then call apply() "
                    "again with the custom map."
                )
            if config is None and model_name_or_path is not None:
                config = load_config(model_name_or_path, trust_remote_code)
            app = apply_custom(model_family, custom_patches, excluded, self._ledger, config, probe, skip_probe)
        else:
            family = get_family(self._family_name(model_name_or_path, model_family, trust_remote_code))
            already_on = self._turned_on(family.helper_name)
            app = apply_official(family, modules, excluded, self._ledger, already_on, strict)
        self._applications.append(app)
        return LigerKernelReport((app,), environment_gaps())

    @staticmethod
    def _family_name(
        model_name_or_path: str | os.PathLike[str] | None, model_family: str | None, trust: bool
    ) -> str:
        if model_family:
            return model_family
        if model_name_or_path is None:
            raise FamilyResolutionError(
                "apply() needs model_family=, model_name_or_path= (a local directory with a "
                "config.json), or custom_patches=."
            )
        return family_of(model_name_or_path, trust)

    def _turned_on(self, helper: str) -> frozenset[str]:
        """Modules earlier applications on this kit already turned on through ``helper``."""
        return frozenset(
            name for app in self._applications if app.helper == helper for name, on in app.modules.items() if on
        )

    @property
    def report(self) -> LigerKernelReport:
        """Aggregated report of every ``apply`` on this kit since the last ``revert``."""
        return LigerKernelReport(tuple(self._applications), environment_gaps())

    @property
    def active(self) -> bool:
        """Whether this kit currently holds any swap."""
        return bool(self._ledger.entries)

    def revert(self) -> None:
        """Restore every original object by identity, newest first."""
        try:
            self._ledger.revert()
        finally:
            self._applications.clear()

    @contextmanager
    def applied(self, *args: Any, **kwargs: Any) -> Iterator[LigerKernelReport]:
        """``with kit.applied(...) as report:`` patches for the block, reverts on exit."""
        keep = len(self._ledger.entries)
        apps = len(self._applications)
        try:
            yield self.apply(*args, **kwargs)
        finally:
            self._ledger.revert(keep)
            del self._applications[apps:]

    def verify(self, model: Any, strict: bool = True) -> ScanResult:
        """Scan a built model: every class swap must be the class of the matching submodules.

        Raises :class:`~ligerkit.errors.LateApplyError` (when ``strict``) naming the module paths
        still of an original class. Returns counts per replacement, unused swaps and stale
        bindings.
        """
        return scan_model(model, self._ledger.entries, strict)
