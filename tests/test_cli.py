"""The command line: families, plan, --json, exit codes (more in test_cli_*.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from helpers import helper_failure
from ligerkit.cli import app, parse_exclude, parse_modules
from ligerkit.errors import InvalidOptionError

runner = CliRunner()


def test_families_json_lists_every_registry_entry_with_defaults(tmp_path, monkeypatch):
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    monkeypatch.setenv("LIGERKIT_CACHE_DIR", str(tmp_path))
    result = runner.invoke(app, ["families", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert {r["family"] for r in rows} == set(MODEL_TYPE_TO_APPLY_LIGER_FN)
    qwen3_vl = next(r for r in rows if r["family"] == "qwen3_vl")
    assert qwen3_vl["helper"] == "apply_liger_kernel_to_qwen3_vl"
    assert qwen3_vl["modules"]["swiglu"] is False and qwen3_vl["modules"]["rope"] is True


def test_plan_without_arguments_plans_a_small_qwen3():
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 0, result.output
    assert "Route: official" in result.stdout
    assert "[swap] rms_norm: transformers.models.qwen3.modeling_qwen3.Qwen3RMSNorm" in result.stdout
    assert "x liger_kernel.transformers.rms_norm.LigerRMSNorm" in result.stdout


def test_plan_json_has_report_and_scan():
    result = runner.invoke(app, ["plan", "--family", "llama", "--modules", "rms_norm=on,rope=off,swiglu=on",
                                 "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["report"]["modules"]["rope"] is False
    assert {p["name"] for p in data["report"]["patched"]} == {"rms_norm", "swiglu"}
    assert data["scan"]["counts"]["liger_kernel.transformers.swiglu.LigerSwiGLUMLP"] == 2
    assert data["model_class"].endswith("LlamaForCausalLM")


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan", "--family", "qwen4"], "UnknownFamilyError"),
        (["plan", "--family", "gpt_oss", "--modules", "swiglu=on"], "NoEffectError"),
        (["plan", "--modules", "rope"], "InvalidOptionError"),
        (["plan", "--family", "qwen3", "--model", "x"], "InvalidOptionError"),
        (["plan", "--family", "internvl", "--modules", "layer_norm=on"], "UnreachableSwapError"),
    ],
)
def test_plan_failures_exit_1_with_the_message(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in result.stderr


def test_plan_exclude_none_lets_liger_defaults_through():
    result = runner.invoke(app, ["plan", "--family", "qwen3", "--exclude", "none", "--json"])
    data = json.loads(result.stdout)
    assert data["report"]["modules"]["fused_linear_cross_entropy"] is True
    assert "Qwen3ForCausalLM.forward" in {p["attr"] for p in data["report"]["patched"]}


def test_plan_from_a_local_config_dir(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=128).save_pretrained(tmp_path)
    result = runner.invoke(app, ["plan", "--model", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["report"]["families"] == ["qwen3"]
    assert data["scan"]["counts"]["liger_kernel.transformers.rms_norm.LigerRMSNorm"] == 9  # 2 layers x 4 + final


def test_explicit_modules_never_pull_in_liger_defaults():
    result = runner.invoke(app, ["plan", "--family", "llama", "--modules", "rope=off,swiglu=on", "--json"])
    assert result.exit_code == 0, result.output
    modules = json.loads(result.stdout)["report"]["modules"]
    assert modules == {"rope": False, "cross_entropy": False, "fused_linear_cross_entropy": False,
                       "rms_norm": False, "swiglu": True}


def test_module_and_exclude_parsing():
    assert parse_modules("auto") == "auto"
    assert parse_modules("rope=on, swiglu=off") == {"rope": True, "swiglu": False}
    with pytest.raises(InvalidOptionError):
        parse_modules("rope=maybe")
    assert parse_exclude(None) == ("cross_entropy", "fused_linear_cross_entropy")
    assert parse_exclude("none") == ()
    assert parse_exclude("rope,swiglu") == ("rope", "swiglu")


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "ligerkit", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "families" in proc.stdout and "plan" in proc.stdout


def test_check_a_recipe_shows_route_swaps_and_scan():
    result = runner.invoke(app, ["check", "recipes/composite_vlm"])
    assert result.exit_code == 0, result.output
    assert "Route: composite" in result.stdout
    assert "[swap] rms_norm: recipes.composite_vlm.model.modeling_vision.VisionRMSNorm" in result.stdout
    assert "x liger_kernel.transformers.swiglu.LigerSwiGLUMLP" in result.stdout
    assert "check: OK" in result.stdout
    assert "loss path: standard: full logits" in result.stdout


def test_check_json_for_every_recipe():
    for name in ("qwen3", "qwen3_vl", "custom_lm", "vendored_llm", "diffllama"):
        result = runner.invoke(app, ["check", f"recipes/{name}", "--json"])
        data = json.loads(result.stdout)
        if name == "qwen3_vl" and helper_failure("qwen3_vl"):  # Liger's helper fails on this stack: said clearly
            assert result.exit_code == 1 and data["problems"], result.output
            assert all("HelperFailedError" in p and helper_failure("qwen3_vl") in p for p in data["problems"])
            continue
        assert result.exit_code == 0, result.output
        gpu = next(p for p in data["plans"] if p["config"] == "gpu.yaml")
        assert gpu["liger_enabled"] and gpu["scan"]["counts"] and not gpu["scan"]["unused"]


def test_check_reports_every_problem_and_exits_1(tmp_path):
    recipe = tmp_path / "recipes" / "broken"
    (recipe / "configs").mkdir(parents=True)
    (recipe / "configs" / "cpu.yaml").write_text("name: broken\nmodel: {family: qwen3, colour: red}\n")
    result = runner.invoke(app, ["check", str(recipe)])
    assert result.exit_code == 1
    assert "missing README.md" in result.stderr
    assert "model.colour: unknown key" in result.stderr


def test_train_json_reports_steps():
    result = runner.invoke(app, ["train", "recipes/qwen3/configs/cpu.yaml", "--set", "train.steps=2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["step"] for s in data["steps"]] == [1, 2]
    assert data["report"] is None  # Liger off in the CPU config


def test_train_with_liger_on_a_cpu_exits_1_with_the_way_out():
    result = runner.invoke(app, ["train", "recipes/qwen3/configs/cpu.yaml", "--set", "model.liger_kernel.enabled=true"])
    assert result.exit_code == 1
    assert "model.liger_kernel.enabled=false" in result.stderr
