"""The sectioned config: every shipped config and every recorded run folder reads through it.

``train`` has sections (``optim``, ``run``, ``memory``, ``loss``, ``lora``); run folders written by
earlier releases recorded flat keys and older spellings, and ``ligerkit.train.config.recorded`` reads
them (only there). Anywhere else an old key is an unknown key that names where it lives now.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ligerkit.errors import ResumeConfigError
from ligerkit.train.config import ConfigError, RecipeConfig, TrainConfig, load_recipe_config, recorded_config
from ligerkit.train.config import arms as A
from ligerkit.train.config.recorded import MOVED, RESPELLED, read_recorded
from ligerkit.train.run import resume

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "recipes").glob("*/configs/*.yaml"))
RECORDED = sorted(p for p in (Path(__file__).parent / "recorded_runs").iterdir() if p.is_dir())
GPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"  # Liger on
CPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"


def _sections_only(train: dict) -> None:
    assert set(train) <= set(TrainConfig.model_fields), set(train) - set(TrainConfig.model_fields)


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_every_shipped_config_is_written_in_sections(config):
    raw = yaml.safe_load(config.read_text())
    _sections_only(raw.get("train", {}))
    loaded = load_recipe_config(config)
    assert loaded.train.optim.lr == raw["train"]["optim"]["lr"]


def test_there_are_recorded_runs_of_each_earlier_layout():
    assert {p.name.split("_")[0] for p in RECORDED} == {"v0.1", "v0.2.0"}
    assert any(not (p / "run.json").exists() for p in RECORDED)  # a folder from before run.json


@pytest.mark.parametrize("run", RECORDED, ids=lambda p: p.name)
def test_every_recorded_run_reads_through_the_sections_with_every_value_kept(run):
    old = resume.recorded(run)
    config = load_recipe_config(run / "config.yaml")  # what `ligerkit train --resume RUN` reads
    assert config == RecipeConfig.model_validate(recorded_config(old, str(run)))
    now = config.model_dump(mode="json")
    _sections_only(now["train"])
    for flat, section in MOVED.items():
        key = flat.split(".")[1]
        if key in old["train"]:
            _, part, name = section.split(".")
            given = old["train"][key]
            assert now["train"][part][name] == (list(given) if isinstance(given, tuple) else given), flat
    resume.check_config(run, now)  # the same run: no refusal
    changed = {**now, "train": {**now["train"], "optim": {**now["train"]["optim"], "lr": 0.5}}}
    with pytest.raises(ResumeConfigError, match=r"train\.optim\.lr: .* in the run, 0\.5 now"):
        resume.check_config(run, changed)


def test_the_earliest_spellings_read_as_they_ran():
    config = load_recipe_config(next(p for p in RECORDED if p.name.startswith("v0.1")) / "config.yaml")
    assert config.train.compile == "ops" and config.train.loss.path == "fused" and config.train.loss.chunk_tokens == 1024
    assert config.train.run.checkpoint_every == 4


@pytest.mark.parametrize("flat, section", sorted(MOVED.items()))
def test_a_flat_key_outside_a_run_folder_names_its_section(flat, section, tmp_path):
    value = yaml.safe_dump(TrainConfig().model_dump(mode="json")[section.split(".")[1]][section.split(".")[2]],
                           default_flow_style=True).strip().removesuffix("...").strip()
    with pytest.raises(ConfigError, match=rf"{flat}: unknown key \(an earlier release's key: it is {section} now"):
        load_recipe_config(CPU_CONFIG, [f"{flat}={value}"])
    copy = tmp_path / "config.yaml"  # a file named like a run folder's, in no run folder: the user's own
    copy.write_text(yaml.safe_dump({**yaml.safe_load(CPU_CONFIG.read_text()), "recipe": str(ROOT / "recipes/qwen3")}))
    with pytest.raises(ConfigError, match="an earlier release's key"):
        load_recipe_config(copy, [f"{flat}={value}"])


@pytest.mark.parametrize("old", sorted(RESPELLED))
def test_an_earlier_spelling_outside_a_run_folder_says_what_to_write(old):
    with pytest.raises(ConfigError, match=rf"{old}: unknown key \(an earlier release's key: write {RESPELLED[old][:12]}"):
        load_recipe_config(GPU_CONFIG, [f"{old}=true" if "compile" in old else f"{old}=fused"])


def test_reading_leaves_its_input_alone_and_refuses_a_key_given_twice():
    old = {"model": {"liger_kernel": {"enabled": True, "loss": "off"}},
           "train": {"compile": True, "liger_compile_ops": True, "lr": 0.1, "run": {"log_every": 3}, "log_every": 3}}
    before = json.loads(json.dumps(old))
    new = read_recorded(old)
    assert old == before
    assert new["train"] == {"compile": "ops", "optim": {"lr": 0.1}, "run": {"log_every": 3}, "loss": {"path": "standard"}}
    assert new["model"]["liger_kernel"] == {"enabled": True}
    with pytest.raises(ValueError, match=r"train\.lr=0\.1 and train\.optim\.lr=0\.2; keep only train\.optim\.lr"):
        read_recorded({"train": {"lr": 0.1, "optim": {"lr": 0.2}}})
    today = load_recipe_config(CPU_CONFIG).model_dump(mode="json")
    assert read_recorded(today) == today


def test_the_earlier_model_path_key_reads_as_pretrained_path_only_from_a_recording():
    new = read_recorded({"model": {"family": "qwen3", "pretrained_model_name_or_path": "ckpt"}, "train": {}})
    assert new["model"] == {"family": "qwen3", "pretrained_path": "ckpt"}
    with pytest.raises(ValueError, match="keep only model.pretrained_path"):
        read_recorded({"model": {"pretrained_model_name_or_path": "a", "pretrained_path": "b"}})


@pytest.mark.parametrize("train, liger, compiled", [
    ({"compile": False}, True, "off"),
    ({"compile": True}, True, "ops"),
    ({"compile": True, "liger_compile_ops": True}, True, "ops"),
    ({"compile": True, "liger_compile_ops": False, "compile_over_liger_kernels": True}, True, "trace"),
    ({"compile": True, "liger_compile_ops": False}, False, "ops"),  # nothing to trace into: it ran as ops
    ({"compile": "trace"}, False, "ops"),  # recorded before trace with Liger off was refused
    ({"compile": False, "liger_compile_ops": False}, True, "off"),
])
def test_the_earlier_compile_booleans_read_as_the_named_value_they_ran_as(train, liger, compiled):
    data = {"model": {"liger_kernel": {"enabled": liger}}, "train": dict(train)}
    assert read_recorded(data)["train"]["compile"] == compiled


def test_a_recorded_compile_that_never_trained_is_refused():
    with pytest.raises(ValueError, match="never trained as written"):
        read_recorded({"model": {"liger_kernel": {"enabled": True}},
                       "train": {"compile": True, "liger_compile_ops": False}})
    with pytest.raises(ValueError, match="liger_compile_ops must be true or false"):
        read_recorded({"train": {"liger_compile_ops": "yes please"}})


def test_the_named_compile_values_and_trace_with_liger_off_refused():
    assert [load_recipe_config(GPU_CONFIG, [f"train.compile={v}"]).train.compile for v in ("off", "ops", "trace")] \
        == ["off", "ops", "trace"]
    with pytest.raises(ConfigError, match=r"train\.compile: Input should be 'off', 'ops' or 'trace'"):
        load_recipe_config(GPU_CONFIG, ["train.compile=fast"])
    with pytest.raises(ConfigError, match=r"train.compile: trace .* Liger is off .* set train.compile: ops"):
        load_recipe_config(CPU_CONFIG, ["train.compile=trace"])


def test_a_recorded_trace_with_liger_off_resumes_and_a_new_one_is_judged(tmp_path):
    now = load_recipe_config(CPU_CONFIG, ["train.compile=ops"]).model_dump(mode="json")
    before = json.loads(json.dumps(now))
    before["train"]["compile"] = "trace"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(before, sort_keys=False))
    resume.record(tmp_path, before)
    resume.check_config(tmp_path, now)
    assert load_recipe_config(tmp_path / "config.yaml").train.compile == "ops"
    with pytest.raises(ConfigError, match="Liger is off"):  # naming trace again on the command line is judged
        load_recipe_config(tmp_path / "config.yaml", ["train.compile=trace"])


def test_the_arms_use_the_named_values():
    assert all(line in ("train.compile=off", "train.compile=ops") for lines in A.ARMS.values()
               for line in lines if line.startswith("train.compile"))
    assert [a for a in A.ARMS if A.is_compiled(a)] == ["compile", "liger_compile", "compile_fused",
                                                         "liger_compile_fused"]
