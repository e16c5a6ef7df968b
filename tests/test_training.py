"""Training: configs, overrides, data, the token-normalized loss, FSDP2 on two CPU processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ligerkit.train.config import ConfigError, load_recipe_config, validate_config
from ligerkit.train.data.batches import IGNORE_INDEX, ByteTokenizer, text_batch
from ligerkit.loss import token_loss_sum
from ligerkit.train import Trainer, set_up_model
from ligerkit.train.step import StepModule
from ligerkit.train.recipe.loading import load_engine
from helpers import GradCapture, torchrun_train

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
ALL_CONFIGS = sorted(ROOT.glob("recipes/*/configs/*.yaml"))


def test_there_are_six_recipes_with_cpu_and_gpu_configs():
    names = {p.parent.parent.name for p in ALL_CONFIGS}
    assert names == {"qwen3", "qwen3_vl", "composite_vlm", "custom_lm", "vendored_llm", "diffllama"}
    for recipe in names:  # every recipe has both; qwen3 adds the shapes users train (issue 23)
        assert {p.name for p in ALL_CONFIGS if p.parent.parent.name == recipe} >= {"cpu.yaml", "gpu.yaml"}
    assert {p.name for p in ALL_CONFIGS} == {"cpu.yaml", "gpu.yaml", "gpu_4b.yaml", "gpu_8b_lora.yaml"}


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_shipped_config_loads(path):
    config = load_recipe_config(path)
    assert config.train.loss.path == "standard"


def test_unknown_keys_are_rejected_with_their_path():
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "x", "model": {"family": "qwen3", "liger_kernel": {"enabeld": True}},
                         "train": {"stpes": 3}})
    assert "model.liger_kernel.enabeld: unknown key" in str(info.value)
    assert "train.stpes: unknown key" in str(info.value)


def test_overrides_reach_nested_keys_and_turn_auto_into_a_mapping():
    config = load_recipe_config(QWEN3_CPU, ["model.liger_kernel.modules.rope=false", "train.steps=3",
                                            "model.liger_kernel.enabled=true"])
    assert config.model.liger_kernel.modules == {"rope": False}
    assert config.train.steps == 3 and config.model.liger_kernel.enabled is True
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_recipe_config(QWEN3_CPU, ["train.steps"])
    with pytest.raises(ConfigError, match="train.steps"):
        load_recipe_config(QWEN3_CPU, ["train.steps=-1"])


def test_batch_geometry_is_validated():
    with pytest.raises(ConfigError, match="multiple of train.micro_batch_size"):
        load_recipe_config(QWEN3_CPU, ["train.global_batch_size=6", "train.micro_batch_size=4"])


def test_data_is_deterministic_padded_and_ignored_at_padding():
    config = load_recipe_config(QWEN3_CPU).data
    a = text_batch(config, 320, seed=0, start=0, size=8)
    b = text_batch(config, 320, seed=0, start=4, size=4)
    assert torch.equal(a["input_ids"][4:], b["input_ids"])
    padded = a["attention_mask"].sum(1) < config.seq_len
    assert padded.tolist() == [False, False, False, True] * 2
    assert torch.equal(a["labels"] == IGNORE_INDEX, a["attention_mask"] == 0)
    text = ByteTokenizer().decode(a["input_ids"][0].tolist())
    assert text.isprintable() or "\n" in text


def test_the_recipe_loss_is_token_normalized_over_the_whole_step():
    """Two micro-batches with different valid-token counts: loss = sum CE / total valid tokens."""
    engine = load_engine(QWEN3_CPU, ["train.run.progress=false"])
    model = set_up_model(engine, torch.device("cpu"))
    reference = load_engine(QWEN3_CPU).prepare_model(torch.device("cpu"))
    reference.load_state_dict(model.state_dict())
    batches = Trainer(engine).micro_batches(step=0, vocab_size=320)
    batches[1]["labels"][:, :40] = IGNORE_INDEX  # far fewer valid tokens in the second micro-batch
    counts = [int((b["labels"][:, 1:] != IGNORE_INDEX).sum()) for b in batches]
    assert counts[0] > 2 * counts[1] > 0

    total = sum(counts)
    hand = 0.0
    for b in batches:
        logits = reference(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        hand = hand + F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                      b["labels"][:, 1:].reshape(-1), ignore_index=IGNORE_INDEX,
                                      reduction="sum") / total
    hand.backward()

    capture = GradCapture(model)
    train = engine.config.train
    engine.config = engine.config.model_copy(update={"train": train.model_copy(update={"optim": train.optim.model_copy(update={"grad_clip": 0})})})
    loss, _, tokens = Trainer(engine).train_step(StepModule(engine, model, engine.loss), capture, batches, torch.device("cpu"))
    grads = capture.grads
    assert tokens == total
    assert loss == pytest.approx(hand.item(), rel=1e-6)
    for name, param in reference.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-5, atol=1e-7)


def test_all_ignored_micro_batch_adds_nothing_and_never_nans():
    logits = torch.randn(2, 5, 7)
    labels = torch.full((2, 5), IGNORE_INDEX)
    assert token_loss_sum(logits, labels).item() == 0.0


def test_fsdp2_on_two_cpu_processes_matches_one_process_with_accumulation(tmp_path):
    """Same global batch per step: 1 process x 2 micro-batches == 2 FSDP2 ranks x 1."""
    losses = {}
    for nproc, port in ((1, 29531), (2, 29532)):
        proc = torchrun_train(QWEN3_CPU, ["train.steps=3"], tmp_path, port, nproc, json_out=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = json.loads(proc.stdout[proc.stdout.index("{"):])
        losses[nproc] = [s["loss"] for s in data["steps"]]
    assert losses[1] == pytest.approx(losses[2], rel=1e-5)


EXIT_PROBE = """
import atexit, gc, os, sys

def count_sharded_modules():  # registered first, so it runs after ligerkit's own exit handler
    from torch.distributed.fsdp import FSDPModule
    alive = sum(isinstance(obj, FSDPModule) for obj in gc.get_objects())
    print(f"rank {os.environ['RANK']}: {alive} sharded modules left to the interpreter's shutdown", file=sys.stderr)

atexit.register(count_sharded_modules)
sys.argv[0] = "ligerkit"
from ligerkit.cli import main
main()
"""


@pytest.mark.parametrize("stop", [False, True], ids=["finished", "stopped"])
def test_a_two_rank_run_leaves_no_sharded_model_to_the_interpreters_shutdown(tmp_path, stop):
    """Freed there, a sharded model can abort a rank that trained well ("terminate called without an active
    exception"): after a finished run and after a stopped one (its traceback kept the model) none is left."""
    script = tmp_path / "probe.py"
    script.write_text(EXIT_PROBE)
    sets = ["train.steps=3", *(["train.run.stop_after_steps=2"] if stop else [])]
    proc = torchrun_train(QWEN3_CPU, sets, tmp_path, 29581 + stop, script=script)
    assert proc.returncode == (1 if stop else 0), proc.stderr[-3000:]
    assert proc.stderr.count("stopped after step 2") == (2 if stop else 0)
    for rank in (0, 1):
        assert f"rank {rank}: 0 sharded modules left" in proc.stderr, proc.stderr[-3000:]


def test_pretrained_source_loads_a_local_checkpoint_and_logs_jsonl(tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, vocab_size=320)
    torch.manual_seed(0)
    saved = Qwen3ForCausalLM(config)
    saved.save_pretrained(tmp_path / "ckpt")
    engine = load_engine(QWEN3_CPU, ["model.source=pretrained", f"model.pretrained_path={tmp_path / 'ckpt'}",
                                     "model.config={}",
                                     "train.steps=2", "train.run.progress=false", f"train.run.output_dir={tmp_path / 'run'}"])
    model = set_up_model(engine, torch.device("cpu"))
    torch.testing.assert_close(model.state_dict()["model.norm.weight"], saved.state_dict()["model.norm.weight"])
    torch.testing.assert_close(model.lm_head.weight, saved.lm_head.weight)
    result = Trainer(engine).train(torch.device("cpu"))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert json.loads(lines[0])["loss"] == pytest.approx(result.steps[0].loss)


def test_pretrained_source_needs_a_path():
    with pytest.raises(ConfigError, match="pretrained_path"):
        load_recipe_config(QWEN3_CPU, ["model.source=pretrained"])


def test_mfu_counts_matmuls_and_attention():
    from ligerkit.train.flops import flops_per_token

    engine = load_engine(QWEN3_CPU)
    model = set_up_model(engine, torch.device("meta"))
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    expected = 6 * linear + 12 * 2 * 4 * 16 * 64  # layers x heads x head_dim x seq_len
    assert flops_per_token(model, 64) == expected


def test_mfu_counts_no_weight_gradient_for_frozen_weights():
    from ligerkit.train.flops import flops_per_token

    model = set_up_model(load_engine(QWEN3_CPU, ["train.lora={rank: 4, alpha: 8}"]), torch.device("meta"))
    frozen = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
                 and not m.weight.requires_grad)
    trained = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight.requires_grad)
    assert frozen and trained
    assert flops_per_token(model, 64) == pytest.approx(4 * frozen + 6 * trained + 12 * 2 * 4 * 16 * 64)


def _step_grads(recipe_config: Path, overrides: list[str], batches) -> tuple[float, dict[str, torch.Tensor]]:
    engine = load_engine(recipe_config, ["train.run.progress=false", "train.optim.grad_clip=0", *overrides])
    model = set_up_model(engine, torch.device("cpu"))
    capture = GradCapture(model)
    loss, _, _ = Trainer(engine).train_step(StepModule(engine, model, engine.loss), capture, batches, torch.device("cpu"))
    return loss, capture.grads


@pytest.mark.parametrize("recipe", ["qwen3", "custom_lm"])
def test_dropping_a_right_padding_mask_keeps_loss_and_gradients(recipe):
    config = ROOT / "recipes" / recipe / "configs" / "cpu.yaml"
    batches = Trainer(load_engine(config)).micro_batches(step=0, vocab_size=320)
    assert any(bool((b["attention_mask"] == 0).any()) for b in batches)  # padding is really there
    kept = _step_grads(config, ["train.drop_right_padding_mask=false"], batches)
    dropped = _step_grads(config, ["train.drop_right_padding_mask=true"], batches)
    assert dropped[0] == pytest.approx(kept[0], rel=1e-6)
    for name, grad in kept[1].items():
        torch.testing.assert_close(dropped[1][name], grad, rtol=1e-5, atol=1e-6)


def test_dropping_the_mask_leaves_it_out_of_the_model_inputs():
    from ligerkit.train.step import drop_right_padding_mask

    batch = text_batch(load_recipe_config(QWEN3_CPU).data, 320, seed=0, start=0, size=4)
    out = drop_right_padding_mask(batch)
    assert "attention_mask" not in out and out["input_ids"] is batch["input_ids"]


def test_dropping_a_mask_that_matters_is_refused():
    from ligerkit.train.step import drop_right_padding_mask
    from ligerkit.errors import LigerKitError

    batch = text_batch(load_recipe_config(QWEN3_CPU).data, 320, seed=0, start=0, size=4)
    left = {**batch, "attention_mask": batch["attention_mask"].flip(-1)}
    with pytest.raises(LigerKitError, match="0 before a 1"):
        drop_right_padding_mask(left)
    counted = {**batch, "labels": batch["input_ids"].clone()}  # padded positions carry labels
    with pytest.raises(LigerKitError, match="counted label"):
        drop_right_padding_mask(counted)


def test_adamw_is_fused_only_on_cuda():
    engine = load_engine(QWEN3_CPU, ["model.liger_kernel.enabled=false"])
    model = set_up_model(engine, torch.device("cpu"))
    assert not Trainer(engine).optimizer(model).defaults["fused"]  # the CPU keeps the multi-tensor AdamW


def test_the_engine_builds_models_without_a_kv_cache():
    engine = load_engine(QWEN3_CPU, ["model.liger_kernel.enabled=false"])
    model = set_up_model(engine, torch.device("cpu"))
    batch = Trainer(engine).micro_batches(step=0, vocab_size=320)[0]
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert out.past_key_values is None
    assert model.config.use_cache is False


def test_deterministic_mode_is_on_while_training_and_restored_after(monkeypatch):
    engine = load_engine(QWEN3_CPU, ["train.steps=2", "train.run.progress=false", "train.deterministic=true"])
    seen = []
    trainer = Trainer(engine)
    original = trainer._train

    def spy(*args):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return original(*args)

    monkeypatch.setattr(trainer, "_train", spy)
    trainer.train(torch.device("cpu"))
    assert seen == [True]
    assert not torch.are_deterministic_algorithms_enabled()
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == ":4096:8"


def test_gradient_norm_is_taken_in_float32_and_clips_to_it():
    engine = load_engine(QWEN3_CPU, ["train.optim.grad_clip=0.5"])
    model = torch.nn.Linear(64, 300).to(torch.bfloat16)
    torch.manual_seed(1)
    for p in model.parameters():
        p.grad = (torch.randn_like(p, dtype=torch.float32) * 3).to(torch.bfloat16)
    want = torch.linalg.vector_norm(torch.cat([p.grad.float().reshape(-1) for p in model.parameters()])).item()
    bf16_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
    norm = Trainer(engine).clip(model)
    assert norm == pytest.approx(want, rel=1e-6)
    assert abs(bf16_norm - want) > abs(norm - want)  # the bf16 norm is a coarse rounding of it
    clipped = torch.linalg.vector_norm(torch.cat([p.grad.float().reshape(-1) for p in model.parameters()])).item()
    assert clipped == pytest.approx(0.5, rel=1e-2)


def test_no_clipping_still_reports_the_norm_and_leaves_gradients_alone():
    engine = load_engine(QWEN3_CPU, ["train.optim.grad_clip=0"])
    model = torch.nn.Linear(8, 4)
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)
    before = [p.grad.clone() for p in model.parameters()]
    assert Trainer(engine).clip(model) == pytest.approx(10.0 * (8 * 4 + 4) ** 0.5, rel=1e-6)
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.grad, b)
