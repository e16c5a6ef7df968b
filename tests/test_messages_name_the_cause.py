"""Every message points at the real cause, and nothing is silently accepted: a config value of a YAML type no
config holds (``!!binary``), a size that is not positive given to ``suggest --set``, a ``--set`` typo (named as
the ``--set``, not as the file), a checkpoint folder without its tokenizer; ``suggest`` piped to a file writes
rows readable at 100 columns; loss.png names its run; the shipped smoke pictures are today's layout."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

import run_fixtures as F
from ligerkit.cli import app
from ligerkit.errors import ConfigError, SuggestError, TokenizerError
from ligerkit.train import Trainer, load_engine
from ligerkit.train.config import load_recipe_config

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = ROOT / "recipes" / "qwen3"
QWEN3_CPU = QWEN3 / "configs" / "cpu.yaml"
VENDORED = "recipes/vendored_llm/model/modeling_vendored_llama.py"
runner = CliRunner()


# --- YAML types a config never holds -------------------------------------------------------------------

TAGGED = {"!!binary aGVsbG8=": "!!binary", "!!set {a, b}": "!!set", "!!omap [a: 1]": "!!omap",
          "!!pairs [a: 1]": "!!pairs", "!!timestamp 2024-01-01": "date", "2024-01-01": "date",
          "!!python/object:os.system x": "!!python/object", "!mine 1": "!mine"}


@pytest.mark.parametrize("value", TAGGED)
def test_a_config_value_of_another_yaml_type_is_refused_naming_its_key_and_line(value, tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text(QWEN3_CPU.read_text().replace("name: qwen3-cpu", f"name: qwen3-cpu\nrecipe: {QWEN3}")
                      + f"extra:\n  deep: [1, {value}]\n")
    line = config.read_text().splitlines().index(f"  deep: [1, {value}]") + 1
    with pytest.raises(ConfigError) as refused:
        load_engine(config)
    message = str(refused.value)
    assert f"line {line}: extra.deep[1]: " in message and TAGGED[value] in message
    assert "only text, numbers, true/false, null, lists and mappings" in message


def test_a_binary_value_in_a_set_or_a_real_key_never_trains(tmp_path):
    with pytest.raises(ConfigError, match=r"--set 'data.corpus_path=!!binary aGk=': line 1: the value 'aGk=' has "
                                          r"the YAML type !!binary"):
        load_recipe_config(QWEN3_CPU, ["data.corpus_path=!!binary aGk="])
    config = tmp_path / "mine.yaml"
    data = yaml.safe_load(QWEN3_CPU.read_text())
    config.write_text(yaml.safe_dump({**data, "recipe": str(QWEN3)}).replace("name: qwen3-cpu", "name: !!binary aGk="))
    result = runner.invoke(app, ["train", str(config)])
    assert result.exit_code == 1 and "name: the value 'aGk=' has the YAML type !!binary" in result.stderr
    assert "Traceback" not in result.output


def test_plain_values_aliases_and_explicit_plain_tags_still_load():
    from ligerkit.train.config.yaml_bounds import load_bounded

    assert load_bounded("a: !!str 5\nb: &x [1, 2]\nc: *x\nd: !!float 1\ne: null\nf: '2024-01-01'\n") == {
        "a": "5", "b": [1, 2], "c": [1, 2], "d": 1.0, "e": None, "f": "2024-01-01"}


# --- --set problems say they came from --set --------------------------------------------------------------

def test_a_set_typo_names_the_set_and_not_the_file():
    result = runner.invoke(app, ["train", str(QWEN3_CPU), "--set", "train.stpes=5"])
    assert result.exit_code == 1, result.output
    message = " ".join(result.stderr.split())
    assert "--set train.stpes=5: train.stpes: unknown key (did you mean steps?)" in message
    assert "(the file itself is fine)" in message and "is not a valid recipe config; fix each key" not in message


def test_problems_of_the_file_and_of_set_are_each_named_where_they_are(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text(QWEN3_CPU.read_text().replace("seed: 0", f"seed: 0\nrecipe: {QWEN3}\ncolour: red"))
    with pytest.raises(ConfigError) as refused:
        load_recipe_config(config, ["train.optim.lr=-1"])
    message = str(refused.value)
    assert message.startswith(f"{config} with its --set values is not a valid recipe config")
    assert "\n  colour: unknown key" in message and "\n  --set train.optim.lr=-1: train.optim.lr: " in message
    assert refused.value.problems == [p.strip() for p in message.splitlines()[1:]]


@pytest.mark.parametrize("sets, expected", [
    (["data.corpus_path=/nonexistent/corpus.txt"], "--set data.corpus_path=/nonexistent/corpus.txt: data.corpus_path"),
    (["model.config={hidden_size: -8}"], "--set model.config={hidden_size: -8}: model.config.hidden_size: -8 is not"),
    (["model.config.num_attention_heads=3"], "--set model.config.num_attention_heads=3: model.config"),
])
def test_a_problem_found_against_the_world_names_its_set_too(sets, expected):
    with pytest.raises(ConfigError) as refused:
        load_engine(QWEN3_CPU, sets)
    assert expected in str(refused.value)


def test_a_resume_refused_for_a_changed_key_names_the_set_that_changed_it(tmp_path):
    run = tmp_path / "run"
    sets = ["data.seq_len=16", "train.steps=2", "train.run.checkpoint_every=1", "train.run.stop_after_steps=1",
            "train.run.progress=false", f"train.run.output_dir={run}"]
    with pytest.raises(Exception, match="stopped after step 1"):
        Trainer(load_engine(QWEN3_CPU, sets)).train(torch.device("cpu"))
    with pytest.raises(ConfigError.__mro__[1], match=r"train\.optim\.lr: .* in the run, 0\.5 now \(from --set "
                                                     r"train\.optim\.lr=0\.5\)"):
        Trainer(load_engine(run / "config.yaml", ["train.optim.lr=0.5"]), run).train(torch.device("cpu"))


# --- suggest's --set values are held to the config rule ------------------------------------------------

@pytest.mark.parametrize("item", ["hidden_size=-8", "intermediate_size=0", "head_dim=2.5", "hidden_size=true",
                                  "num_hidden_layers=20000", "hidden_size=abc"])
def test_suggest_refuses_a_size_that_is_not_one_naming_the_set(item):
    result = runner.invoke(app, ["suggest", VENDORED, "--set", item])
    assert result.exit_code == 1, result.output
    message = " ".join(result.stderr.split())
    assert "SuggestError" in message and f"--set {item.split('=')[0]}=" in message and "Traceback" not in result.output


def test_suggest_refuses_a_bad_size_in_its_json_config_naming_the_file(tmp_path):
    from ligerkit.suggest import suggest

    config = tmp_path / "sizes.json"
    config.write_text(json.dumps({"hidden_size": -8}))
    with pytest.raises(SuggestError, match=rf"--config {config}: hidden_size: -8 is not a size"):
        suggest(VENDORED, str(config))


# --- a checkpoint folder without its tokenizer ---------------------------------------------------------

def _weights_only(folder: Path) -> Path:
    """What the README's "your own model" example makes with save_pretrained: weights and config, no tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    Qwen3ForCausalLM(Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, vocab_size=300)).save_pretrained(folder)
    return folder


def test_a_checkpoint_without_its_tokenizer_says_what_it_lacks_and_how_to_give_one(tmp_path):
    ckpt = _weights_only(tmp_path / "ckpt")
    data = F.jsonl_file(tmp_path / "data.jsonl")
    sets = ["model.source=pretrained", f"model.pretrained_path={ckpt}", "model.config={}", "data.kind=jsonl",
            f"data.path={data}", f"train.run.runs_dir={tmp_path / 'runs'}"]
    with pytest.raises(TokenizerError) as refused:
        Trainer(load_engine(QWEN3_CPU, sets)).train(torch.device("cpu"))
    message = str(refused.value)
    assert "model.pretrained_path" in message and "holds no tokenizer" in message and "tokenizer.json" in message
    assert "config.json" in message and "model.safetensors" in message  # what it holds instead
    assert "tokenizer.save_pretrained" in message and "data.tokenizer" in message and "data.kind: corpus" in message
    assert "empty once tokenized" not in message and not (tmp_path / "runs").exists()  # refused before any folder
    with pytest.raises(TokenizerError, match=r"data\.tokenizer: .* holds no tokenizer"):
        load_engine(QWEN3_CPU, [*sets, f"data.tokenizer={ckpt}"])
    F.tokenizer_folder(tmp_path / "tok")  # with one, it loads
    assert load_engine(QWEN3_CPU, [*sets, f"data.tokenizer={tmp_path / 'tok'}"]) is not None
    (ckpt / "tokenizer.json").write_text("")  # a copy cut short: refused as early, with the same ways to give one
    with pytest.raises(TokenizerError, match=r"holds no usable tokenizer: tokenizer\.json is empty\. To give one, "
                                             r"save the model's tokenizer"):
        load_engine(QWEN3_CPU, sets)


# --- suggest piped to a file --------------------------------------------------------------------------------

def test_suggest_piped_writes_rows_readable_at_100_columns():
    result = runner.invoke(app, ["suggest", "transformers.models.olmo2.modeling_olmo2"], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("# "))]
    assert max(map(len, table)) <= 100, max(table, key=len)
    assert any(line.startswith("    reason: ") for line in table)  # the long column, wrapped under its row
    rows = [line for line in table if line.startswith("Olmo2")]
    assert rows and all(len(line.split()) == 4 for line in rows)  # symbol, kind, verdict, replacement
    code = lines[len(table):]
    assert any("LigerPatch(MODULE, " in line for line in code) and max(map(len, code)) <= 100, max(code, key=len)


# --- pictures ------------------------------------------------------------------------------------------------

def test_the_loss_plot_is_titled_with_the_runs_name(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    titles, real = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (titles.append(self.axes[0].get_title()),
                                                                    real(self, *a, **k))[1])
    sets = ["data.seq_len=16", "train.steps=2", "train.run.progress=false", f"train.run.output_dir={tmp_path / 'r'}"]
    Trainer(load_engine(QWEN3_CPU, sets)).train(torch.device("cpu"))
    assert titles and titles[-1].startswith("qwen3-cpu: loss per step") and "r" in titles[-1].splitlines()[-1]


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


@pytest.mark.parametrize("record", sorted((ROOT / "docs" / "results" / "smoke").glob("*/smoke.json")),
                         ids=lambda p: p.parent.name)
def test_a_shipped_smoke_picture_is_what_smoke_draws_now_from_its_record(record, tmp_path):
    from ligerkit.proof.plots import save, smoke_figure
    from ligerkit.proof.smoke import read_record

    drawn = save(smoke_figure(read_record(record)), tmp_path / "smoke.png")
    assert _png_size(record.with_name("smoke.png")) == _png_size(drawn)


def test_a_switch_named_like_a_count_stays_a_switch_and_a_width_never_is():
    from ligerkit.sizes import size_problem

    assert size_problem("model.config.tie_word_embeddings", True) is None
    assert size_problem("hidden_size", True) == "True is not a size; it must be a positive integer"
    assert size_problem("num_attention_heads", False) is not None
