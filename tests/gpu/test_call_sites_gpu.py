"""GPU: the rotary references compute what Liger's kernels compute on every layout a model may pass,
the layouts they misread included (q and k as (batch, seq, heads, dim) with ``unsqueeze_dim=2``, cos/sin
rows of another batch); and the call-site replay runs the real kernels on the model's own calls."""

from __future__ import annotations

import pytest
import torch

from ligerkit.probe import reference as R


def _kernel_and_reference(fn, reference, args, kwargs):
    """Outputs and q/k gradients of Liger's kernel (float32, on the GPU) and of the reference (CPU)."""
    outs = []
    for impl, device in ((fn, "cuda"), (reference, "cpu")):
        q, k = (t.detach().clone().to(device).requires_grad_(True) for t in args[:2])
        rest = [t.to(device) if isinstance(t, torch.Tensor) else t for t in args[2:]]
        oq, ok = impl(q, k, *rest, **kwargs)
        g = torch.Generator().manual_seed(3)
        gq, gk = torch.randn(oq.shape, generator=g).to(device), torch.randn(ok.shape, generator=g).to(device)
        dq, dk = torch.autograd.grad((oq, ok), (q, k), (gq, gk))
        outs.append([t.detach().cpu() for t in (oq, ok, dq, dk)])
    return outs


def _rotary_cases():
    g = torch.Generator().manual_seed(0)
    b, h, s, d = 2, 4, 8, 16
    q, k = torch.randn(b, h, s, d, generator=g), torch.randn(b, 2, s, d, generator=g)
    angles = torch.rand(b, s, d // 2, generator=g) * 6
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    part = torch.cat((angles[..., :4], angles[..., :4]), -1)
    qs, ks = torch.randn(b, s, h, d, generator=g), torch.randn(b, s, h, d, generator=g)  # (batch, seq, heads, dim)
    return {
        "standard": ((q, k, cos, sin), {}),
        "cos batch 1": ((q, k, cos[:1], sin[:1]), {}),
        "cos 2-D": ((q, k, cos[0], sin[0]), {}),
        "cos 4-D": ((q, k, cos[:, None], sin[:, None]), {}),
        "partial": ((q, k, part.cos(), part.sin()), {}),
        "transposed q, k": ((qs.transpose(1, 2), ks.transpose(1, 2), cos, sin), {}),
        "unsqueeze_dim=2 (misread)": ((qs, ks, cos, sin), {"unsqueeze_dim": 2}),
        "unsqueeze_dim=2, cos batch 1 (misread)": ((qs, ks, cos[:1], sin[:1]), {"unsqueeze_dim": 2}),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(_rotary_cases()))
def test_the_rotary_reference_is_liger_s_kernel_on_every_layout(case):
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    args, kwargs = _rotary_cases()[case]
    kernel, reference = _kernel_and_reference(liger_rotary_pos_emb, R.rotary, args, kwargs)
    for name, a, b in zip(("q", "k", "grad q", "grad k"), kernel, reference):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), f"{case}: {name} off by {(a - b).abs().max():.3g}"


@pytest.mark.gpu
def test_the_multimodal_reference_is_liger_s_kernel():
    from liger_kernel.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb

    g = torch.Generator().manual_seed(0)
    b, h, s, d = 2, 4, 8, 16
    q, k = torch.randn(b, h, s, d, generator=g), torch.randn(b, 2, s, d, generator=g)
    angles = torch.rand(3, b, s, d // 2, generator=g) * 6
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    for section in ([4, 2, 2], [2, 2, 2]):  # the second leaves the width rows to fill the rest
        kernel, reference = _kernel_and_reference(liger_multimodal_rotary_pos_emb, R.multimodal_rotary,
                                                  (q, k, cos, sin, section), {})
        for name, a, c in zip(("q", "k", "grad q", "grad k"), kernel, reference):
            assert torch.allclose(a, c, rtol=1e-5, atol=1e-5), f"{section}: {name} off by {(a - c).abs().max():.3g}"


@pytest.mark.gpu
def test_the_call_site_replay_runs_the_real_kernel_on_the_model_s_calls():
    from toy_models import modeling_call_sites as M

    from ligerkit.probe.catalog import by_name
    from ligerkit.probe.call_sites import DIFFERS, MATCH, call_sites

    good = call_sites(M.apply_rotary_pos_emb, by_name("liger_rotary_pos_emb"), M, M.CallSitesConfig())
    assert good.verdict == MATCH, good.reason
    bad = call_sites(M.apply_rotary_pos_emb, by_name("liger_rotary_pos_emb"), M, M.CallSitesConfig(rope_layout="bshd"))
    assert bad.verdict == DIFFERS and "unsqueeze_dim=2" in bad.reason


@pytest.mark.gpu
def test_suggest_proves_its_map_on_the_gpu_without_being_asked():
    import json

    from typer.testing import CliRunner

    from ligerkit.cli import app

    args = ["suggest", "toy_models.modeling_call_sites", "--config", "toy_models.modeling_call_sites:CallSitesConfig",
            "--json"]
    found = json.loads(CliRunner().invoke(app, args).stdout)
    assert found["gradients"] is not None and found["gradients"]["verdict"] == "PASS", found["gradients"]
    skipped = json.loads(CliRunner().invoke(app, [*args, "--no-gpu"]).stdout)
    assert skipped["gradients"] is None
