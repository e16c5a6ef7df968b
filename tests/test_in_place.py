"""In-place writes in the decision table: the aliasing detector, suggest, and both routes.

Liger's default RMSNorm writes dX into the incoming dY, and its rotary writes into q/k. The detector
emulates those writes on the CPU in a small model of the module and compares gradients; these
tests pin it on toy layouts, on transformers families, and against Liger's own per-family choices.
"""

from __future__ import annotations

import importlib
import inspect
import sys

import pytest
from liger_kernel.transformers.rms_norm import LigerRMSNorm, LigerRMSNormForOlmo2
from liger_kernel.transformers.rope import liger_rotary_pos_emb

from helpers import helper_failure
from ligerkit import LigerPatch
from ligerkit.errors import HelperFailedError, InPlaceBackwardError
from ligerkit.kit.families import all_families
from ligerkit.kit.snapshot import MISSING, Snapshot, import_all, owners_of
from ligerkit.kit.swap_checks import writes_in_place
from ligerkit.probe.aliasing import FORWARD_AND_BACKWARD, in_place_hazard
from ligerkit.probe.catalog import CATALOG, by_name
from ligerkit.suggest import suggest
from toy_models import modeling_layouts as L

LAYOUTS = "toy_models.modeling_layouts"


@pytest.mark.parametrize("layout, hazard", [("pre", False), ("post", True), ("sandwich", True)])
def test_detector_flags_post_norm_and_sandwich_and_passes_pre_norm(layout, hazard):
    result = in_place_hazard(L.LayoutRMSNorm, L, L.LayoutConfig(layout=layout))
    assert result.checked, result.reason
    assert result.hazard is hazard, result.reason
    if hazard:
        assert any(name.endswith("weight") for name in result.affected)


@pytest.mark.parametrize("reuse_q, hazard", [(False, False), (True, True)])
def test_detector_flags_a_rotary_whose_input_is_read_again(reuse_q, hazard):
    result = in_place_hazard(L.apply_rotary_pos_emb, L, L.LayoutConfig(reuse_q=reuse_q), FORWARD_AND_BACKWARD)
    assert result.checked and result.hazard is hazard, result.reason


@pytest.mark.parametrize("family, norm, hazard", [
    ("olmo2", "Olmo2RMSNorm", True), ("olmo3", "Olmo3RMSNorm", True), ("gemma2", "Gemma2RMSNorm", True),
    ("gemma3", "Gemma3RMSNorm", True), ("glm4", "Glm4RMSNorm", True), ("exaone4", "Exaone4RMSNorm", True),
    ("llama", "LlamaRMSNorm", False), ("qwen3", "Qwen3RMSNorm", False), ("mistral", "MistralRMSNorm", False),
])
def test_detector_on_transformers_families(family, norm, hazard):
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    result = in_place_hazard(getattr(module, norm), module)
    assert result.checked and result.hazard is hazard, result.reason


# Families whose Liger helper picks an out-of-place norm although nothing shares its gradient:
# Liger's Qwen3-Next / Qwen3.5 / Muse Glimmer norm classes are out of place for every use.
# Liger's out-of-place choices where the whole model shares nothing. GLM-4V-MoE's norms (its text decoder
# is plain pre-norm, without GLM-4V's sandwich norms; its vision blocks are pre-norm too) were checked once
# its whole model could be built shrunk (rope sections fitted to the shrunk head dims)
LIGER_CONSERVATIVE = {"Qwen3NextRMSNorm", "Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm", "MuseGlimmerRMSNorm",
                      "Glm4vMoeTextRMSNorm", "Glm4vMoeRMSNorm"}


def _liger_norm_choices():
    """(family, original norm class, Liger writes in place?) for every registry helper with rms_norm (but those
    known to fail on the installed stack: :func:`helpers.helper_failure`)."""
    seen, rows = set(), []
    for name, family in sorted(all_families().items()):
        if "rms_norm" not in family.defaults or family.helper in seen or helper_failure(name):
            continue
        seen.add(family.helper)
        snap = Snapshot(owners_of(import_all(family.modeling_modules)))
        try:
            family.helper(**{**dict.fromkeys(family.defaults, False), "rms_norm": True})
            changes = snap.changes()
        finally:
            snap.undo()
        rows += [(name, c.before, bool(writes_in_place(c.after))) for c in changes
                 if c.before is not MISSING and inspect.isclass(c.before)]
    return rows


def test_detector_agrees_with_liger_per_family_in_place_choices():
    rows = _liger_norm_choices()
    checked = 0
    for family, original, liger_in_place in rows:
        result = in_place_hazard(original, sys.modules[original.__module__])
        if not result.checked:
            continue
        checked += 1
        # Liger's in-place choices are never where the detector finds a shared gradient ...
        assert not (liger_in_place and result.hazard), (family, result.reason)
        # ... and every out-of-place choice is explained by one, but for Liger's always-out-of-place classes
        if not liger_in_place and original.__name__ not in LIGER_CONSERVATIVE:
            assert result.hazard, (family, original.__name__, result.reason)
    assert checked >= 30, checked


def test_catalog_names_an_out_of_place_twin_for_every_in_place_norm():
    for entry in CATALOG:
        if entry.in_place == "backward":
            twin = by_name(entry.out_of_place)
            assert twin.reference is entry.reference and not twin.primary
            assert writes_in_place(twin.obj) == ""
    assert writes_in_place(LigerRMSNorm) == "backward"
    assert writes_in_place(liger_rotary_pos_emb) == FORWARD_AND_BACKWARD


@pytest.mark.parametrize("layout, expected", [("pre", "LigerRMSNorm"), ("post", "LigerRMSNormForOlmo2"),
                                               ("sandwich", "LigerRMSNormForOlmo2")])
def test_suggest_prints_no_in_place_norm_where_the_gradient_is_shared(layout, expected):
    result = suggest(LAYOUTS, f"{LAYOUTS}:LayoutConfig", {"layout": layout})
    norm = next(c for c in result.candidates if c.symbol == "LayoutRMSNorm")
    assert norm.replacement == expected, norm.reason
    if layout != "pre":
        assert "out of place" in norm.reason
        assert f'"LayoutRMSNorm", {expected})' in result.patches_code()


def test_suggest_leaves_a_rotary_off_when_its_input_is_read_again():
    result = suggest(LAYOUTS, f"{LAYOUTS}:LayoutConfig", {"reuse_q": True})
    rope = next(c for c in result.candidates if c.symbol == "apply_rotary_pos_emb")
    assert rope.verdict == "leave_off" and "in place" in rope.reason


@pytest.mark.parametrize("family", ["olmo2", "gemma2", "glm4", "exaone4"])
def test_suggest_on_flagged_families_prints_no_in_place_replacement(family):
    result = suggest(f"transformers.models.{family}.modeling_{family}")
    for candidate in result.matched:
        entry = by_name(candidate.replacement)
        if entry.kind == "norm":
            assert entry.in_place == "", (candidate.symbol, candidate.replacement, candidate.reason)


def test_custom_route_refuses_an_in_place_norm_naming_the_out_of_place_one(kit):
    config = L.LayoutConfig(layout="post")
    with pytest.raises(InPlaceBackwardError, match="Use LigerRMSNormForOlmo2 instead"):
        kit.apply(custom_patches={"rms_norm": LigerPatch(LAYOUTS, "LayoutRMSNorm", LigerRMSNorm)}, config=config)
    assert L.LayoutRMSNorm is not LigerRMSNorm and not kit.active
    report = kit.apply(custom_patches={"rms_norm": LigerPatch(LAYOUTS, "LayoutRMSNorm", LigerRMSNormForOlmo2)},
                       config=config)
    assert [s.replacement for s in report.patched] == ["liger_kernel.transformers.rms_norm.LigerRMSNormForOlmo2"]


def test_custom_route_accepts_the_in_place_norm_in_a_pre_norm_layout(kit):
    report = kit.apply(custom_patches={"rms_norm": LigerPatch(LAYOUTS, "LayoutRMSNorm", LigerRMSNorm)},
                       config=L.LayoutConfig(layout="pre"))
    assert report.patched and report.unprobed == ()


def test_custom_route_refuses_an_in_place_rotary_whose_input_is_read_again(kit):
    with pytest.raises(InPlaceBackwardError, match="no out-of-place variant"):
        kit.apply(custom_patches={"rope": LigerPatch(LAYOUTS, "apply_rotary_pos_emb", liger_rotary_pos_emb)},
                  config=L.LayoutConfig(reuse_q=True))


def test_official_route_never_keeps_an_in_place_swap_the_detector_flags(kit):
    for name, family in sorted(all_families().items()):
        if helper_failure(name):  # known to fail on this stack: a clear error, nothing swapped
            with pytest.raises(HelperFailedError, match=family.helper.__name__):
                kit.apply(model_family=name)
            assert not kit.active
            continue
        report = kit.apply(model_family=name)
        for entry in kit._ledger.entries:
            if inspect.isclass(entry.source) and writes_in_place(entry.replacement):
                result = in_place_hazard(entry.source, sys.modules[entry.source.__module__])
                assert not result.hazard, (name, entry.swap, result.reason)
        assert all(why for why in report.left_off.values())
        kit.revert()
