"""Gradient parity (the proof a loss cannot give), on the CPU with emulated in-place kernels."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.proof import smoke
from ligerkit.proof.grads import GradParity, TensorError, grad_parity
from ligerkit.proof.recipe_grads import recipe_grad_parity
from ligerkit.probe.emulate import GradIntoGradOutput
from ligerkit.probe.tolerance import GradTolerance, relative_error
from test_proof import GPU_CONFIG, FakeRunner, run
from toy_models import modeling_layouts as L

ROOT = Path(__file__).resolve().parents[1]


def emulated_liger_norm(in_place: bool) -> type:
    """LayoutRMSNorm's math with Liger's backward: dX written into dY when ``in_place``."""

    class Emulated(L.LayoutRMSNorm):
        def forward(self, x):
            return GradIntoGradOutput.apply(super().forward, in_place, x, self.weight)

    return Emulated


@contextmanager
def norm_swapped(cls):
    original = L.LayoutRMSNorm
    L.LayoutRMSNorm = cls
    try:
        yield
    finally:
        L.LayoutRMSNorm = original


def parity_for(layout: str, in_place: bool) -> GradParity:
    config = L.LayoutConfig(layout=layout)
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))

    def build():
        torch.manual_seed(0)
        return L.LayoutForCausalLM(config)

    def loss(model):
        logits = model(ids).float()
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    return grad_parity(build, loss, lambda: norm_swapped(emulated_liger_norm(in_place)))


def test_an_in_place_norm_under_a_residual_add_fails_although_the_loss_matches():
    result = parity_for("post", in_place=True)
    assert not result.passed
    assert abs(result.losses["patched"] - result.losses["eager"]) < 1e-6  # the loss cannot tell
    assert result.failures and result.max_patched > 10 * result.max_eager
    assert result.worst(1)[0] is result.failures[0]
    assert "FAIL" in result.summary()


@pytest.mark.parametrize("layout, in_place", [("post", False), ("sandwich", False), ("pre", True)])
def test_a_correct_swap_passes(layout, in_place):
    result = parity_for(layout, in_place)
    assert result.passed, result.summary()
    assert len(result.tensors) == len(list(L.LayoutForCausalLM(L.LayoutConfig(layout=layout)).parameters()))
    assert 0 < result.max_eager < 0.1  # bfloat16 rounding is measured, not zero


def test_relative_error_and_the_bound():
    truth = torch.tensor([3.0, 4.0])
    assert relative_error(truth + torch.tensor([0.3, 0.4]), truth) == pytest.approx(0.1)
    assert relative_error(torch.tensor([0.0, 2.0]), torch.zeros(2)) == pytest.approx(2.0)
    assert GradTolerance().bound(0.05) == pytest.approx(0.11)
    assert not TensorError("w", 0.01, float("nan"), 0.03).ok
    with pytest.raises(ValueError):
        GradTolerance(factor=0.5)


def test_recipe_grad_parity_builds_three_arms_of_the_recipes_own_model():
    config = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    # Liger's kernels do not run on a CPU: the "patched" arm here is Liger off too, in bfloat16
    result = recipe_grad_parity(config, ["model.dtype=bfloat16"], torch.device("cpu"),
                                patched_overrides=("model.liger_kernel.enabled=false",))
    assert result.passed
    assert set(result.losses) == {"float32", "eager", "patched"}
    assert all(t.patched == t.eager for t in result.tensors)
    assert len(result.tensors) > 10 and result.max_eager > 0


def test_smoke_fails_when_the_gradients_fail_even_if_the_loss_curves_agree(tmp_path):
    bad = GradParity([TensorError("layers.0.norm.weight", 0.01, 5.0, 0.03)], {"float32": 1.0})
    runner = FakeRunner(lambda overrides: run([5.0, 4.0], [2.0, 1.5], [1, 1], 1.0))
    result = smoke.smoke(GPU_CONFIG, 2, [], runner, gradients=lambda: bad)
    assert max(result.loss_gaps) == 0 and not result.passed
    record = result.to_dict()
    assert record["gradients"]["failures"] == ["layers.0.norm.weight"] and record["passed"] is False


def test_suggest_gpu_and_smoke_exit_3_without_a_gpu():
    runner = CliRunner()
    suggest = runner.invoke(app, ["suggest", "toy_models.modeling_layouts", "--gpu"])
    assert suggest.exit_code == 3, suggest.output
    bad = runner.invoke(app, ["smoke", "recipes/qwen3", "--grad-factor", "0.5"])
    assert bad.exit_code == 1 and "--grad-factor" in bad.output
