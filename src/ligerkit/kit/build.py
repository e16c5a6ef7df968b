"""One apply-build-scan path: apply the kit, build the model, scan it; on any error, undo this call's swaps.

``load_model`` (``ligerkit.integrations``), ``plan`` and the trainer's set-up
(``ligerkit.train.recipe.setup``, which the proofs call too) all go through :func:`apply_build_scan`::

    def apply_and_build():
        kit.apply(model_family="qwen3")                   # zero or more apply calls, then the build
        return build_model(config)

    model, scan = apply_build_scan(kit, apply_and_build, before_scan=(disable_kv_cache,))

The callable applies and builds (a recipe's ``prepare_model`` shows both itself); what comes after the
build is shared: the steps before the scan, the scan, the steps after it. If anything in the call raises,
every swap applied during the call is reverted (``kit.undone_on_error``), and swaps applied on the kit
before the call stay (a composite model built over two calls on one kit keeps the first call's swaps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from torch import nn

from ligerkit.kit.core import LigerKernelKit
from ligerkit.kit.scan import ScanResult

Step = Callable[[nn.Module], Any]  # a set-up step on the built model, in place (its return value is unused)


class BuiltModel(NamedTuple):
    """What :func:`apply_build_scan` returns: the built model and its scan (``None`` when not scanned)."""

    model: nn.Module
    scan: ScanResult | None


def apply_build_scan(kit: LigerKernelKit, apply_and_build: Callable[[], nn.Module], *,
                     before_scan: Iterable[Step] = (), after_scan: Iterable[Step] = (),
                     scan: bool = True) -> BuiltModel:
    """Apply and build (``apply_and_build()``), run ``before_scan`` on the model, scan it, run ``after_scan``.

    Args:
        kit: the kit ``apply_and_build`` applies on (it may already hold swaps of earlier calls).
        apply_and_build: applies the kit (zero or more ``kit.apply`` calls), then builds and returns the
            model.
        before_scan: steps that change the built model in place and that the scan and its guard must see
            (a key/value cache turned off, LoRA adapters), in order.
        after_scan: steps the scan must not see (activation checkpointing wraps forwards), in order.
        scan: scan the model (``kit.scan``); ``False`` when nothing was applied (Liger off).

    Returns the model and its scan. Raises whatever a step raises (``LateApplyError`` and the like from
    the scan), after reverting every swap this call applied; swaps applied before it stay.
    """
    with kit.undone_on_error():
        model = apply_and_build()
        for step in before_scan:
            step(model)
        result = kit.scan(model) if scan else None
        for step in after_scan:
            step(model)
    return BuiltModel(model, result)
