"""Compile mode is one key with named values (train.compile: off | ops | trace); the earlier booleans still read.

Earlier configs said it with three booleans (train.compile, train.liger_compile_ops,
train.compile_over_liger_kernels); they load as the named value, and a run folder that recorded them
resumes with the current config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ligerkit.errors import ResumeConfigError
from ligerkit.train.config import arms as A
from ligerkit.train.run import resume
from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.config.compile_mode import map_old_keys

ROOT = Path(__file__).resolve().parents[1]
GPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"  # Liger on
CPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"


def _compile(*overrides: str) -> str:
    return load_recipe_config(GPU_CONFIG, list(overrides)).train.compile


def test_the_named_values_and_the_default():
    assert _compile() == "off"
    assert [_compile(f"train.compile={v}") for v in ("off", "ops", "trace")] == ["off", "ops", "trace"]
    with pytest.raises(ConfigError, match=r"train\.compile: Input should be 'off', 'ops' or 'trace'"):
        _compile("train.compile=fast")


@pytest.mark.parametrize("old, new", [
    (["train.compile=false"], "off"),
    (["train.compile=true"], "ops"),
    (["train.compile=true", "train.liger_compile_ops=true"], "ops"),
    (["train.compile=true", "train.liger_compile_ops=false", "train.compile_over_liger_kernels=true"], "trace"),
    (["train.compile=true", "train.liger_compile_ops=false", "model.liger_kernel.enabled=false"], "ops"),
    (["train.compile=false", "train.liger_compile_ops=false"], "off"),
    (["train.compile_over_liger_kernels=false"], "off"),
])
def test_the_earlier_booleans_are_read_into_the_named_value(old, new):
    assert _compile(*old) == new


def test_compiling_over_ligers_own_functions_still_needs_its_opt_in():
    with pytest.raises(ConfigError, match="(?s)train.liger_compile_ops=false.*train.compile: trace"):
        _compile("train.compile=true", "train.liger_compile_ops=false")
    with pytest.raises(ConfigError, match="trace and train.liger_compile_ops=true disagree"):
        _compile("train.compile=trace", "train.liger_compile_ops=true")
    with pytest.raises(ConfigError, match=r"train\.liger_compile_ops .* must be true or false"):
        _compile("train.liger_compile_ops=yes please")


def test_trace_with_liger_off_is_refused_as_the_same_as_ops():
    """A named option that would change nothing is not accepted silently."""
    with pytest.raises(ConfigError, match=r"train.compile: trace .* Liger is off .* set train.compile: ops"):
        load_recipe_config(CPU_CONFIG, ["train.compile=trace"])
    assert load_recipe_config(CPU_CONFIG, ["train.compile=ops"]).train.compile == "ops"
    assert _compile("train.compile=trace") == "trace"  # Liger on: the opt-in stands


def test_a_run_folder_that_recorded_trace_with_liger_off_still_resumes(tmp_path):
    """Such folders were written before that pair was refused; they ran exactly as ops and resume as ops."""
    now = load_recipe_config(CPU_CONFIG, ["train.compile=ops"]).model_dump(mode="json")
    before = json.loads(json.dumps(now))
    before["train"]["compile"] = "trace"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(before, sort_keys=False))
    resume.record(tmp_path, before)
    resume.check_config(tmp_path, now)  # the same run: no refusal
    assert load_recipe_config(tmp_path / "config.yaml").train.compile == "ops"  # `train --resume RUN` reads it so
    with pytest.raises(ConfigError, match="Liger is off"):  # naming trace again on the command line is judged
        load_recipe_config(tmp_path / "config.yaml", ["train.compile=trace"])
    elsewhere = tmp_path / "copy.yaml"  # the same text outside a run folder is a config the user writes: refused
    elsewhere.write_text(yaml.safe_dump(before, sort_keys=False))
    with pytest.raises(ConfigError, match="Liger is off"):
        load_recipe_config(elsewhere)


def test_mapping_leaves_its_input_alone_and_a_new_config_untouched():
    old = {"model": {"liger_kernel": {"enabled": True}}, "train": {"compile": True, "liger_compile_ops": True}}
    assert map_old_keys(old)["train"] == {"compile": "ops"}
    assert old["train"] == {"compile": True, "liger_compile_ops": True}
    new = {"train": {"compile": "trace"}}
    assert map_old_keys(new) is new


def test_the_arms_use_the_named_values_and_accept_a_config_giving_the_earlier_boolean():
    assert all(line in ("train.compile=off", "train.compile=ops") for lines in A.ARMS.values()
               for line in lines if line.startswith("train.compile"))
    assert [a for a in A.ARMS if A.is_compiled(a)] == ["compile", "liger_compile", "compile_fused",
                                                         "liger_compile_fused"]
    assert load_recipe_config(GPU_CONFIG, ["train.compile=true", "train.arm=liger_compile"]).train.compile == "ops"
    with pytest.raises(ConfigError, match=r"sets train\.compile=off; --set train\.compile=true sets it to true"):
        load_recipe_config(GPU_CONFIG, ["train.compile=true", "train.arm=liger"])


@pytest.mark.parametrize("record", ["config.yaml", "run.json"])
def test_an_earlier_run_folder_with_the_booleans_resumes_with_the_current_config(tmp_path, record):
    now = load_recipe_config(CPU_CONFIG, ["train.compile=ops"]).model_dump(mode="json")
    before = json.loads(json.dumps(now))
    before["train"].update(compile=True, liger_compile_ops=True, compile_over_liger_kernels=False)
    if record == "config.yaml":
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(before, sort_keys=False))
    else:
        resume.record(tmp_path, before)
    resume.check_config(tmp_path, now)  # the same run: no refusal
    with pytest.raises(ResumeConfigError, match='train.compile: "ops" in the run, "off" now'):
        resume.check_config(tmp_path, {**now, "train": {**now["train"], "compile": "off"}})
