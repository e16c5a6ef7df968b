"""transformers' hub kernels: ligerkit's builds keep them off, and the kit refuses a model that has them on.

From transformers 5.25, ``from_pretrained`` turns ``use_kernels`` on by default where the ``kernels``
package is installed (it is a dependency there); the model is then kernelized again whenever it is set to
train or eval, which on a GPU replaces the forward of its norms, rotary and activations with kernels
fetched from the Hub. Those forwards are outside the kit's ledger and its proof: the scan refuses them
(and the first-forward guard refuses them turned on after the scan), and every build ligerkit makes from
a checkpoint passes ``use_kernels=False``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import MethodType

import pytest
import torch
from packaging.version import Version

from ligerkit.errors import HubKernelsError
from ligerkit.hf import build_model, hub_kernels_off, load_config
from ligerkit.integrations import load_model
from ligerkit.kit.scan import hub_kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
common = importlib.import_module("_common")


def _default_turns_hub_kernels_on() -> bool:
    import transformers

    return Version(transformers.__version__) >= Version("5.25")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return common.checkpoint(tmp_path_factory.mktemp("ckpt"))


def qwen3_norm():
    from transformers.models.qwen3 import modeling_qwen3

    return modeling_qwen3.Qwen3RMSNorm


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=64))


def kernelized(module: torch.nn.Module) -> None:
    """What ``kernels.kernelize`` leaves on a module whose forward it replaced with a hub kernel's."""
    module.forward = MethodType(lambda self, x: x * 1.0, module)
    module.__dict__["_kernel_repo"] = "kernels-community/liger-kernels (layer LigerRMSNorm)"


def test_ligerkits_checkpoint_builds_pass_use_kernels_false_unless_told_otherwise(ckpt):
    from transformers import Qwen3ForCausalLM

    seen = []

    class Recording(Qwen3ForCausalLM):
        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            seen.append(kwargs)
            return tiny_qwen3()

    config = load_config(ckpt)
    build_model(config, Recording, path=ckpt)
    build_model(config, Recording, path=ckpt, from_pretrained={"use_kernels": True})
    assert [kw["use_kernels"] for kw in seen] == [False, True]  # the caller's own choice is kept
    assert hub_kernels_off(Qwen3ForCausalLM) == {"use_kernels": False}
    assert hub_kernels_off(torch.nn.Linear) == {}  # a plain module class takes no such keyword


def test_models_ligerkit_loads_stay_free_of_hub_kernels_through_train_and_eval(ckpt):
    built = build_model(load_config(ckpt), path=ckpt)
    loaded = load_model(ckpt)
    try:
        for model in (built, loaded):
            model.train()
            model.eval()
            assert model.use_kernels is False and hub_kernels(model) == []
    finally:
        loaded.ligerkit.kit.revert()


def test_the_scan_refuses_from_pretrained_s_default_where_it_turns_hub_kernels_on(kit, ckpt):
    from transformers import AutoModelForCausalLM

    kit.apply(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    if _default_turns_hub_kernels_on():
        assert model.use_kernels is True
        with pytest.raises(HubKernelsError, match=r"^Load the model with from_pretrained\(\.\.\., use_kernels=False\)"
                                                  r".*at the scan \(use_kernels=True\)"):
            kit.scan(model)
        wrapper = torch.nn.ModuleDict({"inner": model})  # a wrapper (PEFT's, a composite) holding it
        with pytest.raises(HubKernelsError, match=r"use_kernels=True on inner\)"):
            kit.scan(wrapper)
        model.use_kernels = False  # the message's second remedy
    else:
        assert model.use_kernels is False
    assert kit.scan(model).counts["liger_kernel.transformers.rms_norm.LigerRMSNorm"] > 0
    kit.scan(AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True, use_kernels=False))


def test_load_model_asked_for_hub_kernels_refuses_and_reverts_what_it_applied(ckpt):
    original = qwen3_norm()
    if not _default_turns_hub_kernels_on():
        pytest.skip("this transformers needs an older kernels package to turn hub kernels on")
    with pytest.raises(HubKernelsError, match="use_kernels=True"):
        load_model(ckpt, use_kernels=True)
    assert qwen3_norm() is original


def test_a_module_a_hub_kernel_replaced_is_named_by_the_scan(kit):
    kit.apply(model_family="qwen3")
    model = tiny_qwen3()
    kernelized(model.model.norm)
    with pytest.raises(HubKernelsError, match=r"a hub kernel's forward already on 1 module\(s\): model\.norm"):
        kit.scan(model)


def test_hub_kernels_turned_on_after_the_scan_are_refused_at_the_first_forward(kit):
    kit.apply(model_family="qwen3")
    model = tiny_qwen3()
    kit.scan(model)
    kernelized(model.model.layers[0].input_layernorm)
    with pytest.raises(HubKernelsError, match=r"at its first forward .*model\.layers\.0\.input_layernorm"):
        model(torch.zeros(1, 4, dtype=torch.long))
