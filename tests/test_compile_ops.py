"""The compile-mode operators on the CPU: registration, fake implementations and autograd
(``torch.library.opcheck``), and their CPU implementations against the math of the modules Liger
replaces (transformers' own RMSNorm, MLP and rotary code, torch's layer norm)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ligerkit.compile import ops, routes

TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def r(*shape: int, grad: bool = True, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=grad)


def q_layout(b: int, h: int, s: int, d: int) -> torch.Tensor:
    """(batch, heads, seq, dim) over a (batch, seq, heads, dim) buffer, as attention hands it to rotary."""
    return torch.randn(b, s, h, d).transpose(1, 2).requires_grad_()


CASES = {
    "rms_norm_llama": (ops.rms_norm, lambda: (r(3, 5, 16), r(16), 1e-6, 0.0, "llama", None)),
    "rms_norm_gemma_offset": (ops.rms_norm, lambda: (r(3, 5, 16), r(16), 1e-6, 1.0, "gemma", None)),
    "rms_norm_none_no_weight": (ops.rms_norm, lambda: (r(4, 16), None, 1e-5, 0.0, "none", None)),
    "rms_norm_backward": (ops.rms_norm_backward, lambda: (r(4, 16, grad=False), r(4, 16, grad=False), r(16, grad=False),
                                                         torch.rand(4) + 0.5, 0.0, "llama", None, True)),
    "layer_norm": (ops.layer_norm, lambda: (r(3, 5, 16), r(16), r(16), 1e-5)),
    "layer_norm_no_bias": (ops.layer_norm, lambda: (r(3, 16), r(16), None, 1e-5)),
    "silu_mul": (ops.silu_mul, lambda: (r(3, 5, 32), r(3, 5, 32), 1.0, 1.0)),
    "silu_mul_multipliers": (ops.silu_mul, lambda: (r(4, 32), r(4, 32), 0.5, 2.0)),
    "gelu_mul": (ops.gelu_mul, lambda: (r(3, 5, 32), r(3, 5, 32))),
    "rope": (ops.rope, lambda: (q_layout(2, 4, 6, 16), q_layout(2, 2, 6, 16), r(1, 6, 16, grad=False),
                                r(1, 6, 16, grad=False), 1, None)),
    "rope_partial_4d_cos": (ops.rope, lambda: (q_layout(2, 4, 6, 16), q_layout(2, 2, 6, 16),
                                               r(2, 1, 6, 8, grad=False), r(2, 1, 6, 8, grad=False), 1, None)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_passes_opcheck(name):
    op, args = CASES[name]
    torch.manual_seed(0)
    torch.library.opcheck(op, args(), test_utils=TESTS)


def test_every_operator_is_registered_under_ligerkit():
    names = {op._name for op in ops.OPERATORS}
    assert names == {"rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward", "silu_mul",
                     "silu_mul_backward", "gelu_mul", "gelu_mul_backward", "rope", "rope_backward"}
    for name in names:
        assert hasattr(torch.ops.ligerkit, name)


def _grads(fn, *inputs):
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    out = fn(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(3)
    sum((o * torch.randn(o.shape, dtype=o.dtype)).sum() for o in outs).backward()  # logical order, any layout
    return [o.detach() for o in outs], [x.grad for x in xs]


def _close(a, b, tol=1e-5):
    for x, y in zip([*a[0], *a[1]], [*b[0], *b[1]], strict=True):
        torch.testing.assert_close(x, y, atol=tol, rtol=tol)


@pytest.mark.parametrize("offset,casting", [(0.0, "llama"), (1.0, "gemma")])
def test_rms_norm_matches_transformers_rms_norms(offset, casting):
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    x = torch.randn(2, 7, 32)
    ref = LlamaRMSNorm(32, eps=1e-6) if casting == "llama" else GemmaRMSNorm(32, eps=1e-6)
    with torch.no_grad():
        ref.weight.normal_()
    w = ref.weight.detach()
    _close(_grads(lambda a, b: ops.rms_norm(a, b, 1e-6, offset, casting, None)[0], x, w),
           _grads(lambda a, b: torch.func.functional_call(ref, {"weight": b}, (a,)), x, w))


def test_layer_norm_swiglu_geglu_match_torch_math():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 7, 32), torch.randn(32), torch.randn(32)
    _close(_grads(lambda *t: ops.layer_norm(*t, 1e-5)[0], x, w, b), _grads(lambda *t: F.layer_norm(t[0], (32,), t[1], t[2], 1e-5), x, w, b))
    a, c = torch.randn(2, 7, 64), torch.randn(2, 7, 64)
    _close(_grads(lambda p, q: ops.silu_mul(p, q, 1.0, 1.0), a, c), _grads(lambda p, q: F.silu(p) * q, a, c))
    _close(_grads(lambda p, q: ops.silu_mul(p, q, 0.5, 3.0), a, c), _grads(lambda p, q: F.silu(0.5 * p) * q * 3.0, a, c))
    _close(_grads(ops.gelu_mul, a, c), _grads(lambda p, q: F.gelu(p, approximate="tanh") * q, a, c))


@pytest.mark.parametrize("partial", [False, True])
def test_rope_matches_transformers_rotary(partial):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    q, k = q_layout(2, 4, 6, 16).detach(), q_layout(2, 2, 6, 16).detach()
    width = 8 if partial else 16
    freqs = torch.randn(1, 6, width // 2)
    cos, sin = torch.cat([freqs.cos()] * 2, -1), torch.cat([freqs.sin()] * 2, -1)

    def hf(a, b):
        if not partial:
            return apply_rotary_pos_emb(a, b, cos, sin)
        qa, qb = apply_rotary_pos_emb(a[..., :width], b[..., :width], cos, sin)
        return torch.cat([qa, a[..., width:]], -1), torch.cat([qb, b[..., width:]], -1)

    _close(_grads(lambda a, b: ops.rope(a, b, cos, sin, 1, None), q, k), _grads(hf, q, k))


def test_rope_output_layout_is_what_the_fake_says():
    q, k = q_layout(2, 4, 6, 16), q_layout(2, 2, 6, 16)
    cos, sin = torch.randn(1, 6, 16), torch.randn(1, 6, 16)
    out_q, out_k = ops.rope(q, k, cos, sin, 1, None)
    assert out_q.stride() == q.stride() and out_k.stride() == k.stride()
    assert out_q.data_ptr() != q.data_ptr()  # nothing written into the input


def test_stand_ins_take_the_arguments_liger_passes():
    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 16), torch.randn(16)
    expected = ops.rms_norm(x, w, 1e-6, 1.0, "gemma", None)[0]
    torch.testing.assert_close(routes.RMSNormFunction.apply(x, w, 1e-6, 1.0, "gemma", False, None), expected)
    torch.testing.assert_close(routes.RMSNormFunction.apply(x, w, 1e-6, 1.0, 2, True, None), expected)  # number form
    with pytest.raises(ValueError, match="casting mode"):
        routes.RMSNormFunction.apply(x, w, 1e-6, 0.0, 7)
    a, b = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(routes.SiLUMulFunction.apply(a, b), F.silu(a) * b)
    torch.testing.assert_close(routes.GELUMulFunction.apply(a, b), F.gelu(a, approximate="tanh").to(b.dtype) * b)
    q, k = q_layout(1, 2, 3, 8).detach(), q_layout(1, 2, 3, 8).detach()
    cos, sin = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    got = routes.rope_dispatch("rope", q, k, cos, sin, None, 1)
    torch.testing.assert_close(got[0], ops.rope(q, k, cos, sin, 1, None)[0])
    torch.testing.assert_close(routes.layer_norm(x, w, None, 1e-5), F.layer_norm(x, (16,), w, None, 1e-5))


def test_what_a_liger_replacement_runs_is_read_from_its_code():
    from liger_kernel.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb
    from liger_kernel.transformers.rms_norm import LigerRMSNorm, LigerRMSNormForGemma2
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from liger_kernel.transformers.swiglu import LigerExperts, LigerPhi3SwiGLUMLP, LigerSwiGLUMLP

    def kernels(obj):
        calls = routes.kernels_called(obj)
        return [r.kernel for r in calls.routes], calls.unrouted

    assert kernels(LigerRMSNormForGemma2) == (["rms_norm"], ())  # forward inherited from LigerRMSNorm
    assert kernels(LigerSwiGLUMLP) == (["swiglu"], ())  # through Liger's module-level _swiglu_dispatch
    assert kernels(LigerPhi3SwiGLUMLP) == (["swiglu"], ())
    assert kernels(liger_rotary_pos_emb) == (["rope"], ())

    class LocalNorm(LigerRMSNorm):  # as Liger's exaone4 helper defines one inside a function
        pass

    class CallsSuper(LigerRMSNorm):  # as LigerRMSNormForGemma4 does
        def forward(self, hidden_states):
            return super().forward(hidden_states).contiguous()

    assert routes.kernels_called(LocalNorm).fully_routed
    assert kernels(CallsSuper) == (["rms_norm"], ())
    # lives beside the SwiGLU MLP, runs the fused-MoE kernel, which no operator serves
    routed, unrouted = kernels(LigerExperts)
    assert routed == [] and unrouted == ("liger_kernel.ops.fused_moe.LigerFusedMoEFunction",)
    assert not routes.kernels_called(liger_multimodal_rotary_pos_emb).fully_routed
    assert not routes.kernels_called(torch.nn.Linear).fully_routed  # runs no Liger kernel at all


def test_routes_cover_liger_modules_by_where_they_live():
    assert routes.route_for("liger_kernel.transformers.rms_norm.LigerRMSNormForGemma2").kernel == "rms_norm"
    assert routes.route_for("liger_kernel.transformers.rope.liger_rotary_pos_emb").kernel == "rope"
    assert routes.route_for("liger_kernel.transformers.swiglu.LigerPhi3SwiGLUMLP").kernel == "swiglu"
    assert routes.route_for("liger_kernel.transformers.qwen2vl_mrope.liger_multimodal_rotary_pos_emb") is None
    import importlib

    for route in routes.ROUTES:  # each rebound name exists in Liger as installed
        assert hasattr(importlib.import_module(route.module), route.attr), route
