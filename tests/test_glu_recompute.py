"""train.memory.recompute_glu_product: the gated product is recomputed in backward, not kept, and changes no bit.

Liger's kernels do not run on a CPU, so the mechanism is driven here by a pure-PyTorch stand-in with
the same shape as Liger's functions (an autograd function that keeps its two inputs), registered the
way Liger's are; ``tests/gpu/test_glu_recompute_gpu.py`` runs Liger's own.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.train.memory import glu_recompute as G
from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.run.resume import SAFE_TO_CHANGE

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"


def _silu_mul(a: torch.Tensor, b: torch.Tensor, as_view: bool) -> torch.Tensor:
    """The product as Liger's kernels give it (a view of the 2-D buffer they wrote), or as a plain tensor."""
    if not as_view:
        return nn.functional.silu(a) * b
    buffer = (nn.functional.silu(a) * b).reshape(-1, a.shape[-1]).contiguous()
    return buffer.view(a.shape)


class SiLUMul(torch.autograd.Function):
    """silu(a) * b, keeping a and b (as Liger's SwiGLU does)."""

    as_view = True

    @staticmethod
    def forward(ctx, a, b):  # noqa: ANN001, ANN205
        ctx.save_for_backward(a, b)
        return _silu_mul(a, b, SiLUMul.as_view)

    @staticmethod
    def backward(ctx, dc):  # noqa: ANN001, ANN205
        a, b = ctx.saved_tensors
        s = torch.sigmoid(a)
        return dc * b * s * (1 + a * (1 - s)), dc * a * s


def _recompute(node, shape) -> torch.Tensor:  # noqa: ANN001
    a, b = node.saved_tensors
    return _silu_mul(a, b, SiLUMul.as_view)


@pytest.fixture(params=[True, False], ids=["liger_view", "plain"])
def stand_in(monkeypatch, request):
    """The stand-in registered as Liger's functions are; its product a view of its buffer as Liger's
    are (the form the H200 showed), or a plain tensor."""
    monkeypatch.setitem(G.RECOMPUTABLE, "SiLUMulBackward", G.Recomputable(_recompute, G.KEY))
    monkeypatch.setattr(SiLUMul, "as_view", request.param)


class MLP(nn.Module):
    def __init__(self, width: int = 16, inner: int = 48, frozen_down: bool = False):
        super().__init__()
        self.gate, self.up = nn.Linear(width, inner, bias=False), nn.Linear(width, inner, bias=False)
        self.down = nn.Linear(inner, width, bias=False)
        self.adapter = nn.Sequential(nn.Linear(inner, 4, bias=False), nn.Linear(4, width, bias=False))
        self.down.weight.requires_grad_(not frozen_down)  # LoRA: a frozen base, a trained adapter on it
        self.products: list[weakref.ref[torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = SiLUMul.apply(self.gate(x), self.up(x))
        self.products.append(weakref.ref(c._base if c._base is not None else c))  # the buffer itself
        return x + self.down(c) + self.adapter(c)


def _grads(model: nn.Module, x: torch.Tensor, recompute: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    model.zero_grad(set_to_none=True)
    if recompute:
        with G.recomputed_glu_products() as hooks:
            loss = model(x).square().mean()
        notes = hooks.notes
    else:
        loss, notes = model(x).square().mean(), 0
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, notes


@pytest.mark.parametrize("frozen_down", [False, True], ids=["full", "lora"])
def test_the_loss_and_every_gradient_are_the_same_bit_for_bit(stand_in, frozen_down):
    torch.manual_seed(0)
    model = nn.Sequential(MLP(frozen_down=frozen_down), MLP(frozen_down=frozen_down))
    x = torch.randn(3, 5, 16)
    loss, grads, _ = _grads(model, x, recompute=False)
    again, recomputed, notes = _grads(model, x, recompute=True)
    assert notes >= 2  # each layer's product was left to the backward (kept by down and the adapter)
    assert torch.equal(loss, again)
    assert grads.keys() == recomputed.keys() and len(grads) >= 8
    for name, grad in grads.items():
        assert torch.equal(grad, recomputed[name]), name


def test_the_product_is_not_kept_for_the_backward(stand_in):
    torch.manual_seed(0)
    kept, dropped = MLP(), MLP()
    x = torch.randn(2, 4, 16)
    out = kept(x)
    with G.recomputed_glu_products():
        lean = dropped(x)
    gc.collect()
    assert kept.products[0]() is not None  # saved by the down projection and the adapter
    assert dropped.products[0]() is None  # only the note of how to make it again
    (out.sum() + lean.sum()).backward()


def test_a_product_changed_in_place_after_it_was_saved_is_refused(stand_in):
    class Changes(MLP):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c = SiLUMul.apply(self.gate(x), self.up(x))
            out = self.down(c)
            with torch.no_grad():
                c.mul_(2.0)  # after the down projection saved it
            self.held = c  # still held when the backward runs, so the change can be seen
            return out

    model = Changes()
    with G.recomputed_glu_products():
        out = model(torch.randn(2, 16))
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()


def test_other_saved_tensors_are_kept_as_they_are(stand_in):
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    with G.recomputed_glu_products() as hooks:
        loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    assert hooks.notes == 0
    with pytest.raises(LigerKitError, match="train.memory.recompute_glu_product: false"):
        G.check_first_forward(hooks)


def test_the_names_it_recognizes_are_those_of_liger_s_functions():
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    assert set(G.RECOMPUTABLE) == {LigerSiLUMulFunction._backward_cls.__name__,
                                   LigerGELUMulFunction._backward_cls.__name__}


def test_the_config_refuses_it_where_it_cannot_see_the_products():
    on = ["model.liger_kernel.enabled=true", "train.memory.recompute_glu_product=true"]
    with pytest.raises(ConfigError, match="train.compile is ops"):
        load_recipe_config(QWEN3_CPU, [*on, "train.compile=ops"])
    with pytest.raises(ConfigError, match="train.activation_checkpointing is on"):
        load_recipe_config(QWEN3_CPU, [*on, "train.activation_checkpointing=true"])
    assert load_recipe_config(QWEN3_CPU, on).train.memory.recompute_glu_product
    # with Liger off there is no product to recompute: an eager arm of a comparison trains as it is
    assert load_recipe_config(QWEN3_CPU, ["model.liger_kernel.enabled=false", "train.memory.recompute_glu_product=true",
                                          "train.compile=ops"]).train.memory.recompute_glu_product
    assert "train.memory.recompute_glu_product" in SAFE_TO_CHANGE  # same bits: a resume may turn it on or off


def test_a_step_with_it_on_trains_the_same_and_checks_its_first_forward(stand_in, caplog):
    from ligerkit.train.step import StepModule

    class Loss:
        def __call__(self, engine, model, batch, scale):  # noqa: ANN001, ANN204
            return model(batch["x"]).square().sum() * scale

    torch.manual_seed(0)
    model = MLP()
    batch = {"x": torch.randn(2, 3, 16)}
    plain, lean = StepModule(None, model, Loss()), StepModule(None, model, Loss(), recompute_glu_product=True)
    expected = plain(batch, 0.5)
    with caplog.at_level("INFO", logger="ligerkit.train"):
        assert torch.equal(lean(batch, 0.5), expected)
    assert "checked bit for bit: 2 SiLUMul saved uses" in caplog.text  # the down projection and the adapter
    with pytest.raises(LigerKitError, match="kept no product"):
        StepModule(None, nn.Sequential(nn.Linear(16, 16)), lambda e, m, b, s: m(b["x"]).sum(),
                   recompute_glu_product=True)(batch)


def test_the_bench_recommendation_keeps_it():
    from ligerkit.proof.recommend import training_lines

    on = load_recipe_config(QWEN3_CPU, ["model.liger_kernel.enabled=true", "train.memory.recompute_glu_product=true"])
    assert "train.memory.recompute_glu_product: true" in training_lines(on.train)
    assert not any("recompute_glu" in line for line in training_lines(load_recipe_config(QWEN3_CPU).train))
