"""Atomic apply and order-free revert.

Every ``apply`` either completes or leaves every binding exactly as it was, whatever is raised:
a failure is injected at every fault point (binding change or import, ``faults.py``) of every
route, as an ordinary exception and as ``KeyboardInterrupt``. Several kits on one binding revert
in any order to the original.
"""

from __future__ import annotations

import pytest
from liger_kernel.transformers.rms_norm import LigerRMSNorm, LigerRMSNormForGemma2
from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

import faults
from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.errors import LigerKitError
from ligerkit.kit import ledger as ledger_module
from toy_models import modeling_encoder as enc

ENC = "toy_models.modeling_encoder"


def _custom(kit: LigerKernelKit) -> None:
    kit.apply(model_family="enc", custom_patches={
        "rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm),
        "swiglu": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP),
    }, config=enc.EncoderConfig())


def _nothing(kit: LigerKernelKit) -> None:
    return None


# route -> (what the kit already holds, the apply call under test)
ROUTES = {
    "official qwen3": (_nothing, lambda kit: kit.apply(model_family="qwen3")),
    "official nemotron (table)": (_nothing, lambda kit: kit.apply(model_family="nemotron")),
    "official internvl (left off)": (_nothing, lambda kit: kit.apply(model_family="internvl")),
    "official gemma3 (process-wide)": (_nothing, lambda kit: kit.apply(model_family="gemma3")),
    "official llava (helper calls helpers)": (_nothing, lambda kit: kit.apply(model_family="llava")),
    "custom": (_nothing, _custom),
    "composite (custom map after an official apply)": (lambda kit: kit.apply(model_family="qwen3"), _custom),
}


@pytest.mark.parametrize("exc", [faults.Injected, KeyboardInterrupt])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_failure_at_any_fault_point_leaves_every_binding_as_it_was(route, exc):
    setup, apply = ROUTES[route]
    pristine = faults.bindings()
    for counting in (False, True):  # a first run imports and caches what later runs reuse
        kit = LigerKernelKit()
        setup(kit)
        points = faults.count(lambda: apply(kit)) if counting else apply(kit)
        kit.revert()
    assert points >= 3, points
    for n in range(1, points + 1):
        kit = LigerKernelKit()
        setup(kit)
        held, before = len(kit._ledger.entries), faults.bindings()
        escaped = faults.raising_at(n, exc, lambda: apply(kit))
        assert escaped is not None, f"{route}: fault point {n} of {points} was swallowed"
        # an ordinary exception may arrive wrapped in the kit's named error (HelperFailedError, a
        # PatchImportError for a module that failed to import), with the injected one as its cause
        assert isinstance(escaped, exc) or (isinstance(escaped, LigerKitError)
                                            and isinstance(escaped.__cause__, exc)), (n, repr(escaped))
        changed = faults.differing(before, faults.bindings())
        assert not changed, f"{route}: fault point {n} of {points} left {len(changed)} binding(s) changed"
        assert len(kit._ledger.entries) == held
        kit.revert()
        assert not faults.differing(pristine, faults.bindings()) and not ledger_module.live_layers()


def _kit_pair(first_apply, second_apply):
    a, b = LigerKernelKit(), LigerKernelKit()
    first_apply(a)
    second_apply(b)
    return a, b


@pytest.mark.parametrize("order", ["oldest first", "newest first"])
def test_two_kits_on_one_symbol_revert_in_any_order(order):
    original = enc.EncoderRMSNorm
    a, b = _kit_pair(
        lambda k: k.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)}),
        lambda k: k.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNormForGemma2)},
                          probe=False),
    )
    assert enc.EncoderRMSNorm is LigerRMSNormForGemma2
    first, second = (a, b) if order == "oldest first" else (b, a)
    first.revert()
    assert enc.EncoderRMSNorm is (LigerRMSNormForGemma2 if first is a else LigerRMSNorm)
    second.revert()
    assert enc.EncoderRMSNorm is original and not ledger_module.live_layers()


@pytest.mark.parametrize("order", ["oldest first", "newest first"])
def test_two_kits_applying_the_same_family_share_its_swaps(order):
    from transformers.models.qwen3 import modeling_qwen3

    before = faults.bindings()
    a, b = _kit_pair(lambda k: k.apply(model_family="qwen3"), lambda k: k.apply(model_family="qwen3"))
    assert b.report.patched and all(s.shared for s in b.report.patched)
    first, second = (a, b) if order == "oldest first" else (b, a)
    first.revert()
    assert modeling_qwen3.Qwen3RMSNorm is LigerRMSNorm  # the other kit still holds it
    second.revert()
    assert not faults.differing(before, faults.bindings())


def test_three_kits_reverted_middle_first():
    original = enc.EncoderMLP
    kits = [LigerKernelKit() for _ in range(3)]
    kits[0].apply(custom_patches={"m": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)})
    for kit in kits[1:]:
        kit.apply(custom_patches={"m": LigerPatch(ENC, "EncoderMLP", LigerSwiGLUMLP)})
    for index in (1, 0, 2):
        kits[index].revert()
    assert enc.EncoderMLP is original
