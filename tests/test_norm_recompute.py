"""train.memory.recompute_norm_output: Liger's RMSNorm outputs (and the rotary over q and k norms) are
recomputed in backward, not kept, and change no bit.

Liger's kernels do not run on a CPU, so the mechanism is driven by pure-PyTorch stand-ins named and
shaped as Liger's functions are (``LigerRMSNormFunction`` keeps its 2-D input, weight and inverse RMS and
returns a view of its buffer; ``LigerRopeFunction`` rotates q and k in place and keeps cos and sin), in a
tiny transformers Qwen3 whose norms and rotary call them; ``tests/gpu/test_glu_recompute_gpu.py`` runs
Liger's own.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.train.memory import norm_recompute as N
from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.run.resume import SAFE_TO_CHANGE
from ligerkit.train.memory.saved_recompute import recomputed, same_bits

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
MODES = {"llama": 0, "gemma": 1, "none": -1}


def _hf_style_norm(x2: torch.Tensor, weight: torch.Tensor, eps: float, mode: str, offset: float) -> torch.Tensor:
    """The norm as transformers writes it (not as ligerkit recomputes it): Llama's cast before the
    weight, Gemma's float32 throughout, or no casting."""
    if mode == "none":
        rstd = torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + eps)
        return x2 * rstd * (weight + offset)
    rstd = torch.rsqrt(x2.float().pow(2).mean(-1, keepdim=True) + eps)
    if mode == "llama":
        return (weight + offset) * (x2.float() * rstd).to(x2.dtype) if offset == 0 else \
            ((x2.float() * rstd).to(x2.dtype).float() * (weight.float() + offset)).to(x2.dtype)
    return (x2.float() * rstd * (1.0 * offset + weight.float())).to(x2.dtype)


class LigerRMSNormFunction(torch.autograd.Function):
    """Stand-in for Liger's: keeps (X as rows, W, RSTD), its casting mode as a number, returns a view."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset=0.0, casting_mode="llama"):  # noqa: ANN001, ANN205
        x2 = x.contiguous().view(-1, x.shape[-1])
        xf = x2 if casting_mode == "none" else x2.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        y = _hf_style_norm(x2, weight, eps, casting_mode, offset).contiguous()
        ctx.save_for_backward(x2, weight, rstd)
        ctx.casting_mode, ctx.offset, ctx.eps, ctx.mode_name = MODES[casting_mode], offset, eps, casting_mode
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):  # noqa: ANN001, ANN205
        x2, weight, _ = ctx.saved_tensors
        with torch.enable_grad():
            xd, wd = x2.detach().requires_grad_(), weight.detach().requires_grad_()
            y = _hf_style_norm(xd, wd, ctx.eps, ctx.mode_name, ctx.offset)
            gx, gw = torch.autograd.grad(y, (xd, wd), dy.reshape(y.shape))
        return gx.view(dy.shape), gw, None, None, None


def _rotate(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(batch, seq, heads, dim) rows rotated as Llama's rotary does (cos and sin broadcast over heads)."""
    half = q.shape[-1] // 2
    turned = torch.cat([-q[..., half:], q[..., :half]], dim=-1)
    return q * cos[:, :, None] + turned * sin[:, :, None]


def stand_in_rope_forward(q, k, cos, sin, rotary_dim=None):  # noqa: ANN001, ANN201
    """Liger's ``rope_forward`` in PyTorch: back to (batch, seq, heads, dim), rotated in place."""
    q, k = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()
    q.copy_(_rotate(q, cos, sin))
    k.copy_(_rotate(k, cos, sin))
    return q.transpose(1, 2), k.transpose(1, 2), cos, sin


class LigerRopeFunction(torch.autograd.Function):
    """Stand-in for Liger's: rotates its inputs in place, keeps cos and sin."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):  # noqa: ANN001, ANN205
        q, k, cos, sin = stand_in_rope_forward(q, k, cos, sin)
        ctx.save_for_backward(cos, sin)
        ctx.rotary_dim = None
        return q, k

    @staticmethod
    def backward(ctx, dq, dk):  # noqa: ANN001, ANN205
        cos, sin = ctx.saved_tensors
        with torch.enable_grad():
            grads = []
            for d in (dq, dk):
                z = torch.zeros(d.transpose(1, 2).shape, dtype=d.dtype, requires_grad=True)
                (g,) = torch.autograd.grad(_rotate(z, cos, sin), z, d.transpose(1, 2))
                grads.append(g.transpose(1, 2))
        return grads[0], grads[1], None, None


@pytest.fixture
def liger_stand_ins(monkeypatch):
    """A tiny bf16 transformers Qwen3 whose RMSNorms and rotary call the stand-ins (as Liger's swaps do);
    as many key/value heads as query heads, so that the CPU attention keeps the rotated k itself."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.models.qwen3 import modeling_qwen3

    def norm_forward(self, hidden):  # noqa: ANN001, ANN202
        return LigerRMSNormFunction.apply(hidden, self.weight, self.variance_epsilon, 0.0, "llama")

    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", norm_forward)
    monkeypatch.setattr(modeling_qwen3, "apply_rotary_pos_emb",
                        lambda q, k, cos, sin, unsqueeze_dim=1: LigerRopeFunction.apply(q, k, cos, sin))
    monkeypatch.setattr(N, "_rope_kernel", lambda: stand_in_rope_forward)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=8, max_position_embeddings=64,
                         use_cache=False,
                         attn_implementation="sdpa")
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))  # weights other than one, so the multiply shows
    return model


def _step(model: nn.Module, ids: torch.Tensor, table: dict | None, verify: bool = False):  # noqa: ANN202
    model.zero_grad(set_to_none=True)
    if table is None:
        loss, notes = model(input_ids=ids, labels=ids).loss, {}
    else:
        with recomputed(table, verify) as hooks:
            loss = model(input_ids=ids, labels=ids).loss
        notes = dict(hooks.by_node)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, notes


def test_a_qwen3_trains_the_same_bit_for_bit_with_its_norm_outputs_and_rotary_recomputed(liger_stand_ins):
    ids = torch.randint(0, 64, (2, 12))
    loss, grads, _ = _step(liger_stand_ins, ids, None)
    again, lean, notes = _step(liger_stand_ins, ids, N.recompute_table(glu=False, norm=True), verify=True)
    # per layer: the input norm's output kept by q, k and v, the post-attention norm's by gate and up,
    # and the rotated q and k kept by the attention
    assert notes.get(N.NORM_NODE, 0) >= 2 * 5 and notes.get(N.ROPE_NODE, 0) >= 2 * 2, notes
    assert same_bits(loss, again)
    assert grads.keys() == lean.keys() and len(grads) == len(list(liger_stand_ins.parameters()))
    for name, grad in grads.items():
        assert same_bits(grad, lean[name]), name


def test_the_outputs_are_not_kept_for_the_backward(liger_stand_ins):
    outputs: list[weakref.ref[torch.Tensor]] = []
    original = LigerRMSNormFunction.forward

    def recording(ctx, *args):  # noqa: ANN001, ANN202
        y = original(ctx, *args)
        outputs.append(weakref.ref(y._base))
        return y

    LigerRMSNormFunction.forward = staticmethod(recording)
    try:
        ids = torch.randint(0, 64, (1, 8))
        kept = liger_stand_ins(input_ids=ids, labels=ids).loss
        gc.collect()
        alive_kept = sum(ref() is not None for ref in outputs)
        outputs.clear()
        with recomputed(N.recompute_table(glu=False, norm=True)):
            lean = liger_stand_ins(input_ids=ids, labels=ids).loss
        gc.collect()
        alive_lean = sum(ref() is not None for ref in outputs)
    finally:
        LigerRMSNormFunction.forward = staticmethod(original)
    # kept: every norm output but the final norm's (the head's fused loss may not keep it either) is alive
    assert alive_kept == 2 * 4 + 1  # per layer two norms and q and k (rotated in place), and the final norm
    assert alive_lean == 0
    (kept + lean).backward()


def test_a_recompute_that_gives_other_bits_is_refused_in_the_forward(liger_stand_ins, monkeypatch):
    real = N.rms_norm_output
    monkeypatch.setattr(N, "rms_norm_output", lambda *a: real(*a) * 1.0078125)  # one bf16 step off
    ids = torch.randint(0, 64, (1, 8))
    with pytest.raises(LigerKitError, match="set train.memory.recompute_norm_output: false"):
        _step(liger_stand_ins, ids, N.recompute_table(glu=False, norm=True), verify=True)


@pytest.mark.parametrize("mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_the_recomputed_output_has_the_bits_of_the_norm_transformers_writes(mode, offset):
    torch.manual_seed(1)
    x = (torch.randn(64, 48) * 3).to(torch.bfloat16)
    w = (torch.randn(48) * 0.5).to(torch.bfloat16)
    xf = x if mode == "none" else x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)
    expected = _hf_style_norm(x, w, 1e-6, mode, offset)
    assert same_bits(N.rms_norm_output(x, w, rstd, offset, MODES[mode]), expected)
    assert same_bits(N.rms_norm_output(x, w, rstd, offset, mode), expected)  # the mode's name, too
    with pytest.raises(ValueError, match="casting mode"):
        N.rms_norm_output(x, w, rstd, offset, 7)


def test_a_rotary_over_projections_is_kept_as_it_is():
    torch.manual_seed(0)
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    k = torch.randn(1, 5, 2, 8, requires_grad=True)
    cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    with recomputed(N.recompute_table(glu=False, norm=True)) as hooks:
        rq, rk = LigerRopeFunction.apply((q * 1).transpose(1, 2), (k * 1).transpose(1, 2), cos, sin)
        loss = (rq.exp() + rk.exp()).sum()  # exp keeps its output, not the rotary's
        loss = loss + (rq * rk).sum()  # the multiply keeps both rotated tensors
    assert hooks.by_node.get(N.ROPE_NODE, 0) == 0
    loss.backward()
    assert q.grad is not None and k.grad is not None


def test_the_first_forward_check_refuses_a_key_that_found_nothing():
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    with recomputed(N.recompute_table(glu=False, norm=True)) as hooks:
        model(torch.randn(2, 8)).sum().backward()
    with pytest.raises(LigerKitError, match="kept no output of Liger's RMSNorm"):
        N.check_first_forward(hooks)


def test_the_names_it_recognizes_are_those_of_liger_s_functions():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction as Norm
    from liger_kernel.ops.rope import LigerRopeFunction as Rope

    assert set(N.RECOMPUTABLE) == {Norm._backward_cls.__name__, Rope._backward_cls.__name__}
    assert LigerRMSNormFunction._backward_cls.__name__ == N.NORM_NODE  # the stand-ins are named as Liger's


def test_the_config_refuses_it_where_it_cannot_see_the_outputs_and_a_resume_may_change_it():
    on = ["model.liger_kernel.enabled=true", "train.memory.recompute_norm_output=true"]
    with pytest.raises(ConfigError, match="train.memory.recompute_norm_output .*train.compile is ops"):
        load_recipe_config(QWEN3_CPU, [*on, "train.compile=ops"])
    with pytest.raises(ConfigError, match="train.memory.recompute_norm_output .*activation_checkpointing is on"):
        load_recipe_config(QWEN3_CPU, [*on, "train.activation_checkpointing=true"])
    assert load_recipe_config(QWEN3_CPU, on).train.memory.recompute_norm_output
    assert load_recipe_config(QWEN3_CPU, ["model.liger_kernel.enabled=false", "train.memory.recompute_norm_output=true",
                                          "train.compile=ops"]).train.memory.recompute_norm_output
    assert "train.memory.recompute_norm_output" in SAFE_TO_CHANGE


def test_the_step_module_verifies_its_first_forward_and_the_bench_recommendation_keeps_the_key(
        liger_stand_ins, caplog):
    from ligerkit.proof.recommend import training_lines
    from ligerkit.train.step import StepModule

    def loss(engine, model, batch, scale):  # noqa: ANN001, ANN202
        return model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss * scale

    batch = {"input_ids": torch.randint(0, 64, (1, 8))}
    plain = StepModule(None, liger_stand_ins, loss)
    lean = StepModule(None, liger_stand_ins, loss, recompute_norm_output=True)
    expected = plain(batch, 1.0)
    with caplog.at_level("INFO", logger="ligerkit.train"):
        assert same_bits(lean(batch, 1.0), expected)
    assert "checked bit for bit" in caplog.text and "LigerRMSNorm" in caplog.text and "LigerRope" in caplog.text
    with pytest.raises(LigerKitError, match="kept no output of Liger's RMSNorm"):
        StepModule(None, nn.Sequential(nn.Linear(8, 8)), lambda e, m, b, s: m(b["x"]).sum(),
                   recompute_norm_output=True)({"x": torch.randn(2, 8)})
    on = load_recipe_config(QWEN3_CPU, ["model.liger_kernel.enabled=true", "train.memory.recompute_norm_output=true"])
    assert "train.memory.recompute_norm_output: true" in training_lines(on.train)
