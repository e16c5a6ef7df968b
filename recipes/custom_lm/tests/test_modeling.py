"""CPU tests for recipes/custom_lm/model/modeling_custom_lm.py.

Liger's Triton kernels do not run on CPU, so the Liger swap is checked structurally on the
meta device (classes and state-dict layout), never with a forward pass.
"""

from __future__ import annotations


import pytest
import torch

from ligerkit.loss import token_loss_sum, valid_tokens
from recipes.custom_lm.model import modeling_custom_lm as mcl


TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8)


def tiny_config(**overrides) -> mcl.CustomLMConfig:
    return mcl.CustomLMConfig(**{**TINY, **overrides})


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def test_forward_backward_cpu():
    torch.manual_seed(0)
    model = mcl.CustomLMForCausalLM(tiny_config())
    ids = torch.randint(0, TINY["vocab_size"], (2, 7))
    logits = model(ids, labels=ids)  # extra keyword arguments are ignored
    assert logits.shape == (2, 7, TINY["vocab_size"]) and torch.isfinite(logits).all()
    (token_loss_sum(logits, ids) / valid_tokens(ids)).backward()
    bad = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not bad, bad


def test_tied_embeddings_and_init():
    model = mcl.CustomLMForCausalLM(tiny_config())
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model._no_split_modules == ["CustomDecoderLayer"]
    for name, module in model.named_modules():
        if isinstance(module, mcl.CustomRMSNorm):
            assert torch.count_nonzero(module.weight) == 0, name
    untied = mcl.CustomLMForCausalLM(tiny_config(tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_reference(dtype):
    torch.manual_seed(0)
    norm = mcl.CustomRMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 5, 16).to(dtype)
    x32 = x.float()
    ref = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + norm.weight.float())
    out = norm(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref.to(dtype), rtol=0, atol=0)


def test_rope_matches_complex_rotation():
    torch.manual_seed(0)
    bsz, heads, seq, dim = 2, 3, 5, 8
    q, k = torch.randn(bsz, heads, seq, dim), torch.randn(bsz, 1, seq, dim)
    rope = mcl.CustomRotaryEmbedding(dim, theta=10000.0)
    pos = torch.arange(seq).expand(bsz, seq)
    cos, sin = rope(q, pos)
    assert cos.shape == sin.shape == (bsz, seq, dim)
    q_out, k_out = mcl.apply_rotary_pos_emb(q, k, cos, sin)

    def ref(x: torch.Tensor) -> torch.Tensor:  # rotate pairs (i, i + d/2) by pos * inv_freq_i
        half = dim // 2
        z = torch.complex(x[..., :half], x[..., half:])
        angle = pos[:, None, :, None].float() * rope.inv_freq
        z = z * torch.polar(torch.ones_like(angle), angle)
        return torch.cat((z.real, z.imag), dim=-1)

    torch.testing.assert_close(q_out, ref(q), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_out, ref(k), rtol=1e-5, atol=1e-5)


def test_padding_mask_matches_unpadded():
    torch.manual_seed(0)
    model = mcl.CustomLMForCausalLM(tiny_config()).eval()
    ids = torch.randint(0, TINY["vocab_size"], (2, 6))
    short = 4  # the second row is right-padded after 4 tokens
    mask = (torch.arange(6)[None, :] < torch.tensor([[6], [short]])).long()
    with torch.no_grad():
        padded, full = model(ids, attention_mask=mask), model(ids)
        torch.testing.assert_close(model(ids, attention_mask=torch.ones_like(ids)), full)
        torch.testing.assert_close(padded[1, :short], model(ids[1:, :short])[0], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(padded).all()


def test_rotary_function_is_resolved_at_call_time(monkeypatch):
    config = tiny_config()
    model = mcl.CustomLMForCausalLM(config)
    seen: list[tuple[int, ...]] = []
    real = mcl.apply_rotary_pos_emb

    def recording(q, k, cos, sin, *args, **kwargs):
        seen.append(tuple(q.shape))
        return real(q, k, cos, sin, *args, **kwargs)

    monkeypatch.setattr(mcl, "apply_rotary_pos_emb", recording)  # after construction: must still take effect
    model(torch.randint(0, TINY["vocab_size"], (1, 4)))
    assert len(seen) == config.num_hidden_layers


def test_liger_swap_on_meta_device():
    from liger_kernel.transformers.geglu import LigerGEGLUMLP
    from liger_kernel.transformers.rms_norm import LigerRMSNormForGemma2
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    cfg = tiny_config()
    with torch.device("meta"):
        reference = mcl.CustomLMForCausalLM(cfg)

    originals = (mcl.CustomRMSNorm, mcl.CustomMLP, mcl.apply_rotary_pos_emb)
    try:
        mcl.CustomRMSNorm = LigerRMSNormForGemma2
        mcl.CustomMLP = LigerGEGLUMLP
        mcl.apply_rotary_pos_emb = liger_rotary_pos_emb
        with torch.device("meta"):
            patched = mcl.CustomLMForCausalLM(cfg)
        assert mcl.apply_rotary_pos_emb is liger_rotary_pos_emb
    finally:
        mcl.CustomRMSNorm, mcl.CustomMLP, mcl.apply_rotary_pos_emb = originals

    assert mcl.CustomRMSNorm is originals[0] and mcl.apply_rotary_pos_emb is originals[2]
    for layer in patched.model.layers:
        assert type(layer.mlp) is LigerGEGLUMLP
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            assert type(getattr(layer, norm)) is LigerRMSNormForGemma2, norm
            assert getattr(layer, norm).variance_epsilon == cfg.rms_norm_eps
    assert type(patched.model.norm) is LigerRMSNormForGemma2
    assert not any(isinstance(m, (mcl.CustomRMSNorm, mcl.CustomMLP)) for m in patched.modules())
    assert all(p.is_meta for p in patched.parameters())
    assert _shapes(patched) == _shapes(reference)
    assert list(patched.state_dict()) == list(reference.state_dict())
