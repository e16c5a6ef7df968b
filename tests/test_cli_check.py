"""``check`` from any folder with progress on stderr, options given twice, and one pointer to ``ligerkit smoke``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.proof.recipe_check import resolve_recipe, shipped_recipes
from ligerkit.train.recipe.loading import SHIPPED_RECIPES

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_check_from_another_folder_finds_the_default_recipe_and_shows_progress(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check"])
    assert result.exit_code == 0, result.output
    assert "Recipe composite_vlm: 2 config(s)" in result.stdout and "check: OK" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("check")]
    assert progress[0] == "check: importing torch, transformers and the kit"
    assert f"check composite_vlm: its files ({SHIPPED_RECIPES / 'composite_vlm'})" in progress
    for name, n in (("cpu.yaml", 1), ("gpu.yaml", 2)):
        started = progress.index(f"check composite_vlm: {name} ({n}/2): loading it, then setting its model up on "
                                 "the meta device")
        assert progress[started + 1].startswith(f"check composite_vlm: {name} ({n}/2): ok in ")


@pytest.mark.parametrize("name", ["qwen3", "recipes/qwen3"])
def test_check_takes_a_shipped_recipe_name_from_any_folder(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe(name) == SHIPPED_RECIPES / "qwen3"


def test_a_folder_here_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen3").mkdir()
    assert resolve_recipe("qwen3") == tmp_path / "qwen3"


def test_check_json_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check", "custom_lm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["recipe"] == "custom_lm" and data["ok"]


def test_an_unknown_recipe_names_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check", "qwen4"])
    assert result.exit_code == 1
    assert "qwen4 is not a recipe folder" in result.stderr
    assert {"qwen3", "composite_vlm", "custom_lm"} <= set(shipped_recipes())
    assert all(name in result.stderr for name in shipped_recipes())


@pytest.mark.parametrize("args, option", [
    (["--family", "qwen3", "--family", "llama"], "--family"),
    (["--model", "a", "--model", "b"], "--model"),
    (["--modules", "rope=on", "--modules", "rope=off"], "--modules"),
    (["--exclude", "rope", "--exclude=swiglu"], "--exclude"),
])
def test_plan_refuses_an_option_given_twice(args, option):
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 1, result.output
    assert f"InvalidOptionError: {option} given more than once" in result.stderr
    assert "Route:" not in result.stdout  # nothing was planned


def test_repeatable_set_stays_repeatable():
    result = runner.invoke(app, ["train", "recipes/qwen3/configs/cpu.yaml", "--set", "train.steps=1",
                                 "--set", "train.colour=red"])
    assert result.exit_code == 1
    assert "given more than once" not in result.output and "colour" in result.output


def test_user_facing_text_points_to_ligerkit_smoke_not_pytest():
    sources = [p for p in (ROOT / "src" / "ligerkit").rglob("*.py")]
    assert not [str(p) for p in sources if "pytest -m gpu" in p.read_text()]
    readme_cli = (ROOT / "README.md").read_text().split("## Command line")[1].split("\n## ")[0]
    assert "pytest" not in readme_cli and "ligerkit smoke" in readme_cli
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 0, result.output
    assert "`ligerkit smoke RECIPE`" in result.stdout and "pytest" not in result.stdout


def test_a_config_that_needs_a_missing_extra_is_checked_without_it_and_says_which(monkeypatch):
    import sys

    from ligerkit.proof.recipe_check import check_recipe

    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError, as without the extra
    result = check_recipe("qwen3")
    assert result.ok, result.problems
    (lora,) = [p for p in result.plans if p.config == "gpu_8b_lora.yaml"]
    assert lora.notes == ["needs the `lora` extra (pip install -e '.[lora]'), which is not installed: checked "
                          "without train.lora"]
    assert lora.model_class and lora.scan is not None  # the rest of it was checked
    assert all(not p.notes for p in result.plans if p is not lora)
