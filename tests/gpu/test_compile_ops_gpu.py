"""GPU: the compile-mode operators run Liger's kernels and give what Liger's autograd functions give,
and a decoder layer holding them compiles whole (``fullgraph=True``) and matches itself uncompiled."""

from __future__ import annotations

import pytest
import torch

from ligerkit.compile import ops

CUDA = torch.device("cuda")
BF16 = torch.bfloat16


def _both(fn_liger, fn_ops, *inputs: torch.Tensor):
    """Outputs and input gradients of two callables on copies of the same inputs."""
    results = []
    for fn in (fn_liger, fn_ops):
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = fn(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        torch.manual_seed(1)
        sum((o.float() * torch.randn_like(o, dtype=torch.float32)).sum() for o in outs).backward()
        results.append(([o.detach() for o in outs], [x.grad for x in xs if x.requires_grad]))
    return results


def _same(a, b) -> None:
    (outs_a, grads_a), (outs_b, grads_b) = a, b
    for x, y in zip([*outs_a, *grads_a], [*outs_b, *grads_b], strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert torch.equal(x, y), f"max diff {(x.float() - y.float()).abs().max().item()}"


@pytest.mark.gpu
@pytest.mark.parametrize("casting", ["llama", "gemma", "none"])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_rms_norm_operator_equals_liger_function(casting, offset):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x, w = torch.randn(2, 300, 1024, device=CUDA, dtype=BF16), torch.randn(1024, device=CUDA, dtype=BF16)
    _same(*_both(lambda a, b: LigerRMSNormFunction.apply(a, b, 1e-6, offset, casting, False, None),
                 lambda a, b: ops.rms_norm(a, b, 1e-6, offset, casting, None)[0], x, w))


@pytest.mark.gpu
def test_layer_norm_swiglu_geglu_rope_operators_equal_liger_functions():
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    from liger_kernel.ops.rope import LigerRopeFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    r = lambda *s: torch.randn(*s, device=CUDA, dtype=BF16)  # noqa: E731
    _same(*_both(lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5),
                 lambda x, w, b: ops.layer_norm(x, w, b, 1e-5)[0], r(2, 300, 768), r(768), r(768)))
    _same(*_both(lambda a, b: LigerSiLUMulFunction.apply(a, b, 1.0, 1.0), lambda a, b: ops.silu_mul(a, b, 1.0, 1.0),
                 r(2, 300, 3072), r(2, 300, 3072)))
    _same(*_both(LigerGELUMulFunction.apply, ops.gelu_mul, r(2, 300, 3072), r(2, 300, 3072)))
    q = r(2, 300, 16, 128).transpose(1, 2)  # (batch, heads, seq, dim) over a (batch, seq, heads, dim) layout
    k = r(2, 300, 8, 128).transpose(1, 2)
    cos, sin = r(1, 300, 128), r(1, 300, 128)
    _same(*_both(lambda a, b: LigerRopeFunction.apply(a, b, cos, sin, None, 1, None),
                 lambda a, b: ops.rope(a, b, cos, sin, 1, None), q, k))


@pytest.mark.gpu
def test_operators_pass_opcheck_on_cuda():
    r = lambda *s, g=True: torch.randn(*s, device=CUDA, dtype=BF16, requires_grad=g)  # noqa: E731
    cases = [(ops.rms_norm, (r(4, 64), r(64), 1e-6, 0.0, "llama", None)),
             (ops.layer_norm, (r(4, 64), r(64), r(64), 1e-5)),
             (ops.silu_mul, (r(4, 64), r(4, 64), 1.0, 1.0)),
             (ops.gelu_mul, (r(4, 64), r(4, 64))),
             (ops.rope, (r(2, 3, 4, 16).transpose(1, 2), r(2, 3, 2, 16).transpose(1, 2),
                         r(1, 3, 16, g=False), r(1, 3, 16, g=False), 1, None))]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_autograd_registration",
                                                    "test_aot_dispatch_dynamic"))


@pytest.mark.gpu
def test_compiled_qwen3_layers_in_compile_mode_match_uncompiled():
    from transformers import Qwen3Config
    import transformers.models.qwen3.modeling_qwen3 as modeling

    from ligerkit.kit import LigerKernelKit
    from ligerkit.compile.layers import reset_compiled

    cfg = Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, vocab_size=32000)
    kit = LigerKernelKit()
    kit.apply(model_family="qwen3", compile=True)
    try:
        torch.manual_seed(0)
        model = modeling.Qwen3ForCausalLM(cfg).to(CUDA, BF16)
        ids = torch.randint(0, 32000, (2, 1024), device=CUDA)

        def step():
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            return loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}

        eager_loss, eager = step()
        for layer in model.model.layers:
            layer.compile(fullgraph=True)
        loss, grads = step()
        again, _ = step()  # a second pass sees the same weights: nothing was written into them
    finally:
        kit.revert()
        reset_compiled()
    assert again == loss
    assert abs(loss - eager_loss) <= 5e-3
    worst = max(((grads[k] - eager[k]).norm() / eager[k].norm().clamp_min(1e-12)).item() for k in eager)
    assert worst <= 0.05  # bf16 rounding of Inductor's fused neighbours only
