"""LoRA (``train.lora``) and activation checkpointing (``train.activation_checkpointing``) in the trainer.

LoRA: only the adapters train, the scan sees the adapted model, checkpoints hold the adapters and the
hash of the frozen base and resume exactly (one process and two gloo ranks under FSDP2), another base is
refused, a bad target names the model's linear layers, and the fused loss refuses a head with an adapter.
Activation checkpointing: the same loss and gradients as without it (dropout included), in the trainer,
with LoRA and the fused loss.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import torchrun_train

from ligerkit.loss import FusedLossRefusedError
from ligerkit.proof.arm_grads import recipe_loss
from ligerkit.train import Trainer, load_engine, set_up_model
from ligerkit.train.recipe.adapters import add_lora, frozen_fingerprint, perturb_zero_adapters
from ligerkit.errors import ResumeConfigError
from ligerkit.errors import CheckpointError
from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.memory.checkpointing import is_recomputed, recompute_layers

QWEN3_CPU = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
SETS = ["data.seq_len=16", "model.dtype=float32", "train.steps=4", "train.run.progress=false", "train.optim.lr=1e-2",
        "train.global_batch_size=4", "train.micro_batch_size=2"]
LORA = ["train.lora={rank: 4, alpha: 8}"]


def train(run: Path, *more: str, resume: Path | None = None, init_from: Path | None = None):
    engine = load_engine(QWEN3_CPU, [*SETS, f"train.run.output_dir={run}", *more])
    return Trainer(engine, resume, init_from).train(torch.device("cpu")), engine


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def test_lora_trains_only_the_adapters_and_the_scan_sees_the_adapted_model(tmp_path):
    engine = load_engine(QWEN3_CPU, [*SETS, *LORA])
    model = set_up_model(engine, torch.device("cpu"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # not lm_head
    result, engine = train(tmp_path / "run", *LORA)
    model = engine.unwrapped_model
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # the base never moved
    assert all(torch.isfinite(torch.tensor(s.loss)) for s in result.steps)
    assert result.steps[-1].loss < result.steps[0].loss


def test_adapter_checkpoints_hold_the_adapters_and_the_base_hash_and_resume_exactly(tmp_path):
    whole, engine = train(tmp_path / "whole", *LORA)
    sets = [*LORA, "train.run.checkpoint_every=2"]
    with pytest.raises(Exception, match="stopped after step 2"):
        train(tmp_path / "run", *sets, "train.run.stop_after_steps=2")
    saved = tmp_path / "run" / "checkpoints" / "step_0000002"
    meta = json.loads((saved / "meta.json").read_text())
    assert len(meta["frozen_sha256"]) == 64
    from ligerkit.train.run.safe_load import METADATA, read_metadata

    keys = [k for k in read_metadata(saved / METADATA).state_dict_metadata if k.startswith("model.")]
    # no frozen weight in the checkpoint (DCP lists a tied head under its own name: the tiny config ties it)
    assert keys and [k for k in keys if "lora_" not in k] in ([], ["model.inner.lm_head.weight"])
    train(tmp_path / "run", *sets, resume=tmp_path / "run")
    assert losses(tmp_path / "run") == losses(tmp_path / "whole")


def test_an_adapter_checkpoint_refuses_another_base_and_a_full_model(tmp_path):
    train(tmp_path / "run", *LORA, "train.run.checkpoint_every=4")
    with pytest.raises(CheckpointError, match="other frozen weights"):  # seed 1 builds another random base
        train(tmp_path / "other", *LORA, "seed=1", init_from=tmp_path / "run")
    with pytest.raises(CheckpointError, match="trains every weight"):
        train(tmp_path / "full", init_from=tmp_path / "run")
    same, _ = train(tmp_path / "same", *LORA, init_from=tmp_path / "run")  # the same base: accepted
    assert same.steps


def test_a_refused_init_from_leaves_no_folder_and_a_resume_says_what_can_start_the_new_run(tmp_path):
    train(tmp_path / "full", "train.run.checkpoint_every=4")
    with pytest.raises(CheckpointError) as refused:
        train(tmp_path / "lora", *LORA, init_from=tmp_path / "full")
    assert "--init-from" in str(refused.value) and "trained every weight" in str(refused.value)
    assert "shapes" not in str(refused.value)  # not a question of shapes
    assert not (tmp_path / "lora").exists()  # refused before its first step: the folder is gone
    assert train(tmp_path / "lora", *LORA)[0].steps  # so the same output_dir can be used at once
    with pytest.raises(ResumeConfigError) as other_lora:  # LoRA turned on: --init-from cannot start it either
        train(tmp_path / "full", "train.steps=6", *LORA, resume=tmp_path / "full")
    assert "--init-from" not in str(other_lora.value).split("differ from what it trained with")[1].split(
        "without --init-from")[0] and "cannot load" in str(other_lora.value)
    with pytest.raises(ResumeConfigError, match=r"start a new run from its newest checkpoint's weights: .*--init-from"):
        train(tmp_path / "full", "train.steps=6", "seed=3", resume=tmp_path / "full")  # the same weights train


def test_the_frozen_fingerprint_sees_any_change_to_a_frozen_weight():
    engine = load_engine(QWEN3_CPU, [*SETS, *LORA])
    model = set_up_model(engine, torch.device("cpu"))
    first = frozen_fingerprint(model)
    assert first == frozen_fingerprint(model)
    with torch.no_grad():
        next(p for p in model.parameters() if not p.requires_grad).view(-1)[0] += 1e-6
    assert frozen_fingerprint(model) != first
    assert frozen_fingerprint(torch.nn.Linear(2, 2)) is None  # everything trains: nothing to hash


def test_two_ranks_train_and_resume_adapters_exactly(tmp_path):
    sets = [*SETS, *LORA, "train.activation_checkpointing=true", "train.run.checkpoint_every=2"]

    def run(port: int, out: Path, *more: str, resume: Path | None = None) -> subprocess.CompletedProcess:
        return torchrun_train(QWEN3_CPU, [*sets, f"train.run.output_dir={out}", *more], tmp_path, port, resume=resume)

    whole = run(29571, tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert "training: LoRA: rank 4" in whole.stderr
    stopped = run(29572, tmp_path / "run", "train.run.stop_after_steps=2")
    assert stopped.returncode != 0 and "stopped after step 2" in stopped.stderr
    resumed = run(29573, tmp_path / "run", resume=tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(tmp_path / "run") == losses(tmp_path / "whole")


@pytest.mark.parametrize("line, words", [
    ("train.lora={target_modules: [q_proj, qkv]}", ["'qkv'", "q_proj", "gate_proj", "lm_head"]),
    ("train.lora={rank: 0}", ["train.lora.rank"]),
    ("train.lora={rnak: 4}", ["rank"]),
    ("train.lora={target_modules: []}", ["at least one"]),
    ("train.lora={dropout: 1.0}", ["train.lora.dropout"]),
    ("train.lora={target_modules: q_proj}", ["single name 'q_proj'", "[q_proj]", "all-linear"]),
    ("train.lora={target_modules: all_linear}", ["did you mean all-linear"]),
    ("train.lora={target_modules: [all-linear]}", ["all-linear stands on its own", "target_modules: all-linear"]),
])
def test_lora_config_errors_say_what_to_fix(tmp_path, line, words):
    with pytest.raises(ConfigError) as caught:
        engine = load_engine(QWEN3_CPU, [*SETS, line])
        set_up_model(engine, torch.device("cpu"))
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_the_fused_loss_refuses_an_output_head_with_an_adapter(tmp_path):
    with pytest.raises(FusedLossRefusedError, match="carries an adapter"):
        train(tmp_path / "run", "train.lora={target_modules: [lm_head, q_proj]}", "train.loss.path=fused")
    assert not (tmp_path / "run").exists()  # refused before it started
    result, _ = train(tmp_path / "ok", *LORA, "train.loss.path=fused")  # all-linear leaves the head alone
    assert result.steps


def _loss_and_grads(sets: list[str], recompute: bool) -> tuple[float, dict[str, torch.Tensor]]:
    engine = load_engine(QWEN3_CPU, [*SETS, *sets])
    torch.manual_seed(0)
    model = set_up_model(engine, torch.device("cpu"))
    perturb_zero_adapters(model)
    if recompute:
        assert all(is_recomputed(m) for m in model.model.layers) or recompute_layers(model, engine.fsdp_units(model))
    torch.manual_seed(1)  # the same dropout stream for both
    model.train()
    loss = recipe_loss(engine, torch.device("cpu"), 0, 2)(model)
    loss.backward()
    return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("sets", [[], LORA, ["train.loss.path=fused"],
                                  ["model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, "
                                   "num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, vocab_size: 320, "
                                   "attention_dropout: 0.3}"]],
                         ids=["full", "lora", "fused", "dropout"])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(sets):
    plain, plain_grads = _loss_and_grads(sets, recompute=False)
    again, again_grads = _loss_and_grads([*sets, "train.activation_checkpointing=true"], recompute=True)
    assert again == plain
    assert plain_grads.keys() == again_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(again_grads[name], grad, rtol=0, atol=0, msg=name)


def test_activation_checkpointing_wraps_each_layer_once_and_keeps_every_name():
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=true"])
    model = set_up_model(engine, torch.device("cpu"))
    names = [n for n, _ in model.named_parameters()]
    assert all(is_recomputed(layer) for layer in model.model.layers)
    assert recompute_layers(model, engine.fsdp_units(model)) == [f"model.layers.{i}" for i in range(2)]
    assert [n for n, _ in model.named_parameters()] == names
    with pytest.raises(Exception, match="fsdp_units"):
        recompute_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)), ["DecoderLayer"])


def test_the_trainer_trains_with_checkpointing_lora_and_the_fused_loss_to_the_same_curve(tmp_path):
    plain, _ = train(tmp_path / "plain", *LORA, "train.loss.path=fused")
    again, _ = train(tmp_path / "again", *LORA, "train.loss.path=fused", "train.activation_checkpointing=true")
    assert [s.loss for s in again.steps] == [s.loss for s in plain.steps]


def test_the_keys_are_in_the_schema_and_a_resume_may_not_change_them():
    from ligerkit.train.run.resume import SAFE_TO_CHANGE

    config = load_recipe_config(QWEN3_CPU, ["train.lora={rank: 8}", "train.activation_checkpointing=true"])
    assert config.train.lora.rank == 8 and config.train.lora.target_modules == "all-linear"
    assert "train.lora" not in SAFE_TO_CHANGE and not any(k.startswith("train.lora") for k in SAFE_TO_CHANGE)
    assert "train.activation_checkpointing" in SAFE_TO_CHANGE  # same loss and gradients: an OOM run may turn it on


def test_a_run_resumes_with_activation_checkpointing_turned_on_to_the_same_curve(tmp_path):
    train(tmp_path / "whole", *LORA)
    with pytest.raises(Exception, match="stopped after step 2"):
        train(tmp_path / "run", *LORA, "train.run.checkpoint_every=2", "train.run.stop_after_steps=2")
    train(tmp_path / "run", *LORA, "train.run.checkpoint_every=2", "train.activation_checkpointing=true",
          resume=tmp_path / "run")
    assert losses(tmp_path / "run") == losses(tmp_path / "whole")


def test_activation_checkpointing_compiles_whole_with_each_layer_and_keeps_the_gradients():
    from torch._dynamo.utils import counters

    from ligerkit.compile.layers import compile_layers, reset_compiled

    plain_loss, plain_grads = _loss_and_grads([], recompute=False)
    engine = load_engine(QWEN3_CPU, [*SETS, "train.activation_checkpointing=true"])
    torch.manual_seed(0)
    model = set_up_model(engine, torch.device("cpu"))
    counters.clear()
    try:
        assert compile_layers(model, engine.fsdp_units(model), fullgraph=True) == ["model.layers.0", "model.layers.1"]
        torch.manual_seed(1)
        loss = recipe_loss(engine, torch.device("cpu"), 0, 2)(model)
        loss.backward()
        assert sum(counters["graph_break"].values()) == 0
    finally:
        reset_compiled()
    assert abs(float(loss) - plain_loss) <= 1e-5
    for name, grad in plain_grads.items():
        got = dict(model.named_parameters())[name].grad
        assert ((got - grad).norm() / grad.norm().clamp_min(1e-12)).item() <= 1e-3, name


def test_the_frozen_fingerprint_is_computed_once_and_only_when_needed(monkeypatch):
    from ligerkit.train.recipe import adapters

    calls = []
    monkeypatch.setattr(adapters, "frozen_fingerprint", lambda model: calls.append(model) or "hash")
    model = torch.nn.Linear(2, 2)
    later = adapters.fingerprint_when_needed(model)
    assert calls == []  # a run that never saves or loads a checkpoint never hashes its base
    assert later() == later() == "hash" and calls == [model]
    adapters.fingerprint_when_needed(model, now=True)  # under torchrun: before the weights are sharded
    assert len(calls) == 2


def test_the_adapters_start_the_same_whatever_drew_random_numbers_before_them(monkeypatch):
    """On the H200 the arms of one LoRA bench started from different adapters: the fused loss's head check
    and compile mode's set-up draw random numbers between the build and the adapters. The set-up seeds the
    adapters' own generator, so every arm starts from the same ``A`` factors; the global generator is not
    moved by it."""
    import ligerkit.train.recipe.setup as setup

    engine = load_engine(QWEN3_CPU, [*SETS, *LORA])
    plain = {n: p.detach().clone() for n, p in set_up_model(engine, torch.device("cpu")).named_parameters()
             if ".lora_A." in n}
    build = engine.prepare_model

    def drawing(device):  # something between the build and the adapters draws from the generator
        model = build(device)
        torch.rand(1000)
        return model

    other = load_engine(QWEN3_CPU, [*SETS, *LORA])
    monkeypatch.setattr(other, "prepare_model", drawing)
    state = []
    monkeypatch.setattr(setup, "add_lora", lambda model, lora, seed=None: (
        state.append(torch.get_rng_state()), add_lora(model, lora, seed=seed), state.append(torch.get_rng_state())))
    drawn = {n: p for n, p in set_up_model(other, torch.device("cpu")).named_parameters() if ".lora_A." in n}
    assert plain and plain.keys() == drawn.keys()
    assert all(torch.equal(plain[n], drawn[n]) for n in plain)
    assert torch.equal(state[0], state[1])
