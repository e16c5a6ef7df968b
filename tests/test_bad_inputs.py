"""Nothing lost, nothing leaked, nothing executed unasked: bad names, paths, sizes and data are refused
with a named ligerkit error that says what to change, quickly, before anything touches the disk or
allocates; a second Ctrl-C still exits 130; ``suggest FILE`` loads that file and says it runs it."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.cli.common import run
from ligerkit.train import load_engine, set_up_model
from ligerkit.train.config import ConfigError, load_recipe_config, validate_config
from ligerkit.train.data.files import DataError, read_documents, tokenized
from ligerkit.train.recipe.footprint import estimate
from ligerkit.train.stopping import graceful_signals

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
LONG = "a/" * 2500
SHIPPED = sorted((ROOT / "recipes").glob("*/configs/*.yaml"))


def _config(**sections) -> dict:
    data = {"name": "ok", "model": {"family": "qwen3"}}
    for key, value in sections.items():
        data[key] = value
    return data


@pytest.mark.parametrize("name, message", [
    ("..", "outside train.run.runs_dir"), (".", "outside train.run.runs_dir"), ("a/b", "holds '/'"), ("a\\b", "holds '\\\\'"),
    ("a" * 300, "300 bytes long"), ("a\x00b", "control character"), ("", "is empty"), ("   ", "is empty"),
])
def test_a_run_name_that_is_not_one_folder_name_is_refused(name, message):
    with pytest.raises(ConfigError) as caught:
        validate_config(_config(name=name))
    assert message in str(caught.value) and "name" in str(caught.value)


@pytest.mark.parametrize("key, value, message", [
    ("output_dir", "", "train.run.output_dir is empty"),
    ("output_dir", "  ", "train.run.output_dir is empty"),
    ("runs_dir", "", "train.run.runs_dir is empty"),
    ("output_dir", LONG, "choose a shorter one"),
    ("runs_dir", LONG, "choose a shorter one"),
    ("output_dir", "x" * 300, "each part of a path may have at most 255"),
    ("output_dir", "runs/a\x00b", "NUL"),
])
def test_an_empty_or_impossible_run_folder_is_refused(key, value, message):
    with pytest.raises(ConfigError, match="train.") as caught:
        validate_config(_config(train={"run": {key: value}}))
    assert message in str(caught.value)


def test_a_long_name_under_a_long_runs_dir_is_refused_together():
    with pytest.raises(ConfigError, match="runs_dir with the run's name"):
        validate_config(_config(name="n" * 250, train={"run": {"runs_dir": "r/" * 1900}}))


@pytest.mark.parametrize("sets", [
    [f"data.corpus_path={LONG}"], [f"model.pretrained_path={LONG}", "model.source=pretrained"],
    ["data.kind=jsonl", f"data.path={LONG}"], [f"recipe={LONG}"],
])
def test_a_5000_character_path_in_a_config_is_a_config_error(sets):
    with pytest.raises(ConfigError, match="5000 bytes long"):
        load_recipe_config(QWEN3_CPU, sets)


@pytest.mark.parametrize("args", [[LONG], ["--resume", LONG], [str(QWEN3_CPU), "--set", f"train.run.output_dir={LONG}"],
                                  [str(QWEN3_CPU), "--set", "name=.."], [str(QWEN3_CPU), "--set", "train.run.output_dir="]])
def test_train_refuses_bad_paths_with_exit_1_and_no_traceback(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 1, result.output
    assert "Error: " in result.output and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # nothing written into the current folder


BOMB = "".join(f"    {b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def test_a_yaml_alias_bomb_is_refused_within_a_second(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text("name: bomb\nmodel:\n  family: qwen3\n  config:\n    a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB)
    began = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases"):
        load_recipe_config(config)
    assert time.perf_counter() - began < 1.0


@pytest.mark.parametrize("value, message", [("&a [*a]", "refers to a value that contains it"),
                                            ("[" * 5000 + "]" * 5000, "nested too deep")])
def test_a_self_referring_or_too_deep_set_value_is_refused(value, message):
    with pytest.raises(ConfigError, match=message) as caught:
        load_recipe_config(QWEN3_CPU, [f"model.config={value}"])
    assert len(str(caught.value)) < 600  # the huge value is not echoed whole


def test_a_few_aliases_are_still_fine(tmp_path):
    config = tmp_path / "anchors.yaml"
    config.write_text("name: anchors\nmodel: {family: qwen3}\ndata: {seq_len: &n 32}\n"
                      "train: {steps: *n, global_batch_size: 8, micro_batch_size: 4}\n")
    assert load_recipe_config(config).train.steps == 32


@pytest.mark.parametrize("sets, message", [
    (["model.config.hidden_size=100000000"], "of host memory"),
    (["model.config.num_hidden_layers=5000", "model.config.hidden_size=4096"], "of host memory"),
    (["train.global_batch_size=1000000000"], "samples per rank"),
])
def test_huge_sizes_are_refused_within_a_second_before_anything_is_allocated(sets, message):
    load_engine(QWEN3_CPU)  # imports warm
    began = time.perf_counter()
    engine = load_engine(QWEN3_CPU, sets)
    with pytest.raises(ConfigError, match=message) as caught:
        set_up_model(engine, torch.device("cpu"))  # the trainer's path: the check runs before the build
    assert time.perf_counter() - began < 1.0
    assert "GiB" in str(caught.value) and ("Lower" in str(caught.value))
    assert engine.model is None


def test_a_layer_count_no_model_has_is_refused_within_a_second():
    load_engine(QWEN3_CPU)
    began = time.perf_counter()
    with pytest.raises(ConfigError, match="num_hidden_layers: 100,000,000 is more than 10,000"):
        load_engine(QWEN3_CPU, ["model.config.num_hidden_layers=100000000"])
    assert time.perf_counter() - began < 1.0


def test_a_float_written_the_yaml_way_gets_a_hint():
    with pytest.raises(ConfigError, match="write a plain number"):
        load_recipe_config(QWEN3_CPU, ["train.global_batch_size=1e9"])


def test_a_switch_that_is_not_true_or_false_says_what_it_got_and_what_to_write():
    with pytest.raises(ConfigError, match=r"train.activation_checkpointing: .*write true, false or offload "
                                          r"\(got 'full'\)$"):
        load_recipe_config(QWEN3_CPU, ["train.activation_checkpointing=full"])
    with pytest.raises(ConfigError, match=r"train.deterministic: .*\(got 'full'\); write true or false"):
        load_recipe_config(QWEN3_CPU, ["train.deterministic=full"])


@pytest.mark.parametrize("config", SHIPPED, ids=[f"{p.parts[-3]}-{p.stem}" for p in SHIPPED])
def test_shipped_configs_fit_and_the_estimate_is_a_lower_bound(config):
    engine = load_engine(config)
    gpu = config.stem.startswith("gpu")
    found = estimate(engine.config, engine.model_config(), torch.device("cuda" if gpu else "cpu"))
    # gpu.yaml: an 80 GB GPU; the shapes users train (gpu_4b, gpu_8b_lora): one H200; cpu.yaml: any CPU machine
    limit = 40 if config.stem == "gpu" else 130 if gpu else 1
    assert found.device_bytes < limit * 2**30
    if not gpu:
        engine.check_footprint(torch.device("cpu"))
        built = engine.build_model(torch.device("meta"))
        assert 0 < found.parameters <= sum(p.numel() for p in built.parameters())


def test_key_value_heads_that_do_not_divide_the_heads_are_refused():
    with pytest.raises(ConfigError, match="3 does not divide num_attention_heads=4.*use one of 1, 2, 4"):
        load_engine(QWEN3_CPU, ["model.config.num_key_value_heads=3"])


def test_a_deeply_nested_json_line_is_a_data_error(tmp_path):
    data = tmp_path / "deep.jsonl"
    data.write_text(json.dumps({"text": "fine"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep.jsonl:2 nests its JSON too deeply.*fix or remove that line"):
        read_documents(str(data), "jsonl", "text")


def test_texts_that_are_all_empty_are_a_data_error(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from run_fixtures import tokenizer_folder

    tokenizer_folder(tmp_path / "tok")
    data = tmp_path / "empty.jsonl"
    data.write_text("".join(json.dumps({"text": ""}) + "\n" for _ in range(5)))
    for packing in (True, False):
        with pytest.raises(DataError, match="empty once tokenized.*data.text_field"):
            tokenized(str(data), "jsonl", "text", str(tmp_path / "tok"), 8, packing)


def test_a_second_signal_during_the_stop_exits_130_even_when_a_library_wraps_it():
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN in a background job

    def body() -> None:
        with graceful_signals() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            while not stop:
                time.sleep(0.001)
            try:  # the stop's checkpoint is being written when the second signal lands
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except BaseException:
                raise RuntimeError("CheckpointException ranks:dict_keys([0])") from None  # as torch's dcp does

    with pytest.raises(typer.Exit) as caught:
        run(body)
    assert caught.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # nothing left installed


def test_an_unrelated_error_still_propagates_from_run():
    def body() -> None:
        with graceful_signals():
            raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run(body)


def test_suggest_on_a_file_named_like_a_standard_module_loads_that_file(tmp_path):
    from ligerkit.suggest import load_module

    folder = tmp_path / "some" / "dir"
    folder.mkdir(parents=True)
    (folder / "json.py").write_text("from torch import nn\nMARKER = 'the vendored file'\n\n\n"
                                    "class TinyRMSNorm(nn.Module):\n    pass\n")
    module = load_module(str(folder / "json.py"))
    assert module.MARKER == "the vendored file" and module is not json
    assert Path(module.__file__).resolve() == (folder / "json.py").resolve()
    assert sys.modules["json"] is json and str(folder) not in sys.path[:1]


def test_suggest_help_and_guide_say_that_it_executes_the_file():
    result = CliRunner().invoke(app, ["suggest", "--help"])
    assert "python FILE" in " ".join(result.output.split())
    assert "python FILE" in " ".join((ROOT / "docs" / "guide.md").read_text().split())


@pytest.mark.parametrize("code, said", [(28, "the disk is full"), (30, "read-only")])
def test_a_full_or_read_only_disk_ends_in_advice_not_a_traceback(code, said, capsys):
    import typer

    from ligerkit.cli.common import run

    def body():
        try:
            raise OSError(code, "no room", "/runs/x/metrics.jsonl")
        except OSError as exc:
            raise RuntimeError("the trainer's own wrapper") from exc

    with pytest.raises(typer.Exit) as exited:
        run(body)
    assert exited.value.exit_code == 1
    message = capsys.readouterr().err
    assert said in message and "/runs/x/metrics.jsonl" in message and "--resume" in message
