"""``LigerKernelKit``: apply Liger before the model is built, report what changed, revert exactly.

    kit = LigerKernelKit()
    report = kit.apply(model_name_or_path=path, modules="auto")          # official route
    report = kit.apply(model_family="myvlm", custom_patches={...})        # custom route
    model = build_model(...)
    kit.scan(model)                                                       # post-build scan + guard
    kit.revert()                                                          # after training: exact undo

The kit must stay applied for as long as the model it built is used: a model keeps the Liger
module classes it was built with, while functions (rotary) and class methods go back to the
originals on revert. ``scan`` leaves a guard that refuses such a mix, and anything that changed
the kit's swaps or turned Liger's loss kernel on behind its back, at the model's first forward.

Several ``apply`` calls on one kit (official for a known LLM, then a custom map for a novel
encoder) form the composite route: one ledger, one aggregated ``kit.report``. ``fallback=`` stands in
for a failing family helper (``ligerkit.kit.fallback``).
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ligerkit.compile.table import left_to_inductor
from ligerkit.environment import environment_gaps, warn_if_untested
from ligerkit.errors import FamilyResolutionError, HelperFailedError, InvalidOptionError
from ligerkit.hf import family_of, load_config
from ligerkit.kit import arguments
from ligerkit.kit.compile_mode import leave_custom_to_inductor, route_kernels
from ligerkit.kit.custom import CustomPatches, apply_custom
from ligerkit.kit.fallback import FallbackBuilder, stand_in
from ligerkit.kit.families import get_family
from ligerkit.kit.guard import FirstForwardGuard, reverted_error
from ligerkit.kit.ledger import Entry, Ledger
from ligerkit.kit.official import Modules, apply_official
from ligerkit.kit.report import ROUTE_CUSTOM, Application, LigerKernelReport
from ligerkit.kit.scan import ScanResult, scan_model
from ligerkit.naming import LOSS_MODULES
from ligerkit.kit.snapshot import PROCESS_WIDE_MODULES, Snapshot, Table, import_all, owners_of

log = logging.getLogger("ligerkit.kit")
_SCANNED: weakref.WeakKeyDictionary[nn.Module, tuple[weakref.ref, ScanResult]] = weakref.WeakKeyDictionary()


def scanned_by(model: nn.Module) -> tuple[LigerKernelKit, ScanResult] | None:
    """The kit whose ``scan`` last scanned ``model``, and that scan (``None`` if none did, or it is gone):
    how an integration finds the kit of a model built under ``kit.apply``, however it was built."""
    kit, scan = _SCANNED.get(model, (lambda: None, None))
    return (kit(), scan) if kit() is not None else None


class LigerKernelKit:
    """Applies Liger kernels through one ledger; see the module docstring for the routes."""

    def __init__(self) -> None:
        self._ledger = Ledger()
        self._applications: list[Application] = []
        self._reverted: list[Entry] = []  # swaps reverted so far (a model built under them is stale)
        self._guards: weakref.WeakKeyDictionary[nn.Module, FirstForwardGuard] = weakref.WeakKeyDictionary()

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
        compile: bool = False,
        in_place_proven: Collection[str] = (),
        fallback: FallbackBuilder | None = None,
        tiled_mlp: bool = False,
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
            in_place_proven: custom_patches keys, attrs or ``module.attr`` whose in-place write (Liger's
                default RMSNorm, its rotary) the caller proved in their own model, for when ligerkit
                cannot build and run the module's whole model to check it (without this, such an
                unproven write is refused with ``InPlaceBackwardError``); the report lists them as
                unproven.
            compile: the model will be ``torch.compile``d: Liger's classes then call their kernels
                through ``ligerkit.compile`` operators (no graph breaks, nothing written in place), and
                a module Inductor ran faster on the H200 (``ligerkit/compile/inductor_table.json``) is
                left off unless named in ``modules``; the report says which.
            fallback: official route: when the family's helper fails (``HelperFailedError``), the map
                ``fallback(family, error)`` gives (``ligerkit.suggest.proven_map``) is applied through the custom
                route instead and reported (``fallback_from``; ``ligerkit.kit.fallback``). ``None``: raised.
            tiled_mlp: official route: the MLP in Liger's tiled form (``LigerTiledSwiGLUMLP``), probed, noted.

        Raises:
            LigerKitError: a subclass per problem, with what to do in its message.
        """
        warn_if_untested()  # once per process, where the kit first applies: a stack outside the tested ones
        excluded = arguments.names("excluded_modules", excluded_modules)
        path, model_family = arguments.local_path(model_name_or_path), arguments.family(model_family)
        strict, probe = arguments.flag("strict", strict), arguments.flag("probe", probe)
        trust_remote_code = arguments.flag("trust_remote_code", trust_remote_code)
        skip, config = arguments.skip_list(skip_probe), arguments.probe_config(config)
        proven = arguments.skip_list(in_place_proven, "in_place_proven")
        arguments.official_only(custom_patches is not None, config, probe, skip, modules, proven)
        compile, tiled_mlp = arguments.flag("compile", compile), arguments.flag("tiled_mlp", tiled_mlp)
        arguments.tiled_mlp_fits(custom_patches is not None, compile, tiled_mlp)
        if fallback is not None and (custom_patches is not None or not callable(fallback)):
            raise InvalidOptionError("fallback= takes a map builder (ligerkit.suggest.proven_map), official route only")
        wins = left_to_inductor() if compile else {}
        keep, apps = len(self._ledger.entries), len(self._applications)
        try:  # until the report is returned, anything raised (KeyboardInterrupt included) undoes it all
            if custom_patches is not None:
                if config is None and path is not None:
                    config = load_config(path, trust_remote_code)
                app = self._apply_custom(model_family, custom_patches, excluded, config, probe, skip, wins, proven)
            else:
                family = get_family(self._family_name(path, model_family, trust_remote_code))
                already_on = self._turned_on(family.helper_name)
                try:
                    app = apply_official(family, modules, excluded, self._ledger, already_on, strict, wins, tiled_mlp)
                except HelperFailedError as exc:  # the helper's own swaps are already undone
                    if fallback is None:
                        raise
                    app = stand_in(fallback, family, exc, modules, excluded, strict, lambda label, patches, cfg:
                                   self._apply_custom(label, patches, excluded, cfg, True, (), wins))
            if compile:
                app = route_kernels(app, self._ledger)
            self._applications.append(app)
            on = [name for name, enabled in app.modules.items() if enabled]
            left = f"; left off: {', '.join(app.left_off)}" if app.left_off else ""
            log.info("applied the %s route for %s: %d swap(s), modules on: %s%s", app.route, app.family or "(unnamed)",
                     len(app.patched), ", ".join(on) or "none", left)
            return LigerKernelReport((app,), environment_gaps())
        except BaseException:
            del self._applications[apps:]
            self._ledger.revert(keep)
            raise

    def _apply_custom(self, label: str | None, custom_patches: CustomPatches, excluded: Sequence[str], config: Any,
                      probe: bool, skip: Collection[str], wins: dict[str, str],
                      proven: Collection[str] = ()) -> Application:
        """The custom route, with entries whose kernel Inductor wins left off (compile mode)."""
        left: dict[str, str] = {}
        if wins:
            custom_patches, left = leave_custom_to_inductor(custom_patches, wins)
            if not custom_patches:
                return Application(route=ROUTE_CUSTOM, family=label, helper=None, modules=dict.fromkeys(left, False),
                                   requested=dict.fromkeys(left, True), excluded=tuple(excluded), noop=(), patched=(),
                                   left_off=left)
        app = apply_custom(label, custom_patches, excluded, self._ledger, config, probe, skip, proven)
        if left:
            app = replace(app, modules={**app.modules, **dict.fromkeys(left, False)},
                          requested={**dict(app.requested), **dict.fromkeys(left, True)}, left_off={**app.left_off, **left})
        return app

    @staticmethod
    def _family_name(model_name_or_path: str | os.PathLike[str] | None, model_family: str | None, trust: bool) -> str:
        if model_family:
            return model_family
        if model_name_or_path is None:
            raise FamilyResolutionError("apply() needs model_family=, model_name_or_path= (a local directory with a "
                                        "config.json), or custom_patches=.")
        return family_of(model_name_or_path, trust)

    def _turned_on(self, helper: str) -> frozenset[str]:
        """Modules earlier applications on this kit already turned on through ``helper``."""
        return frozenset(name for app in self._applications if app.helper == helper
                         for name, on in app.modules.items() if on)

    @property
    def report(self) -> LigerKernelReport:
        """Aggregated report of every ``apply`` on this kit since the last ``revert``."""
        return LigerKernelReport(tuple(self._applications), environment_gaps())

    @property
    def active(self) -> bool:
        """Whether this kit currently holds any swap."""
        return bool(self._ledger.entries)

    def revert(self) -> None:
        """Restore every original object by identity, newest first (any order across kits).

        Call it when the models built under the kit are no longer used: a model keeps the classes it was
        built with, so using it after a revert mixes Liger and original code (its guard refuses).
        Interrupted half-way (``KeyboardInterrupt``), it is finished by calling it again."""
        try:
            self._ledger.revert(done=self._reverted)
        finally:
            self._applications.clear()

    @contextmanager
    def applied(self, *args: Any, **kwargs: Any) -> Iterator[LigerKernelReport]:
        """``with kit.applied(...) as report:`` patches for the block, reverts on exit. Build *and* use
        the model inside the block: leaving it reverts the swaps."""
        with self._undone_after(always=True):
            yield self.apply(*args, **kwargs)

    @contextmanager
    def undone_on_error(self) -> Iterator[None]:
        """Everything applied inside the block is reverted if the block raises (anything, even
        ``KeyboardInterrupt``); what was applied before it stays. For "apply, then build" steps that
        must leave no half-done state when the build fails."""
        with self._undone_after(always=False):
            yield

    @contextmanager
    def _undone_after(self, always: bool) -> Iterator[None]:
        keep, apps = len(self._ledger.entries), len(self._applications)
        failed = True
        try:
            yield
            failed = False
        finally:
            if always or failed:
                try:
                    self._ledger.revert(keep, done=self._reverted)
                finally:
                    del self._applications[apps:]

    def scan(self, model: Any, strict: bool = True) -> ScanResult:
        """Scan a built model and guard it until its first forward.

        Every class swap must be the class of the matching submodules: raises
        :class:`~ligerkit.errors.LateApplyError` (when ``strict``) naming the module paths still of
        an original class, and :class:`~ligerkit.errors.RevertedKitError` for a model built under
        swaps this kit has since reverted. Returns counts per replacement, unused swaps and stale
        bindings. The guard left on the model raises
        :class:`~ligerkit.errors.ForeignPatchError` at the first forward if something outside the
        kit changed its swaps or bound Liger's loss forward to the model in between.
        """
        if not isinstance(model, nn.Module) or isinstance(model, torch.jit.ScriptModule):
            raise InvalidOptionError(f"scan() takes the built model (an eager torch.nn.Module), got {type(model).__name__}: "
                                     "build the model after apply(), then pass it to scan() before any scripting or wrapping.")
        stale = self._stale_swaps(model)
        if stale:
            raise reverted_error(stale)
        scan = scan_model(model, self._ledger.entries, strict)
        old = self._guards.pop(model, None)
        if old is not None:
            old.remove()
        guard = FirstForwardGuard(self._ledger, self._ledger.entries, Snapshot(self._watched_owners()), model, scan)
        guard.install(model)
        self._guards[model] = guard
        _SCANNED[model] = (weakref.ref(self), scan)
        return scan

    def _stale_swaps(self, model: nn.Module) -> list[Entry]:
        """Reverted swaps whose replacement class the model still holds (and no live swap explains)."""
        guard = self._guards.get(model)
        if guard is not None and guard.reverted():
            return guard.reverted()
        live = {id(e.replacement) for e in self._ledger.entries}
        gone = {id(e.replacement): e for e in self._reverted if id(e.replacement) not in live}
        if not gone:
            return []
        held = {id(type(m)) for m in model.modules()}
        return [e for key, e in gone.items() if key in held]

    def _watched_owners(self) -> list[object]:
        """The namespaces the kit's swaps live in (and the families' modules), for the guard's snapshot."""
        names = set(PROCESS_WIDE_MODULES)
        for app in self._applications:
            if app.helper is not None and app.family is not None:
                names.update(get_family(app.family).modeling_modules)
        for entry in self._ledger.entries:
            owner = entry.owner
            names.add(owner.module if isinstance(owner, Table) else getattr(owner, "__module__", None)
                      or getattr(owner, "__name__", ""))
        return owners_of(m for m in import_all(sorted(n for n in names if n in sys.modules)))

