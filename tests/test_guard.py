"""Patches from outside after the scan: the first-forward guard, and models whose kit was reverted."""

from __future__ import annotations

import copy
import pickle
from types import MethodType

import pytest
import torch
from liger_kernel.transformers.rms_norm import LigerRMSNorm

from ligerkit import LigerPatch
from ligerkit.errors import ForeignPatchError, InvalidOptionError, RevertedKitError
from toy_models import modeling_encoder as enc

ENC = "toy_models.modeling_encoder"


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=64))


def test_hf_trainer_use_liger_kernel_is_refused_before_step_1(kit, tmp_path):
    from transformers import Trainer, TrainingArguments

    kit.apply(model_family="qwen3")
    model = tiny_qwen3()
    kit.scan(model)
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(4)]
    args = TrainingArguments(output_dir=str(tmp_path), use_liger_kernel=True, max_steps=1, use_cpu=True,
                             report_to=[], per_device_train_batch_size=2, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    with pytest.raises(ForeignPatchError, match=r"^Set use_liger_kernel=False.*lce_forward"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_a_helper_run_again_on_the_instance_is_refused(kit):
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    kit.apply(model_family="qwen3")
    model = tiny_qwen3()
    kit.scan(model)
    _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False)
    with pytest.raises(ForeignPatchError, match="^Remove the Liger helper call"):
        model(torch.zeros(1, 4, dtype=torch.long))


def test_a_binding_the_kit_owns_changed_after_the_scan_is_refused(kit):
    original = enc.EncoderRMSNorm
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    model = enc.VisionEncoder(enc.EncoderConfig())
    kit.scan(model)
    enc.EncoderRMSNorm = original  # someone undid the swap behind the kit's back
    try:
        with pytest.raises(ForeignPatchError, match="EncoderRMSNorm, swapped by the kit"):
            model(torch.zeros(1, 2, 32))
    finally:
        enc.EncoderRMSNorm = LigerRMSNorm


def test_a_wrapper_that_keeps_the_swaps_is_reported_not_refused(kit):
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    model = enc.VisionEncoder(enc.EncoderConfig())
    model.final_norm = torch.nn.Identity()  # keep the forward on the CPU: no Liger kernel runs
    for layer in model.layers:
        layer.norm = torch.nn.Identity()
    scan = kit.scan(model, strict=False)
    plain = type(model).forward

    def wrapped(self, x):
        return plain(self, x)

    wrapped.__wrapped__ = plain
    model.forward = MethodType(wrapped, model)
    model(torch.zeros(1, 2, 32))
    (line,) = scan.wrappers  # where the wrapper's code lives, and what it wraps
    assert line.startswith(f"model.forward wrapped by {wrapped.__code__.co_qualname} (tests/test_guard.py:")
    assert line.endswith(f"which wraps {type(model).__module__}.{type(model).__qualname__}.forward")
    model(torch.zeros(1, 2, 32))  # the guard checks once
    assert len(scan.wrappers) == 1


def test_scan_after_revert_raises_for_a_model_built_under_the_kit(kit):
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    model = enc.VisionEncoder(enc.EncoderConfig())
    kit.revert()
    with pytest.raises(RevertedKitError, match="Keep the kit applied"):
        kit.scan(model)
    assert kit.scan(enc.VisionEncoder(enc.EncoderConfig())).counts == {}  # a model built after: fine


def test_leaving_applied_then_training_raises_at_the_first_forward(kit):
    with kit.applied(model_family="qwen3"):
        model = tiny_qwen3()
        kit.scan(model)
    with pytest.raises(RevertedKitError, match="reverted"):
        model(torch.zeros(1, 4, dtype=torch.long))


def test_scan_needs_a_model(kit):
    with pytest.raises(InvalidOptionError, match="torch.nn.Module"):
        kit.scan(None)


def test_a_guarded_model_still_copies_and_pickles(kit):
    kit.apply(custom_patches={"rms_norm": LigerPatch(ENC, "EncoderRMSNorm", LigerRMSNorm)})
    model = enc.VisionEncoder(enc.EncoderConfig())
    kit.scan(model)
    assert copy.deepcopy(model) is not model
    assert pickle.loads(pickle.dumps(model)).layers
