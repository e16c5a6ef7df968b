"""GPU: gradient parity with Liger's real kernels, and the catalog's in-place facts checked on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from toy_models import modeling_table as T

from ligerkit import LigerPatch
from ligerkit.proof.recipe_grads import map_grad_parity, recipe_grad_parity, suggested_patches
from ligerkit.probe.catalog import CATALOG
from ligerkit.probe.runnable import module_config
from ligerkit.suggest import suggest

ROOT = Path(__file__).resolve().parents[2]


def _module_writes(entry) -> tuple[bool, bool]:
    """(wrote into its input, wrote into the incoming gradient) for a catalog module on the GPU."""
    cls = entry.obj
    act = "gelu_pytorch_tanh" if entry.module == "geglu" else "silu"  # each gated MLP checks its activation
    config = T.TableConfig(hidden_size=64, intermediate_size=128, hidden_act=act)
    module = cls(config) if entry.kind == "mlp" else cls(64)
    module = module.to("cuda", torch.bfloat16)
    x = torch.randn(2, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x_before = x.detach().clone()
    out = module(x)
    dy = torch.randn_like(out)
    dy_before = dy.clone()
    out.backward(dy)
    return not torch.equal(x.detach(), x_before), not torch.equal(dy, dy_before)


@pytest.mark.gpu
@pytest.mark.parametrize("entry", [e for e in CATALOG if e.kind != "rope"], ids=lambda e: e.name)
def test_catalog_in_place_facts_hold_for_liger_s_modules(entry):
    wrote_input, wrote_grad = _module_writes(entry)
    assert not wrote_input
    assert wrote_grad is (entry.in_place == "backward"), entry.name


@pytest.mark.gpu
def test_liger_rotary_writes_into_the_q_and_k_it_is_given():
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    q = torch.randn(2, 8, 4, 16, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # (b, h, s, d) view
    k = torch.randn(2, 8, 4, 16, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    angles = torch.rand(2, 8, 8, device="cuda")
    cos, sin = torch.cat((angles, angles), -1).cos().bfloat16(), torch.cat((angles, angles), -1).sin().bfloat16()
    before = q.clone()
    q_out, _ = liger_rotary_pos_emb(q, k, cos, sin)
    assert not torch.equal(q, before) and torch.equal(q, q_out)
    assert "forward+backward" == next(e for e in CATALOG if e.name == "liger_rotary_pos_emb").in_place


@pytest.mark.gpu
def test_olmo2_with_plain_liger_rms_norm_fails_the_gradient_check():
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from transformers.models.olmo2 import modeling_olmo2

    patches = {"rms_norm": LigerPatch(modeling_olmo2.__name__, "Olmo2RMSNorm", LigerRMSNorm)}
    result = map_grad_parity(modeling_olmo2, module_config(modeling_olmo2, None), patches, torch.device("cuda"),
                             probe=False)
    assert not result.passed
    assert result.max_patched > 10 * result.max_eager
    assert abs(result.losses["patched"] - result.losses["eager"]) < 0.05


@pytest.mark.gpu
@pytest.mark.parametrize("module", ["transformers.models.olmo2.modeling_olmo2",
                                    "transformers.models.gemma2.modeling_gemma2",
                                    "transformers.models.qwen3.modeling_qwen3"])
def test_suggested_maps_pass_the_gradient_check(module):
    found = suggest(module)
    result = map_grad_parity(found.module_object, found.config_object, suggested_patches(found),
                             torch.device("cuda"))
    assert result.passed, result.summary()


@pytest.mark.gpu
def test_a_recipe_passes_the_gradient_check_with_liger_on():
    result = recipe_grad_parity(ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml", [], torch.device("cuda"))
    assert result.passed, result.summary()
    assert result.max_eager > 0
