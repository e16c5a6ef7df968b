"""Configs that catch typos and bad paths with a named error, before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.train import load_engine
from ligerkit.train.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
CUSTOM_CPU = ROOT / "recipes" / "custom_lm" / "configs" / "cpu.yaml"
COMPOSITE_CPU = ROOT / "recipes" / "composite_vlm" / "configs" / "cpu.yaml"


@pytest.mark.parametrize("config, sets, message", [
    (QWEN3_CPU, ["model.config.hidden_sizee=32"], "hidden_sizee: Qwen3Config has no such option (did you mean hidden_size"),
    (CUSTOM_CPU, ["model.config.hidden_sizee=32"], "CustomLMConfig has no such option (did you mean hidden_size"),
    (COMPOSITE_CPU, ["model.config.vision.patch_sise=4"], "model.config.vision.patch_sise"),
    (QWEN3_CPU, ["model.liger_kernel.modules.rms_nrom=true"], "rms_nrom: not a Liger module name (did you mean rms_norm?)"),
    (QWEN3_CPU, ["model.family=qwen33"], "Did you mean 'qwen3'"),
    (QWEN3_CPU, ["train.learning_rate=0.1"], "train.learning_rate: unknown key (this config calls it train.optim.lr)"),
    (QWEN3_CPU, ["train.steps=true"], "train.steps: Value error, expected a number, got true/false"),
    (QWEN3_CPU, ["train.optim.lr=.inf"], "train.optim.lr: Input should be a finite number"),
    (QWEN3_CPU, ["train.optim.betas=[2, 3]"], "train.optim.betas.0: Input should be less than 1"),
    (QWEN3_CPU, [f"seed={2 ** 70}"], "seed: Input should be less than or equal to"),
    (QWEN3_CPU, ["model.config.hidden_size=-5"], "hidden_size: -5 is not a size"),
    (QWEN3_CPU, ["data.corpus_path=/nonexistent/corpus.txt"], "data.corpus_path: '/nonexistent/corpus.txt' is missing"),
    (QWEN3_CPU, ["model.source=pretrained", "model.pretrained_path=/nonexistent"], "not a local checkpoint folder"),
])
def test_typos_and_bad_values_are_named_before_anything_is_built(config, sets, message):
    with pytest.raises(ConfigError) as caught:
        load_engine(config, sets)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 1500  # a suggestion, not a dump of every model type


def test_duplicate_yaml_keys_are_errors(tmp_path):
    config = tmp_path / "dup.yaml"
    config.write_text(QWEN3_CPU.read_text() + "seed: 1\nseed: 2\n")
    with pytest.raises(ConfigError, match="'seed' is given twice"):
        load_engine(config, ["recipe=" + str(ROOT / "recipes" / "qwen3")])


def test_a_config_that_is_not_utf8_or_is_a_folder(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_engine(config)
    with pytest.raises(ConfigError, match="is a folder"):
        load_engine(tmp_path)


def test_a_binary_corpus_and_an_unwritable_output_folder(tmp_path):
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(ConfigError, match="not UTF-8 text|binary"):
        load_engine(QWEN3_CPU, [f"data.corpus_path={corpus}"])
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="train.run.output_dir"):
        load_engine(QWEN3_CPU, [f"train.run.output_dir={a_file}/run"])


def test_train_takes_a_recipe_folder_and_a_config_outside_recipes(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["train", str(ROOT / "recipes" / "qwen3"), "--set", "train.steps=1", "--json",
                                 "--set", f"train.run.output_dir={tmp_path / 'a'}"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["name"] == "qwen3-cpu"  # the CPU config on a machine without a GPU
    outside = tmp_path / "mine.yaml"
    outside.write_text(QWEN3_CPU.read_text())
    refused = runner.invoke(app, ["train", str(outside)])
    assert refused.exit_code == 1 and "recipe: recipes/<name>" in refused.output
    named = runner.invoke(app, ["train", str(outside), "--set", "recipe=qwen3", "--set", "train.steps=1",
                                "--set", f"train.run.output_dir={tmp_path / 'b'}", "--json"])
    assert named.exit_code == 0, named.output


def test_a_recipe_name_resolves_to_the_shipped_recipe_from_any_folder(tmp_path, monkeypatch):
    from ligerkit.train.recipe.loading import RecipeError, recipe_root

    config = tmp_path / "mine.yaml"
    config.write_text("name: mine\n")
    monkeypatch.chdir(tmp_path)
    assert recipe_root(config, "qwen3") == (ROOT / "recipes" / "qwen3").resolve()
    with pytest.raises(RecipeError, match="not a recipe folder"):
        recipe_root(config, "no_such_recipe")


@pytest.mark.parametrize("sets", [["train.run.stop_after_steps=0"], ["train.optim.warmup_steps=99"], ["data.path=x.jsonl"],
                                  ["data.kind=jsonl"], ["model.pretrained_path=/x"], ["train.run.checkpoint_every=0"]])
def test_inconsistent_run_options_are_refused(sets):
    with pytest.raises(ConfigError):
        load_engine(QWEN3_CPU, sets)
