"""The kit where users already train: the loader, HF Trainer, TRL, Accelerate and a plain loop (CPU).

Liger off, every example trains and its fused loss equals the standard one (losses, gradient
norms, final weights). Liger on, each integration is checked as far as a CPU goes: apply, build,
scan, construct the trainer, refuse the conflict, and the first forward raising
LigerNeedsAcceleratorError rather than Triton's error.
"""

from __future__ import annotations

import copy
import gc
import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ligerkit.errors import (
    InvalidOptionError,
    LigerNeedsAcceleratorError,
    ModelBuildError,
    TrainerConflictError,
)
from ligerkit.integrations import LigerKitHandle, kit_of, load_model, token_loss
from ligerkit.loss import FusedLossRefusedError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
common = importlib.import_module("_common")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return common.checkpoint(tmp_path_factory.mktemp("ckpt"))


def qwen3_norm():
    from transformers.models.qwen3 import modeling_qwen3

    return modeling_qwen3.Qwen3RMSNorm


def example(name):
    return importlib.import_module(name)


def close(a, b, rel=1e-5):
    return a == pytest.approx(b, rel=rel, abs=1e-6)


@pytest.mark.parametrize("name, standard, fused", [("hf_trainer", "model", "fused"), ("trl_sft", "trl", "fused"),
                                                   ("torch_loop", "standard", "fused")])
def test_each_example_trains_with_liger_off_and_its_fused_loss_equals_the_standard_one(name, standard, fused, ckpt):
    runs = {path: example(name).main(["--model", str(ckpt), "--liger", "off", "--loss", path])
            for path in (standard, fused)}
    a, b = runs[standard], runs[fused]
    assert len(a["losses"]) == 3 and a["losses"][-1] < a["losses"][0]
    assert close(a["losses"], b["losses"])
    assert close(a["params_checksum"], b["params_checksum"], rel=1e-6)
    if "grad_norms" in a:
        assert close(a["grad_norms"], b["grad_norms"])
    if name == "trl_sft":  # TRL's token count is logged with the fused loss too, the same at every step
        assert len(a["num_tokens"]) == 3 and a["num_tokens"] == b["num_tokens"] and a["num_tokens"][0] > 0


def test_the_accelerate_example_trains_and_its_fused_loss_equals_the_standard_one(ckpt):
    runs = [example("accelerate_loop").main(["--model", str(ckpt), "--liger", "off", "--loss", p])
            for p in ("standard", "fused")]
    assert runs[0]["losses"][-1] < runs[0]["losses"][0]
    assert close(runs[0]["losses"], runs[1]["losses"])


def _two_processes(script: str, ckpt: Path, tmp_path: Path, paths: tuple[str, str],
                   extra: tuple[str, ...] = ()) -> dict[str, dict]:
    out = {}
    for path in paths:
        target = tmp_path / f"{script}_{path}.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(EXAMPLES / f"{script}.py"), "--model", str(ckpt), "--liger", "off", "--loss", path,
               "--json", str(target), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=EXAMPLES)
        assert done.returncode == 0, done.stderr[-3000:]
        out[path] = json.loads(target.read_text())
    return out


def test_the_fused_loss_inside_trainer_equals_trainers_own_loss_on_two_gloo_processes(ckpt, tmp_path):
    out = _two_processes("hf_trainer", ckpt, tmp_path, ("model", "fused"), ("--output-dir", str(tmp_path / "o")))
    assert out["model"]["tokens_per_s"] and len(out["model"]["losses"]) == 3
    assert close(out["model"]["losses"], out["fused"]["losses"])
    assert close(out["model"]["grad_norms"], out["fused"]["grad_norms"])
    assert close(out["model"]["params_checksum"], out["fused"]["params_checksum"], rel=1e-6)


def test_trl_with_the_fused_loss_on_two_gloo_processes_logs_trls_token_count_of_both(ckpt, tmp_path):
    out = _two_processes("trl_sft", ckpt, tmp_path, ("trl", "fused"), ("--output-dir", str(tmp_path / "o")))
    assert close(out["trl"]["losses"], out["fused"]["losses"])
    assert out["fused"]["num_tokens"] == out["trl"]["num_tokens"] and len(out["trl"]["num_tokens"]) == 3


def test_the_accelerate_example_on_two_gloo_processes_weighs_every_token_of_the_global_batch(ckpt, tmp_path):
    out = _two_processes("accelerate_loop", ckpt, tmp_path, ("standard", "fused"))
    assert out["fused"]["processes"] == 2 and out["standard"]["losses"][-1] < out["standard"]["losses"][0]
    assert close(out["standard"]["losses"], out["fused"]["losses"])
    one = example("accelerate_loop").main(["--model", str(ckpt), "--liger", "off", "--loss", "standard",
                                            "--batch", "4", "--steps", "1"])
    # step 1 of two processes with 2 sequences each is one process with the same 4 sequences
    assert close(out["standard"]["losses"][0], one["losses"][0], rel=1e-5)


def test_load_model_applies_builds_scans_and_the_model_carries_its_kit(ckpt):
    original = qwen3_norm()
    model = load_model(ckpt)
    kit = model.ligerkit.kit
    try:
        assert isinstance(model.ligerkit, LigerKitHandle)
        assert model.ligerkit.report.route == "official" and model.ligerkit.report.patched
        assert model.ligerkit.scan.counts.get("liger_kernel.transformers.rms_norm.LigerRMSNorm", 0) > 0
        assert qwen3_norm() is not original
        assert kit_of(torch.nn.ModuleDict({"module": model})["module"]) is model.ligerkit
        wrapped = torch.nn.Module()
        wrapped.module = model  # a DDP-like wrapper
        assert kit_of(wrapped) is model.ligerkit
        assert copy.deepcopy(model).ligerkit is model.ligerkit
        # the kit lives in this process only. Loaded after the revert: where transformers binds its rotary as a
        # hub-kernel wrapper (the ``kernels`` package, transformers >= 5.25), each attention keeps a private copy
        # that unpickles through the module's binding, which holds Liger's function until the revert
        pickled = pickle.dumps(model)
        assert "Route: official" in str(model.ligerkit)
        # garbage collection never reverts: only kit.revert() does
        del model
        gc.collect()
        assert qwen3_norm() is not original
    finally:
        kit.revert()
    assert qwen3_norm() is original
    assert pickle.loads(pickled).ligerkit is None


def test_load_model_reverts_what_it_applied_when_the_build_fails(ckpt):
    original = qwen3_norm()

    class Broken:
        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            raise RuntimeError("disk full")

    with pytest.raises(ModelBuildError, match="disk full"):
        load_model(ckpt, model_class=Broken)
    assert qwen3_norm() is original


@pytest.mark.parametrize("kwargs, message", [
    ({"model_name_or_path": "/no/such/folder"}, "not a local folder"),
    ({}, "needs model_name_or_path"),
    ({"model_name_or_path": "CKPT", "dtype": "float33"}, "not a torch dtype"),
    ({"model_name_or_path": "CKPT", "custom_patches": {}, "modules": {"rope": True}}, "custom_patches"),
    ({"model_name_or_path": "CKPT", "weights": False, "revision": "main"}, "from_pretrained"),
])
def test_load_model_refuses_bad_input_before_patching(kwargs, message, ckpt):
    original = qwen3_norm()
    kwargs = {k: (str(ckpt) if v == "CKPT" else v) for k, v in kwargs.items()}
    with pytest.raises(InvalidOptionError, match=message):
        load_model(**kwargs)
    assert qwen3_norm() is original


def _trainer_args(tmp_path, **extra):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, save_strategy="no", **extra)


def test_the_callback_refuses_use_liger_kernel_when_the_trainer_is_built(ckpt, tmp_path):
    from transformers import Trainer

    from ligerkit.integrations import LigerKitCallback

    model = load_model(ckpt)
    try:
        swapped = qwen3_norm()
        with pytest.raises(TrainerConflictError, match="use_liger_kernel=False"):
            Trainer(model=model, args=_trainer_args(tmp_path, use_liger_kernel=True),
                    train_dataset=common.samples(8, 16), data_collator=common.collate, callbacks=[LigerKitCallback()])
        assert qwen3_norm() is swapped and "forward" not in vars(model)  # nothing ran over the kit's swaps
    finally:
        model.ligerkit.kit.revert()


def test_the_callback_writes_the_report_into_the_run_then_the_cpu_forward_is_refused(ckpt, tmp_path):
    from transformers import Trainer

    from ligerkit.integrations import LigerKitCallback

    model = load_model(ckpt)
    trainer = Trainer(model=model, args=_trainer_args(tmp_path), train_dataset=common.samples(8, 16),
                      data_collator=common.collate, callbacks=[LigerKitCallback()])
    try:
        with pytest.raises(LigerNeedsAcceleratorError, match="CUDA GPU"):
            trainer.train()
    finally:
        model.ligerkit.kit.revert()
    written = json.loads((tmp_path / "out" / "ligerkit.json").read_text())
    assert written["report"]["route"] == "official" and written["report"]["patched"]
    assert trainer.state.ligerkit["scan"]["counts"]["liger_kernel.transformers.rms_norm.LigerRMSNorm"] > 0


def test_a_model_without_a_kit_is_refused_by_the_callback(ckpt, tmp_path):
    from transformers import AutoModelForCausalLM, Trainer

    from ligerkit.integrations import LigerKitCallback

    plain = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    with pytest.raises(Exception, match="found no kit"):
        Trainer(model=plain, args=_trainer_args(tmp_path), train_dataset=common.samples(8, 16),
                data_collator=common.collate, callbacks=[LigerKitCallback()])


@pytest.mark.parametrize("name", ["hf_trainer", "torch_loop"])
def test_liger_on_a_cpu_builds_and_scans_then_the_first_forward_asks_for_a_gpu(name, ckpt):
    original = qwen3_norm()
    with pytest.raises(LigerNeedsAcceleratorError, match="CUDA GPU or an Ascend NPU"):
        example(name).main(["--model", str(ckpt), "--liger", "on", "--loss", "fused"])
    assert qwen3_norm() is original  # the example reverts in its finally


def test_trl_with_the_kit_reports_trls_forward_wrapper_and_refuses_the_cpu_forward(ckpt, monkeypatch):
    trl_example = example("trl_sft")
    built = []
    monkeypatch.setattr(trl_example, "load_model", lambda *a, **k: built.append(load_model(*a, **k)) or built[-1])
    with pytest.raises(LigerNeedsAcceleratorError):
        trl_example.main(["--model", str(ckpt), "--liger", "on"])
    (wrapper,) = built[0].ligerkit.scan.wrappers
    assert "model.forward wrapped by add_fused_lm_head" in wrapper and "trl/" in wrapper


@pytest.mark.parametrize("extra, message", [({"use_liger_kernel": True}, "use_liger_kernel"),
                                            ({"label_smoothing_factor": 0.1}, "label_smoothing_factor")])
def test_the_fused_trainers_refuse_what_they_cannot_honour_before_anything_is_built(extra, message, ckpt, tmp_path):
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from ligerkit.integrations import FusedLossTrainer, LigerKitSFTTrainer

    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    with pytest.raises(TrainerConflictError, match=message):
        FusedLossTrainer(model=model, args=_trainer_args(tmp_path, **extra))
    config = SFTConfig(output_dir=str(tmp_path / "sft"), report_to=[], use_cpu=True, **extra)
    with pytest.raises(TrainerConflictError, match=message):
        LigerKitSFTTrainer(model=model, args=config)
    assert "forward" not in vars(model)  # TRL never got to rebind it
    with pytest.raises(TrainerConflictError, match="loss_type"):
        LigerKitSFTTrainer(model=model, args=SFTConfig(output_dir=str(tmp_path / "d"), report_to=[], use_cpu=True,
                                                       loss_type="dft"))


def test_token_loss_refuses_a_model_whose_logits_are_not_its_head_applied_to_its_hidden_states(ckpt):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    batch = common.collate(common.samples(2, 16))
    plain = token_loss(model, batch, path="fused")
    assert close(float(plain), float(token_loss(model, batch, path="standard")))
    scaled = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    scaled.lm_head.register_forward_hook(lambda m, a, out: out * 2.0)  # a transform the fused loss cannot see
    with pytest.raises(FusedLossRefusedError, match="path='standard'"):
        token_loss(scaled, batch, path="fused")
    with pytest.raises(InvalidOptionError, match="labels"):
        token_loss(model, {"input_ids": batch["input_ids"]})


def test_the_callback_refuses_torch_compile_over_kernels_not_applied_in_compile_mode(ckpt, tmp_path):
    from transformers import Trainer

    from ligerkit.integrations import LigerKitCallback

    model = load_model(ckpt)
    try:
        with pytest.raises(TrainerConflictError, match="compile=True"):
            Trainer(model=model, args=_trainer_args(tmp_path, torch_compile=True), train_dataset=common.samples(8, 16),
                    data_collator=common.collate, callbacks=[LigerKitCallback()])
    finally:
        model.ligerkit.kit.revert()
    model = load_model(ckpt, compile=True)
    try:
        assert all(a.compile for a in model.ligerkit.report.applications)
        Trainer(model=model, args=_trainer_args(tmp_path, torch_compile=True), train_dataset=common.samples(8, 16),
                data_collator=common.collate, callbacks=[LigerKitCallback()])
    finally:
        model.ligerkit.kit.revert()
