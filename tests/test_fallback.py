"""A family whose Liger helper fails: a clear error by default, ligerkit's proven map with the fallback.

Liger's helpers import model classes by name, so a transformers release that renames one breaks them
(transformers 5.23 and Liger 0.8.5's VL helpers). The failure is emulated here by a helper that raises
the ImportError such a rename gives.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

import ligerkit.kit.core as core
from ligerkit import LigerKernelKit, LigerPatch
from ligerkit.cli import app
from ligerkit.errors import HelperFailedError, InvalidOptionError
from ligerkit.kit.fallback import FallbackMap
from ligerkit.kit.families import get_family
from ligerkit.suggest import proven_map
from ligerkit.train.config import ConfigError, load_recipe_config

Q3 = "transformers.models.qwen3.modeling_qwen3"


def _broken_helper(**flags):
    raise ImportError("cannot import name 'LigerQwen3CausalLMOutputWithPast' from 'liger_kernel' (emulated)")


@pytest.fixture
def broken(monkeypatch):
    """The qwen3 helper as a transformers release Liger does not know yet breaks it."""
    real = get_family
    monkeypatch.setattr(core, "get_family", lambda name: dataclasses.replace(real(name), helper=_broken_helper))


def _bindings():
    import transformers.models.qwen3.modeling_qwen3 as m

    return {n: getattr(m, n) for n in ("Qwen3RMSNorm", "Qwen3MLP", "apply_rotary_pos_emb")}


def _norm_only(family, error):
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    return FallbackMap({"rms_norm": LigerPatch(Q3, "Qwen3RMSNorm", LigerRMSNorm)}, None, "a hand-written map")


def test_by_default_the_helper_s_error_is_raised_offering_the_fallback_and_nothing_stays_bound(broken):
    before = _bindings()
    kit = LigerKernelKit()
    with pytest.raises(HelperFailedError, match=r"(?s)ImportError: cannot import name .*fallback=ligerkit\.suggest"
                                                r"\.proven_map.*model\.liger_kernel\.fallback: custom"):
        kit.apply(model_family="qwen3")
    assert _bindings() == before and kit.report.applications == ()


def test_the_fallback_applies_the_proven_map_reports_it_and_reverts_exactly(broken):
    before = _bindings()
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3", fallback=proven_map)
    assert report.route == "custom" and set(report.fallbacks) == {"qwen3"}
    assert "_broken_helper failed: ImportError: cannot import name" in report.fallbacks["qwen3"]
    assert json.loads(json.dumps(report.to_dict()))["applications"][0]["fallback_from"] == report.fallbacks["qwen3"]
    applied = {s.name for s in report.patched}
    assert {"rms_norm", "rope"} <= applied  # Liger's qwen3 defaults, each proven on the model's calls
    assert all(any(p.startswith(f"{name}:") and "match on every call the whole model makes" in p
                   for p in report.applications[0].probed) for name in applied)
    assert "FALLBACK: Liger's official helper failed" in str(report)
    assert _bindings() != before
    kit.revert()
    assert _bindings() == before


def test_the_fallback_keeps_the_apply_s_selection(broken):
    kit = LigerKernelKit()
    report = kit.apply(model_family="qwen3", modules={"rms_norm": False, "rope": True}, fallback=proven_map)
    assert {s.name for s in report.patched} == {"rope"}
    kit.revert()
    with pytest.raises(HelperFailedError, match="has no proven replacement for swiglu"):
        kit.apply(model_family="qwen3", modules={"swiglu": True}, fallback=_norm_only)
    assert kit.report.applications == ()
    with pytest.raises(HelperFailedError, match="proved no replacement to apply"):
        kit.apply(model_family="qwen3", excluded_modules=["rms_norm"], fallback=_norm_only)


def test_the_fallback_is_for_the_official_route_and_takes_a_builder():
    kit = LigerKernelKit()
    with pytest.raises(InvalidOptionError, match="fallback= takes a map builder"):
        kit.apply(model_family="x", custom_patches={"n": LigerPatch(Q3, "Qwen3RMSNorm", object)}, fallback=proven_map)
    with pytest.raises(InvalidOptionError, match="fallback= takes a map builder"):
        kit.apply(model_family="qwen3", fallback="custom")


def test_plan_with_the_fallback_says_what_was_applied_instead(broken):
    runner = CliRunner()
    failed = runner.invoke(app, ["plan", "--family", "qwen3"])
    assert failed.exit_code != 0 and "--fallback custom" in failed.output
    done = runner.invoke(app, ["plan", "--family", "qwen3", "--fallback", "custom", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)["report"]  # stdout alone: a log line may go to stderr
    assert list(report["fallbacks"]) == ["qwen3"] and report["route"] == "custom"
    bad = runner.invoke(app, ["plan", "--fallback", "yes"])
    assert bad.exit_code != 0 and "use one of error, custom" in bad.output


def test_a_recipe_config_asks_for_the_fallback_by_name():
    from ligerkit.train import load_engine

    gpu = "recipes/qwen3/configs/gpu.yaml"
    assert load_recipe_config(gpu).model.liger_kernel.fallback == "error"
    engine = load_engine(gpu, ["model.liger_kernel.fallback=custom"])
    assert engine.official_liger()["fallback"] is proven_map
    assert "fallback" not in load_engine(gpu).official_liger()
    with pytest.raises(ConfigError, match="model.liger_kernel.fallback: Input should be 'error' or 'custom'"):
        load_recipe_config(gpu, ["model.liger_kernel.fallback=yes please"])
