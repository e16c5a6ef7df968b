"""A newcomer's first hour (issue 24): output that fits a log, a Ctrl-C reported as a stop, one step
numbering, an unknown family pointed at ``suggest``, every config error at once, and a callback that
finds the kit of the model it trains."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.errors import UnknownFamilyError
from ligerkit.kit.families import get_family
from ligerkit.train import Trainer, load_engine
from ligerkit.train.run import checkpoint
from ligerkit.train.config import ConfigError
from ligerkit.train.stopping import TrainingStopped

runner = CliRunner()
LONG = "Long" + "X" * 189 + "RMSNorm"  # a 200-character symbol name

LONG_MODULE = textwrap.dedent(f'''
    """One norm with a very long name."""
    import torch
    from torch import nn


    class {LONG}(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            x32 = x.float()
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return self.weight * y.to(x.dtype)
''')


def test_piped_output_keeps_a_200_character_symbol_name_on_one_line(tmp_path):
    module = tmp_path / "modeling_long_names.py"
    module.write_text(LONG_MODULE)
    config = tmp_path / "sizes.json"
    config.write_text(json.dumps({"hidden_size": 64}))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "ligerkit", "suggest", str(module), "--config", str(config)],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table_rows = [line for line in proc.stdout.splitlines() if LONG in line and "match" in line.lower()]
    assert table_rows, proc.stdout  # the whole name, and its verdict, on one line of the table
    assert not [line for line in proc.stdout.splitlines() if "XXXX" in line and LONG not in line], proc.stdout


def test_columns_still_sets_the_width_of_piped_output():
    wide = runner.invoke(app, ["families"], env={"COLUMNS": None})
    narrow = runner.invoke(app, ["families"], env={"COLUMNS": "60"})
    assert wide.exit_code == narrow.exit_code == 0, wide.output
    assert max(map(len, narrow.stdout.splitlines())) <= 60
    assert max(map(len, wide.stdout.splitlines())) > 80  # a family's module list is one line in a log


# --- a Ctrl-C is a stop, and steps are numbered alike in the log, metrics.jsonl and the stop message ---

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """``ligerkit train`` (stderr a pipe: log lines) sent SIGINT after its first step: (exit code, stderr, run)."""
    run = tmp_path_factory.mktemp("interrupted") / "run"
    cmd = [sys.executable, "-m", "ligerkit", "train", str(QWEN3_CPU), "--set", "train.steps=2000", "--set",
           f"train.run.output_dir={run}", "--set", "train.run.progress=true", "--set", "train.run.log_every=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 300
    while time.time() < deadline and not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    return proc.returncode, stderr, run


def test_a_ctrl_c_is_reported_as_a_stop_with_the_resume_command(interrupted):
    code, stderr, run = interrupted
    assert code == 130, stderr[-2000:]
    assert "error" not in stderr.lower() and "Traceback" not in stderr, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(rf"stopped after step \d+ of 2000 \(signal {int(signal.SIGINT)}\); checkpoint in .+\. "
                        rf"Continue with `ligerkit train --resume {re.escape(str(run))}`", last), last


def test_the_log_metrics_rows_and_the_stop_count_steps_alike(interrupted):
    _, stderr, run = interrupted
    rows = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [int(n) for n in re.findall(r"step (\d+)/2000: loss", stderr)]
    stopped = int(re.search(r"stopped after step (\d+) of 2000", stderr).group(1))
    assert rows == logged == list(range(1, stopped + 1)), (rows, logged, stopped)
    assert checkpoint.latest(run).name == f"step_{stopped:07d}"


def test_a_run_folder_counting_from_0_resumes_renumbered_from_1(tmp_path):
    sets = ["train.steps=4", "train.run.progress=false", f"train.run.output_dir={tmp_path / 'run'}"]
    with pytest.raises(TrainingStopped):
        Trainer(load_engine(QWEN3_CPU, [*sets, "train.run.stop_after_steps=2"])).train(torch.device("cpu"))
    metrics = tmp_path / "run" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    metrics.write_text("".join(json.dumps({**r, "step": r["step"] - 1}) + "\n" for r in rows))  # an old folder
    result = Trainer(load_engine(QWEN3_CPU, sets), str(tmp_path / "run")).train(torch.device("cpu"))
    resumed = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert result.first_step == 2 and [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [r["loss"] for r in resumed[:2]] == [r["loss"] for r in rows]  # the earlier steps kept, renumbered


# --- an unknown family points to `suggest`; close registry names only when really close ---

def test_an_unknown_family_names_ligerkit_suggest_and_no_far_matches():
    result = runner.invoke(app, ["plan", "--family", "diffllama"])
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "ligerkit suggest transformers.models.diffllama.modeling_diffllama" in message
    assert "Did you mean" not in message  # llama, mllama and llama4 are other models, not typos
    typo = get_family_error("qwen_3")
    assert typo.close_matches == ("qwen3",) and str(typo).startswith("Did you mean 'qwen3'?")
    assert "ligerkit suggest" in str(typo)


def get_family_error(name: str) -> UnknownFamilyError:
    with pytest.raises(UnknownFamilyError) as caught:
        get_family(name)
    return caught.value


# --- a copied config's mistakes in one error, each with its suggestion ---

def test_every_wrong_key_of_a_config_is_named_in_one_error(tmp_path):
    config = tmp_path / "copied.yaml"
    data = yaml.safe_load(QWEN3_CPU.read_text())
    data["train"].update(lerning_rate=0.001, max_stepz=3)
    data["model"]["config"]["hidden_sizee"] = 32
    config.write_text(yaml.safe_dump({**data, "recipe": str(ROOT / "recipes" / "qwen3")}))
    with pytest.raises(ConfigError) as caught:
        load_engine(config)
    message = str(caught.value)
    assert message.startswith(f"fix these 3 problems of {config}")
    assert "train.lerning_rate: unknown key (did you mean learning_rate? this config calls it train.optim.lr)" in message
    assert "train.max_stepz: unknown key (did you mean max_steps? this config calls it train.steps)" in message
    assert "model.config.hidden_sizee: Qwen3Config has no such option (did you mean hidden_size" in message


def test_the_model_keys_and_module_names_are_named_together():
    with pytest.raises(ConfigError) as caught:
        load_engine(QWEN3_CPU, ["model.config.hidden_sizee=32", "model.config.num_hidden_layerz=2",
                                "model.liger_kernel.modules.rms_nrom=true"])
    assert len(caught.value.problems) == 3, caught.value
    assert "rms_nrom: not a Liger module name (did you mean rms_norm?)" in str(caught.value)
    assert "num_hidden_layerz: Qwen3Config has no such option (did you mean num_hidden_layers?)" in str(caught.value)


# --- the callback finds the kit of a model built under kit.apply and checked with kit.scan ---

def test_the_callback_finds_the_kit_of_a_model_scanned_by_it(tmp_path):
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from ligerkit import LigerKernelKit
    from ligerkit.errors import LigerNeedsAcceleratorError
    from ligerkit.integrations import LigerKitCallback

    sys.path.insert(0, str(ROOT / "examples"))
    from _common import checkpoint as tiny_checkpoint, collate, samples

    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    kit = LigerKernelKit()
    kit.apply(ckpt, modules="auto")  # the README's own snippet: apply, build, scan
    try:
        model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True, use_kernels=False)
        scan = kit.scan(model)
        args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2,
                                 report_to=[], use_cpu=True, save_strategy="no")
        callback = LigerKitCallback()
        trainer = Trainer(model=model, args=args, train_dataset=samples(4, 16), data_collator=collate,
                          callbacks=[callback])
        assert callback.handle.kit is kit and callback.handle.scan is scan
        with pytest.raises(LigerNeedsAcceleratorError):  # Liger's kernels need a GPU; the report is written first
            trainer.train()
        written = json.loads((tmp_path / "out" / "ligerkit.json").read_text())
        assert written["report"]["patched"] and written["report"]["route"] == "official"
    finally:
        kit.revert()


def test_a_single_process_checkpoint_save_and_load_print_no_distributed_warning(tmp_path):
    import warnings

    import torch
    from torch import nn

    from ligerkit.train.run import checkpoint
    from ligerkit.train.distributed import DistEnv

    model = nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    env = DistEnv(rank=0, world_size=1, local_rank=0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        saved = checkpoint.save(tmp_path, 1, model, optimizer, env, keep=2)
        checkpoint.load(checkpoint.usable(tmp_path, env), model, optimizer, env)
    assert not [w for w in seen if "torch.distributed is disabled" in str(w.message)], [str(w.message) for w in seen]
    assert saved.name == "step_0000001"


def test_a_taken_output_dir_offers_resume_only_when_there_is_a_checkpoint(tmp_path):
    from ligerkit.train.run.folder import RunDirError, open_run_dir

    taken = tmp_path / "run"
    taken.mkdir()
    (taken / "config.yaml").write_text("name: x\n")
    with pytest.raises(RunDirError) as refused:
        open_run_dir(str(taken), str(tmp_path), "x", None)
    assert "--resume" not in str(refused.value) and "cannot be resumed" in str(refused.value)
    (taken / "checkpoints" / "step_0000002").mkdir(parents=True)
    with pytest.raises(RunDirError, match=f"--resume {taken}"):
        open_run_dir(str(taken), str(tmp_path), "x", None)


def test_suggest_gpu_without_a_gpu_prints_the_cpu_map_then_exits_3(monkeypatch):
    from typer.testing import CliRunner

    from ligerkit.cli import app, kit_commands

    monkeypatch.setattr(kit_commands, "_no_gpu", lambda: "suggest --gpu: no CUDA GPU here, so the map above was "
                                                          "probed on the CPU only")
    args = ["suggest", "toy_models.modeling_layouts", "--config", "toy_models.modeling_layouts:LayoutConfig", "--gpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3
    assert "custom_patches" in result.stdout or "candidates matched" in result.stdout  # the CPU map is printed
    assert "probed on the CPU only" in result.output and "ligerkit check" not in result.output


@pytest.mark.parametrize("name", ["qwen3", "recipes/qwen3"])
def test_a_shipped_recipe_name_resolves_from_any_folder_for_train_smoke_and_bench(tmp_path, monkeypatch, name):
    from ligerkit.proof import arm_runs
    from ligerkit.train.recipe.loading import SHIPPED_RECIPES, config_of

    monkeypatch.chdir(tmp_path)
    assert config_of(name, gpu=False) == SHIPPED_RECIPES / "qwen3" / "configs" / "cpu.yaml"  # train on a CPU
    assert arm_runs.resolve_config(name) == SHIPPED_RECIPES / "qwen3" / "configs" / "gpu.yaml"  # smoke, bench


def test_an_unknown_recipe_lists_the_shipped_ones_with_a_suggestion(tmp_path, monkeypatch):
    from ligerkit.train.recipe.loading import RecipeError, config_of

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match=r"recipes/qwen33 is neither .* did you mean qwen3\b.*shipped recipe: .*qwen3"):
        config_of("recipes/qwen33", gpu=False)
