"""The bench's arm table, ``train.arm`` in a config, and the recommendation rules (CPU, synthetic results)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof import bench as B
from ligerkit.proof.recommend import (
    Recommendation,
    check_gradients,
    gradient_arms,
    recommend,
    reference_of,
)
from ligerkit.train.config import arms as A
from ligerkit.train.config import ConfigError, load_recipe_config

ROOT = Path(__file__).resolve().parents[1]
GPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"


def _config_with(tmp_path: Path, **train: object) -> Path:
    """qwen3's GPU config with extra ``train`` keys, written under ``tmp_path``."""
    data = yaml.safe_load(GPU_CONFIG.read_text())
    data["train"].update(train)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- the table ---------------------------------------------------------------------------------------------

def test_the_arm_table_lives_in_the_training_layer_and_the_bench_reexports_it():
    assert A.ARMS is A.ARMS and A.DEFAULT_ARMS is A.DEFAULT_ARMS
    assert set(A.DEFAULT_ARMS) == set(A.ARMS) == set(A.DESCRIPTIONS)
    assert "liger_compile_fused" in A.DEFAULT_ARMS
    from ligerkit.cli import run_commands

    assert run_commands._ALL_ARMS == ",".join(A.DEFAULT_ARMS)  # the CLI spells the default out (no torch)
    # imports point one way: proof -> train, never train -> proof
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "src" / "ligerkit" / "train").rglob("*.py")
                 if re.search(r"^\s*(from|import) ligerkit\.proof", p.read_text(), re.MULTILINE)]
    assert not offenders


def test_liger_compile_fused_selects_swaps_fused_loss_and_compile():
    assert A.ARMS["liger_compile_fused"] == ("model.liger_kernel.enabled=true", "train.loss.path=fused",
                                             "train.compile=ops")
    config = load_recipe_config(GPU_CONFIG, A.ARMS["liger_compile_fused"])
    assert config.model.liger_kernel.enabled and config.train.loss.path == "fused" and config.train.compile != "off"
    assert config.train.compile == "ops"  # the kernels run as compile operators: no opt-in needed
    assert A.is_compiled("liger_compile_fused") and not A.is_compiled("liger_fused")
    assert A.config_lines("liger_compile_fused") == ("model.liger_kernel.enabled: true", "train.loss.path: fused",
                                                     "train.compile: ops")
    with pytest.raises(KeyError, match="liger_compile_fused"):
        A.arm_lines("turbo")


# --- train.arm ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arm", list(A.ARMS))
def test_train_arm_sets_the_arms_keys(arm):
    # qwen3's gpu.yaml turns Liger on; an arm with Liger off needs that key given its value too
    liger_off = ["model.liger_kernel.enabled=false"] if "model.liger_kernel.enabled=false" in A.ARMS[arm] else []
    via_arm = load_recipe_config(GPU_CONFIG, [*liger_off, f"train.arm={arm}"])
    explicit = load_recipe_config(GPU_CONFIG, list(A.ARMS[arm]))
    assert via_arm.train.arm == arm
    assert via_arm.model_dump() == {**explicit.model_dump(), "train": {**explicit.model_dump()["train"], "arm": arm}}


def test_train_arm_in_the_config_file_and_its_resolved_config_reproduce_the_same_run(tmp_path):
    path = _config_with(tmp_path, arm="liger_fused")
    config = load_recipe_config(path)
    assert (config.model.liger_kernel.enabled, config.train.loss.path, config.train.compile) == (True, "fused", "off")
    # the run folder's config.yaml is the resolved config: loading it again gives the same config
    resolved = tmp_path / "config.yaml"
    resolved.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    assert load_recipe_config(resolved) == config
    # a --set train.arm=null leaves the arm out again
    assert load_recipe_config(path, ["train.arm=null"]).train.loss.path == "standard"


def test_a_key_contradicting_train_arm_is_an_error_naming_both(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_recipe_config(GPU_CONFIG, ["train.arm=liger_fused", "train.loss.path=standard"])
    message = str(info.value)
    assert "train.arm=liger_fused" in message and "train.loss.path=fused" in message
    assert "--set train.loss.path=standard" in message
    # a key from the file is named with the file
    with pytest.raises(ConfigError, match=r"enabled=false; .*gpu\.yaml sets it to true"):
        load_recipe_config(GPU_CONFIG, ["train.arm=eager"])
    with pytest.raises(ConfigError, match=r"train\.compile=off; .*gpu\.yaml sets it to true"):
        load_recipe_config(_config_with(tmp_path, arm="liger", compile=True))
    # a mapping replaced by a scalar is not silently turned into the arm's value
    with pytest.raises(ConfigError, match=r"train\.loss \(not a mapping\)"):
        load_recipe_config(GPU_CONFIG, ["train.loss=fused", "train.arm=liger_fused"])
    # the same values are no conflict
    assert load_recipe_config(GPU_CONFIG, ["train.arm=liger_fused", "train.loss.path=fused"]).train.arm == "liger_fused"


def test_an_unknown_arm_is_an_error_listing_the_arms():
    with pytest.raises(ConfigError) as info:
        load_recipe_config(GPU_CONFIG, ["train.arm=turbo"])
    assert "'turbo' is not an arm" in str(info.value)
    assert all(name in str(info.value) for name in A.ARMS)


def test_the_bench_arms_win_over_the_configs_train_arm(tmp_path):
    path = _config_with(tmp_path, arm="liger_fused")
    B.check_arm_configs(path, A.DEFAULT_ARMS, ["data.seq_len=256"], steps=3)
    for arm in A.DEFAULT_ARMS:
        config = load_recipe_config(path, B.arm_overrides(arm, ["data.seq_len=256"], 3))
        assert config.train.arm == arm and config.train.steps == 3 and config.data.seq_len == 256
        assert config == load_recipe_config(GPU_CONFIG, [*A.ARMS[arm], f"train.arm={arm}", "train.steps=3",
                                                         "data.seq_len=256", "train.run.progress=false"])


def test_an_arm_the_config_cannot_take_is_named_before_any_process_starts(tmp_path):
    with pytest.raises(ConfigError, match="(?s)bench arm liger_compile .*recompute_glu_product .*train.compile is ops"):
        B.check_arm_configs(GPU_CONFIG, ["eager", "liger_compile"], ["train.memory.recompute_glu_product=true"], steps=3)


def test_an_arm_a_set_key_refuses_names_the_arms_that_can_run():
    with pytest.raises(ConfigError) as info:
        B.check_arm_configs(GPU_CONFIG, ["eager", "liger_fused", "liger_compile_fused"],
                            ["train.memory.recompute_glu_product=true"], steps=3)
    assert "bench arm liger_compile_fused" in str(info.value)
    assert str(info.value).endswith("--arms eager,liger_fused")
    with pytest.raises(ConfigError) as info:  # a key no arm can take: no arms to offer
        B.check_arm_configs(GPU_CONFIG, ["eager", "liger_fused"], ["train.optim.lr=-1"], steps=3)
    assert "bench arm eager" in str(info.value) and "--arms" not in str(info.value)


# --- the gradient rule -------------------------------------------------------------------------------------

@dataclass
class Grads:
    """A synthetic ``ArmGrads``: per-parameter relative errors, and what the pass changed."""

    errors: dict[str, float]
    changed: list[str] = field(default_factory=list)


def _grads(**arms: dict[str, float]) -> dict[str, Grads]:
    return {"float32": Grads({"w": 0.0, "v": 0.0}), **{a: Grads(e) for a, e in arms.items()}}


def test_compiled_arms_are_judged_against_compile_and_the_others_against_eager():
    assert reference_of("liger_fused") == "eager" and reference_of("compile") == "eager"
    assert reference_of("liger_compile") == "compile" == reference_of("liger_compile_fused")
    assert gradient_arms(["eager", "liger"]) == ["eager", "liger"]
    assert gradient_arms(["eager", "liger_compile_fused"]) == ["eager", "compile", "liger_compile_fused"]
    grads = _grads(eager={"w": 0.01, "v": 0.02}, compile={"w": 0.03, "v": 0.02},  # within 2 x 0.01 + 0.01
                   liger={"w": 0.05, "v": 0.02},  # 0.05 > 2 x 0.01 + 0.01
                   liger_compile={"w": 0.05, "v": 0.02})  # within 2 x 0.03 + 0.01 of compile
    checks = check_gradients(grads)
    assert list(checks) == ["eager", "compile", "liger", "liger_compile"]  # float32 is the truth, not an arm
    assert checks["eager"].passed and checks["compile"].passed and checks["liger_compile"].passed
    assert not checks["liger"].passed and checks["liger"].failures == ("w",)
    assert "worst w: 0.05 > 0.03" in checks["liger"].reason
    assert checks["liger_compile"].reference == "compile"
    loose = check_gradients(grads, GradTolerance(factor=5.0))
    assert loose["liger"].passed


def test_a_compiled_arm_fails_with_its_reference_and_changed_weights_or_nan_fail():
    grads = _grads(eager={"w": 0.01, "v": 0.01}, compile={"w": 0.5, "v": 0.01},
                   liger_compile={"w": 0.5, "v": 0.01}, liger_fused={"w": math.nan, "v": 0.01})
    grads["liger"] = Grads({"w": 0.01, "v": 0.01}, changed=["model.norm.weight"])
    checks = check_gradients(grads)
    assert not checks["compile"].passed
    assert not checks["liger_compile"].passed and "reference arm compile failed" in checks["liger_compile"].reason
    assert not checks["liger"].passed and "model.norm.weight" in checks["liger"].reason
    assert not checks["liger_fused"].passed and checks["liger_fused"].failures == ("w",)
    with pytest.raises(ValueError, match="reference arm 'compile'"):
        check_gradients(_grads(eager={"w": 0.0}, compile_fused={"w": 0.0}))


# --- the recommendation ------------------------------------------------------------------------------------

SPEED = {"eager": 100.0, "liger": 150.0, "liger_fused": 160.0, "compile_fused": 220.0, "liger_compile_fused": 240.0}
GAPS = {"eager": 0.0, "liger": 2e-3, "liger_fused": 4e-3, "compile_fused": 3e-3, "liger_compile_fused": 0.05}


def _checks(failing: set[str]) -> dict[str, object]:
    errors = {a: {"w": 0.5 if a in failing else 0.01} for a in [*SPEED, "compile"]}
    return check_gradients(_grads(**errors))


def test_the_fastest_arm_within_both_rules_is_recommended():
    # the fastest fails the loss rule, the second fails the gradient rule: the third is the pick
    pick = recommend(SPEED, GAPS, 1e-2, _checks({"compile_fused"}))
    assert pick.arm == "liger_fused" and pick.tokens_per_s_vs_eager == pytest.approx(1.6)
    verdicts = {v.arm: v for v in pick.verdicts}
    assert not verdicts["liger_compile_fused"].loss_ok and "0.05 > 0.01" in verdicts["liger_compile_fused"].reason
    assert verdicts["compile_fused"].loss_ok and verdicts["compile_fused"].grads_ok is False
    assert verdicts["liger"].passed and verdicts["eager"].passed
    assert pick.config_lines == ("train.arm: liger_fused",)
    assert pick.equivalent_lines == ("model.liger_kernel.enabled: true", "train.loss.path: fused",
                                     "train.compile: off")
    text = "\n".join(pick.lines())
    assert text.startswith("Recommendation: liger_fused (1.60x eager tokens/s)")
    assert "train.arm: liger_fused" in text and "--set train.arm=liger_fused" in text and "not checked" not in text
    # a looser loss tolerance lets the fastest in
    assert recommend(SPEED, GAPS, 0.1, _checks(set())).arm == "liger_compile_fused"
    assert Recommendation.from_dict(pick.to_dict()) == pick


def test_without_gradients_only_the_loss_rule_applies_and_it_says_so():
    pick = recommend(SPEED, GAPS, 1e-2, None)
    assert pick.arm == "compile_fused" and not pick.grads_checked
    assert all(v.grads_ok is None for v in pick.verdicts)
    assert "Gradients were not checked (--no-grads): only the loss rule was applied." in "\n".join(pick.lines())
    assert "Gradients were not checked" in pick.markdown()
    assert pick.to_dict()["grads_checked"] is False


def test_when_no_arm_passes_eager_the_reference_is_the_fallback():
    pick = recommend(SPEED, {**GAPS, "liger_compile_fused": 0.0}, 1e-2,
                     _checks({"liger", "liger_fused", "compile_fused", "liger_compile_fused"}))
    assert pick.arm == "eager" and "No arm other than eager" in pick.reason
    assert pick.config_lines == ("train.arm: eager",)
    # an arm whose gradients were not taken does not pass
    only_eager = recommend({"eager": 1.0, "liger": 2.0}, {"eager": 0.0, "liger": 0.0}, 1e-2,
                           {"eager": _checks(set())["eager"]})
    assert only_eager.arm == "eager" and "gradients were not taken" in only_eager.verdicts[1].reason
    with pytest.raises(ValueError, match="eager"):
        recommend({"liger": 1.0}, {"liger": 0.0}, 1e-2, None)
    with pytest.raises(ValueError, match="loss tolerance"):
        recommend(SPEED, GAPS, -1.0, None)


def test_bench_options_are_checked_once_when_made():
    from ligerkit.errors import InvalidOptionError, LigerKitError
    from ligerkit.proof.bench_options import BenchOptions, parse_arms

    options = BenchOptions(parse_arms("liger_fused,liger"), steps=5, warmup=2, grad_overrides=["data.seq_len=8"])
    assert options.arms == ("eager", "liger_fused", "liger") and options.grad_overrides == ("data.seq_len=8",)
    for bad, message in [(dict(arms=("liger",)), "lack eager"), (dict(arms=("eager", "nope")), "unknown arm"),
                         (dict(arms=("eager",), steps=2, warmup=2), "smaller than --steps"),
                         (dict(arms=("eager",), repeats=0), "--repeats"),
                         (dict(arms=("eager",), loss_tolerance=float("nan")), "--loss-tolerance"),
                         (dict(arms=("eager",), loss_reference="fp32"), "--loss-reference")]:
        with pytest.raises((LigerKitError, InvalidOptionError), match=message):
            BenchOptions(**bad)
