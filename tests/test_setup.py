"""One apply-build-scan path (``ligerkit.kit.apply_build_scan``) and the trainer's set-up (``set_up_model``).

The shared path reverts every swap its call applied when the build, a step or the scan raises, and keeps
the swaps applied before it; the set-up runs the recipe's hooks in the trainer's order; ``load_model``,
``plan``, the trainer and the proofs all go through them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config

from ligerkit.errors import LateApplyError, LigerNeedsAcceleratorError
from ligerkit.hf import build_meta_model, default_config
from ligerkit.kit import BuiltModel, apply_build_scan
from ligerkit.train import RecipeEngine, load_engine, set_up_model
from ligerkit.train.recipe import setup as set_up_module

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = ROOT / "recipes" / "qwen3" / "configs"
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, vocab_size=64)


def qwen3_norm():
    from transformers.models.qwen3 import modeling_qwen3

    return modeling_qwen3.Qwen3RMSNorm


# --- the shared path ---

def test_the_path_applies_builds_runs_the_steps_scans_in_order(kit):
    events: list[str] = []

    def apply_and_build():
        kit.apply(model_family="qwen3")
        events.append("apply")
        return build_meta_model(default_config("qwen3"))

    real_scan = kit.scan
    kit.scan = lambda model: events.append("scan") or real_scan(model)
    built = apply_build_scan(kit, apply_and_build, before_scan=[lambda m: events.append("before")],
                             after_scan=[lambda m: events.append("after")])
    assert isinstance(built, BuiltModel) and events == ["apply", "before", "scan", "after"]
    model, scan = built
    assert scan is not None and scan.counts and type(model).__name__ == "Qwen3ForCausalLM" and kit.active


def test_no_scan_when_asked_for_none(kit):
    model, scan = apply_build_scan(kit, lambda: torch.nn.Linear(2, 2), scan=False)
    assert scan is None and isinstance(model, torch.nn.Linear) and not kit.active


@pytest.mark.parametrize("where", ["build", "before_scan", "after_scan"])
def test_the_path_reverts_what_it_applied_when_the_build_or_a_step_raises(kit, where):
    original = qwen3_norm()

    def fail(*_):
        raise RuntimeError(f"failed in {where}")

    def apply_and_build():
        kit.apply(model_family="qwen3")
        assert qwen3_norm() is not original
        if where == "build":
            fail()
        return build_meta_model(default_config("qwen3"))

    with pytest.raises(RuntimeError, match=f"failed in {where}"):
        apply_build_scan(kit, apply_and_build, before_scan=[fail] if where == "before_scan" else (),
                         after_scan=[fail] if where == "after_scan" else ())
    assert qwen3_norm() is original and not kit.active and not kit.report.applications


def test_the_path_reverts_what_it_applied_when_the_scan_raises(kit):
    original = qwen3_norm()

    def apply_and_build():  # built before the apply: the scan finds the original classes
        model = build_meta_model(default_config("qwen3"))
        kit.apply(model_family="qwen3")
        return model

    with pytest.raises(LateApplyError):
        apply_build_scan(kit, apply_and_build)
    assert qwen3_norm() is original and not kit.active


def test_swaps_applied_before_the_call_stay_when_it_fails(kit):
    """A composite model over two calls on one kit: the second call failing undoes only itself."""
    original = qwen3_norm()
    kit.apply(model_family="qwen3")
    swapped, entries = qwen3_norm(), len(kit._ledger.entries)

    def apply_and_build():
        kit.apply(model_family="llama")
        assert len(kit._ledger.entries) > entries
        raise RuntimeError("the second build failed")

    with pytest.raises(RuntimeError, match="second build"):
        apply_build_scan(kit, apply_and_build)
    assert qwen3_norm() is swapped is not original and len(kit._ledger.entries) == entries
    assert [a.family for a in kit.report.applications] == ["qwen3"]


# --- the trainer's set-up ---

def spy_set_up(monkeypatch, engine: RecipeEngine) -> list[str]:
    """Record every step of ``set_up_model`` on ``engine``, each still doing its work; steps the kit's own
    checks run inside ``kit.apply`` (the in-place checks repeat LoRA and checkpointing on their model)
    are not the set-up's and are not recorded."""
    events: list[str] = []
    inside_apply = [False]

    def spy(name, fn):
        def wrapper(*args, **kwargs):
            if inside_apply[0]:
                return fn(*args, **kwargs)
            events.append(name)
            inside_apply[0] = name == "kit.apply"
            try:
                return fn(*args, **kwargs)
            finally:
                inside_apply[0] = False
        return wrapper

    for name in ("check_footprint", "prepare_model", "build_model"):
        monkeypatch.setattr(engine, name, spy(name, getattr(engine, name)))
    monkeypatch.setattr(engine.liger_kit, "apply", spy("kit.apply", engine.liger_kit.apply))
    monkeypatch.setattr(engine.liger_kit, "scan", spy("kit.scan", engine.liger_kit.scan))
    monkeypatch.setattr(torch, "manual_seed", spy("seed", torch.manual_seed))
    for name in ("disable_kv_cache", "add_lora", "recompute_layers"):
        monkeypatch.setattr(set_up_module, name, spy(name, getattr(set_up_module, name)))
    return events


def test_the_set_up_runs_the_recipe_hooks_in_the_trainers_order(monkeypatch):
    engine = load_engine(QWEN3 / "gpu.yaml", ["train.lora={rank: 4}", "train.activation_checkpointing=true"])
    events = spy_set_up(monkeypatch, engine)
    try:
        model = set_up_model(engine, torch.device("meta"))
        assert events == ["check_footprint", "seed", "prepare_model", "kit.apply", "build_model", "disable_kv_cache",
                          "add_lora", "seed", "kit.scan", "recompute_layers"]  # the adapters' own seed (forked)
        assert engine.model is engine.unwrapped_model is model
        assert engine.scan is not None and engine.scan.counts and not engine.scan.unused
    finally:
        engine.liger_kit.revert()


def test_with_liger_off_nothing_is_applied_or_scanned(monkeypatch):
    engine = load_engine(QWEN3 / "cpu.yaml", ["model.liger_kernel.enabled=false"])
    events = spy_set_up(monkeypatch, engine)
    model = set_up_model(engine, torch.device("meta"))
    assert events == ["check_footprint", "seed", "prepare_model", "build_model", "disable_kv_cache"]
    assert engine.model is model and engine.scan is None and not engine.liger_kit.active


def test_liger_on_a_cpu_is_refused_before_the_footprint_and_the_build(monkeypatch):
    engine = load_engine(QWEN3 / "cpu.yaml", ["model.liger_kernel.enabled=true"])
    events = spy_set_up(monkeypatch, engine)
    with pytest.raises(LigerNeedsAcceleratorError, match="model.liger_kernel.enabled=false"):
        set_up_model(engine, torch.device("cpu"))
    assert events == [] and engine.model is None and not engine.liger_kit.active


@pytest.mark.parametrize("broken", ["build_model", "add_lora", "recompute_layers"])
def test_a_set_up_that_fails_after_the_apply_reverts_the_kit_and_keeps_the_engine(monkeypatch, broken):
    original = qwen3_norm()
    engine = load_engine(QWEN3 / "gpu.yaml", ["train.lora={rank: 4}", "train.activation_checkpointing=true"])

    def fail(*_, **__):
        assert qwen3_norm() is not original  # after the apply
        raise RuntimeError(f"{broken} failed")

    monkeypatch.setattr(engine if broken == "build_model" else set_up_module, broken, fail)
    with pytest.raises(RuntimeError, match=f"{broken} failed"):
        set_up_model(engine, torch.device("meta"))
    assert qwen3_norm() is original and not engine.liger_kit.active
    assert engine.model is None and engine.scan is None


# --- every caller goes through them ---

@pytest.fixture
def path_calls(monkeypatch):
    """Every call of the shared path, by the module it was called from."""
    import ligerkit.integrations.model
    import ligerkit.plan
    import ligerkit.proof.recipe_grads
    import ligerkit.train.recipe.setup

    calls: list[str] = []
    for module in (ligerkit.integrations.model, ligerkit.plan, ligerkit.proof.recipe_grads, ligerkit.train.recipe.setup):
        def counted(*args, _name=module.__name__, **kwargs):
            calls.append(_name)
            return apply_build_scan(*args, **kwargs)
        monkeypatch.setattr(module, "apply_build_scan", counted)
    return calls


def test_load_model_and_plan_use_the_shared_path(path_calls):
    from ligerkit.integrations import load_model
    from ligerkit.plan import plan

    original = qwen3_norm()
    model = load_model(config=Qwen3Config(**TINY), device="cpu")
    model.ligerkit.kit.revert()
    assert plan("qwen3").scan.counts
    assert path_calls == ["ligerkit.integrations.model", "ligerkit.plan"] and qwen3_norm() is original


def test_the_trainer_and_the_proofs_set_up_through_set_up_model(path_calls):
    from ligerkit.proof import arm_grads, asserts, recipe_check, recipe_grads
    from ligerkit.train import trainer

    for module in (trainer, asserts, recipe_check, arm_grads, recipe_grads):
        assert module.set_up_model is set_up_model
    engine = load_engine(QWEN3 / "gpu.yaml")
    try:
        asserts.record_prepare(engine)
    finally:
        engine.liger_kit.revert()
    assert path_calls == ["ligerkit.train.recipe.setup"]


def test_a_failed_load_model_build_reverts_through_the_shared_path(path_calls):
    from ligerkit.errors import ModelBuildError
    from ligerkit.integrations import load_model

    class Broken:
        @classmethod
        def _from_config(cls, *args, **kwargs):
            raise RuntimeError("out of memory")

    original = qwen3_norm()
    with pytest.raises(ModelBuildError):
        load_model(config=Qwen3Config(**TINY), model_class=Broken)
    assert path_calls == ["ligerkit.integrations.model"] and qwen3_norm() is original


# --- model.liger_kernel.tiled_mlp ---

def test_the_tiled_mlp_key_builds_the_tiled_mlp_and_is_refused_where_it_would_do_nothing():
    from liger_kernel.transformers.tiled_mlp import LigerTiledSwiGLUMLP

    from ligerkit.train.config import ConfigError, load_recipe_config

    engine = load_engine(QWEN3 / "cpu.yaml", ["model.liger_kernel.enabled=true", "model.liger_kernel.tiled_mlp=true"])
    try:
        model = set_up_model(engine, torch.device("meta"))  # a plan: what `ligerkit check` builds
        mlps = {type(m) for m in model.modules() if type(m).__name__.endswith("MLP")}
        assert mlps == {LigerTiledSwiGLUMLP}
    finally:
        engine.liger_kit.revert()
    with pytest.raises(ConfigError, match="model.liger_kernel.enabled is false"):
        load_recipe_config(QWEN3 / "cpu.yaml", ["model.liger_kernel.tiled_mlp=true"])
    with pytest.raises(ConfigError, match="no compile-mode operator, but train.compile is ops"):
        load_recipe_config(QWEN3 / "cpu.yaml", ["model.liger_kernel.enabled=true", "model.liger_kernel.tiled_mlp=true",
                                                "train.compile=ops"])
    custom = load_engine(ROOT / "recipes" / "custom_lm" / "configs" / "cpu.yaml",
                         ["model.liger_kernel.enabled=true", "model.liger_kernel.tiled_mlp=true"])
    with pytest.raises(ConfigError, match="applied no official route"):
        set_up_model(custom, torch.device("meta"))
    assert not custom.liger_kit.active  # the set-up's swaps reverted
