"""The gradient proof on models that make discrete choices: each bfloat16 arm is compared with a float32
run that routes its tokens as the arm did (top-k pinned), and a tensor over its first bound is judged
against two samples of eager's own error. A swap that only rounds differently passes; a wrong one
still fails."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
import transformers.models.qwen2_moe.modeling_qwen2_moe as MOE

from ligerkit.probe.runnable import Runnable, build_model_class, runnable_model
from ligerkit.proof.grads import grad_parity, nudge
from ligerkit.proof.routes import differing, recording_routes, replaying_routes
from test_grads import parity_for


@pytest.fixture(scope="module")
def moe():
    """A tiny Qwen2-MoE whole model, its inputs, and a loss of its output."""
    @contextmanager
    def watch(model):
        yield lambda: True

    found = runnable_model(MOE, None, watch)
    cls, config, args, kwargs = type(found.model), found.config, found.args, found.kwargs

    def build():
        return build_model_class(cls, config)

    def loss(model):
        return Runnable(model, args, kwargs).loss()

    return build, loss


ROTARY = MOE.apply_rotary_pos_emb


@contextmanager
def _rotary(fn):
    MOE.apply_rotary_pos_emb = fn
    try:
        yield
    finally:
        MOE.apply_rotary_pos_emb = ROTARY


def _in_float32(q, k, cos, sin, unsqueeze_dim=1):
    """The model's own rotary computed in float32 and rounded once: the same math, another rounding."""
    rq, rk = ROTARY(q.float(), k.float(), cos.float(), sin.float(), unsqueeze_dim)
    return rq.to(q.dtype), rk.to(k.dtype)


def _scaled(q, k, cos, sin, unsqueeze_dim=1):
    """A wrong rotary: its queries come out 10% larger."""
    rq, rk = ROTARY(q, k, cos, sin, unsqueeze_dim)
    return rq * 1.1, rk


def test_a_swap_that_only_rounds_otherwise_passes_with_every_arm_routed_as_float32_would_route_it(moe):
    build, loss = moe
    result = grad_parity(build, loss, lambda: _rotary(_in_float32))
    assert result.verdict == "PASS", result.summary()
    assert result.routing is not None and result.routing.choices > 0
    assert "routing pinned" in result.summary() and result.to_dict()["routing"]["choices"] == result.routing.choices


def test_a_wrong_rotary_still_fails_with_the_routes_pinned(moe):
    build, loss = moe
    result = grad_parity(build, loss, lambda: _rotary(_scaled))
    assert result.verdict == "FAIL" and any("self_attn" in t.name for t in result.failures)


def test_routes_recorded_in_one_run_are_replayed_in_another():
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.2, 0.8]], requires_grad=True)
    with recording_routes() as routes:
        picked = torch.topk(scores, 2, dim=-1)
        scores.topk(1)  # the method form is recorded too
    assert len(routes.calls) == 2 and routes.choices == 6
    other = torch.tensor([[0.9, 0.1, 0.5], [0.7, 0.8, 0.2]], requires_grad=True)
    with replaying_routes(routes) as done:
        replayed = torch.topk(other, 2, dim=-1)
        other.topk(1)
    assert done == [2] and torch.equal(replayed.indices, picked.indices)
    assert torch.equal(replayed.values, other.gather(-1, picked.indices))
    replayed.values.sum().backward()  # gradients flow to the replayed choices, as through topk
    assert other.grad.sum() == 4
    with recording_routes() as again:
        torch.topk(other.detach(), 2, dim=-1)
        other.detach().topk(1)
    assert differing(routes, again) == 4  # per row, as sets
    with replaying_routes(routes):
        with pytest.raises(ValueError, match="another shape"):
            torch.topk(other, 1)  # the first recorded call took two
        torch.topk(other, 2)
        other.topk(1)
        with pytest.raises(ValueError, match="not recorded"):
            other.topk(1)


def test_a_tensor_over_its_first_bound_is_judged_against_two_samples_of_eager_and_a_wrong_swap_still_fails():
    result = parity_for("post", in_place=True)
    assert result.verdict == "FAIL" and result.resampled
    assert set(t.name for t in result.failures) <= set(result.resampled)
    assert "eager's error sampled twice" in result.summary()


def test_nudging_moves_each_weight_about_one_bfloat16_step_and_keeps_integer_buffers():
    state = {"w": torch.full((1000,), 3.0), "steps": torch.arange(4)}
    moved = nudge(state)
    step = torch.finfo(torch.bfloat16).eps
    assert torch.allclose((moved["w"] - 3.0).abs(), torch.full((1000,), 3.0 * step))
    assert 300 < int((moved["w"] > 3.0).sum()) < 700 and torch.equal(moved["steps"], state["steps"])
    assert not torch.equal(moved["w"].bfloat16(), state["w"].bfloat16())
