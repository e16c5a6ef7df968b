"""GPU: the fused loss's Liger kernel loop gives the standard loss's loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ligerkit.loss import fused_linear_token_loss
from ligerkit.loss.liger_chunks import liger_token_normalized_loss

ROWS, WIDTH, VOCAB = 4096, 512, 32000
NORMALIZER = 3001.0  # not a power of two: a scale applied after rounding would round again


def _inputs(dtype=torch.bfloat16, bias=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(ROWS, WIDTH, device="cuda", generator=g).to(dtype).requires_grad_()
    weight = (torch.randn(VOCAB, WIDTH, device="cuda", generator=g) * WIDTH**-0.5).to(dtype).requires_grad_()
    b = (torch.randn(VOCAB, device="cuda", generator=g) * 0.1).to(dtype).requires_grad_() if bias else None
    labels = torch.randint(0, VOCAB, (ROWS,), device="cuda", generator=g)
    labels[::7] = -100
    return hidden, weight, b, labels


def _grads(loss_fn, hidden, weight, bias):
    for t in (hidden, weight, bias):
        if t is not None:
            t.grad = None
    loss = loss_fn()
    loss.backward()
    return loss.detach(), [t.grad.clone() for t in (hidden, weight, bias) if t is not None]


def _standard(hidden, weight, bias, labels, softcap=None, smoothing=0.0):
    logits = F.linear(hidden, weight, bias).float()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    return F.cross_entropy(logits, labels, reduction="sum", label_smoothing=smoothing) * (1.0 / NORMALIZER)


def _equal_fraction(a, b):
    return (a == b).float().mean().item()


@pytest.mark.gpu
def test_the_kernel_loop_rounds_the_gradients_like_the_standard_path():
    hidden, weight, _, labels = _inputs()
    want_loss, want = _grads(lambda: _standard(hidden, weight, None, labels), hidden, weight, None)
    got_loss, got = _grads(lambda: liger_token_normalized_loss(hidden, weight, labels, NORMALIZER, chunk_tokens=1024),
                           hidden, weight, None)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=0)
    for mine, theirs in zip(got, want, strict=True):
        # The same bf16 values except where the float32 sums, taken in another order, straddle a
        # rounding boundary.
        assert _equal_fraction(mine, theirs) > 0.97
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=1e-2, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{"bias": True}, {"softcap": 30.0}, {"smoothing": 0.1}])
def test_the_kernel_loop_covers_bias_softcap_and_smoothing(options):
    hidden, weight, bias, labels = _inputs(bias=options.get("bias", False))
    softcap, smoothing = options.get("softcap"), options.get("smoothing", 0.0)
    want_loss, want = _grads(lambda: _standard(hidden, weight, bias, labels, softcap, smoothing), hidden, weight, bias)
    got_loss, got = _grads(lambda: liger_token_normalized_loss(hidden, weight, labels, NORMALIZER, bias,
                                                               softcap=softcap, label_smoothing=smoothing),
                           hidden, weight, bias)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=0)
    for mine, theirs in zip(got, want, strict=True):
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=2e-2, atol=1e-5)


@pytest.mark.gpu
def test_a_caller_scale_on_the_loss_reaches_every_gradient():
    hidden, weight, _, labels = _inputs()
    _, once = _grads(lambda: liger_token_normalized_loss(hidden, weight, labels, NORMALIZER), hidden, weight, None)
    _, twice = _grads(lambda: 2.0 * liger_token_normalized_loss(hidden, weight, labels, NORMALIZER),
                      hidden, weight, None)
    for a, b in zip(once, twice, strict=True):
        torch.testing.assert_close(b, 2 * a, rtol=0, atol=0)


@pytest.mark.gpu
def test_fused_loss_under_autocast_keeps_float32_weights_and_their_gradient():
    hidden, weight, _, labels = _inputs(dtype=torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want_loss, want = _grads(lambda: _standard(hidden, weight, None, labels), hidden, weight, None)
        labels2d = torch.cat([labels.new_full((1,), 0), labels]).reshape(1, -1)
        got_loss, got = _grads(lambda: fused_linear_token_loss(
            torch.cat([hidden, hidden[:1]]).reshape(1, ROWS + 1, WIDTH), weight, labels2d, NORMALIZER), hidden, weight,
            None)
    assert got[1].dtype == torch.float32
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=2e-2, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [256, ROWS])
def test_the_chunk_size_does_not_change_the_result(chunk):
    hidden, weight, bias, labels = _inputs(bias=True)
    base_loss, base = _grads(lambda: liger_token_normalized_loss(hidden, weight, labels, NORMALIZER, bias), hidden,
                             weight, bias)
    got_loss, got = _grads(lambda: liger_token_normalized_loss(hidden, weight, labels, NORMALIZER, bias,
                                                               chunk_tokens=chunk), hidden, weight, bias)
    torch.testing.assert_close(got_loss, base_loss, rtol=1e-6, atol=0)
    for a, b in zip(got, base, strict=True):
        assert _equal_fraction(a, b) > 0.97
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-6)
