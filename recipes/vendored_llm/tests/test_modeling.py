"""CPU tests for recipes/vendored_llm/model/modeling_vendored_llama.py.

Liger's Triton kernels do not run on CPU, so the Liger swap is checked structurally on the
meta device (classes and state-dict layout), never with a forward pass. Numerical parity is
checked against transformers' own LlamaForCausalLM.
"""

from __future__ import annotations


import torch

from recipes.vendored_llm.model import modeling_vendored_llama as mvl


def tiny_config(**overrides) -> mvl.VendoredLlamaConfig:
    kwargs = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
    }
    kwargs.update(overrides)
    return mvl.VendoredLlamaConfig(**kwargs)


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_forward_backward_cpu():
    torch.manual_seed(0)
    cfg = tiny_config()
    model = mvl.VendoredLlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 7))
    logits = model(ids, labels=ids)  # extra kwargs are ignored
    assert logits.shape == (2, 7, cfg.vocab_size)
    assert torch.isfinite(logits).all()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model._no_split_modules == ["LlamaDecoderLayer"]
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight


def test_rmsnorm_matches_reference():
    torch.manual_seed(0)
    norm = mvl.LlamaRMSNorm(16, eps=1e-5)
    assert torch.equal(norm.weight, torch.ones(16)) and norm.variance_epsilon == 1e-5
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 5, 16)
    ref = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(norm(x), ref, rtol=0, atol=0)


def test_padding_mask_matches_unpadded():
    torch.manual_seed(0)
    model = mvl.VendoredLlamaForCausalLM(tiny_config()).eval()
    ids = torch.randint(0, 64, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = model(ids, attention_mask=mask)
        torch.testing.assert_close(model(ids, attention_mask=torch.ones_like(ids)), model(ids))
        torch.testing.assert_close(padded[1, :4], model(ids[1:, :4])[0], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(padded).all()


def test_rotary_function_is_resolved_at_call_time():
    cfg = tiny_config()
    model = mvl.VendoredLlamaForCausalLM(cfg)
    original, calls = mvl.apply_rotary_pos_emb, []

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    mvl.apply_rotary_pos_emb = spy  # rebound after construction: must still take effect
    try:
        model(torch.randint(0, cfg.vocab_size, (1, 4)))
    finally:
        mvl.apply_rotary_pos_emb = original
    assert len(calls) == cfg.num_hidden_layers


def test_matches_transformers_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = tiny_config(num_hidden_layers=3, rope_theta=500000.0, rms_norm_eps=1e-5)
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        hidden_act=cfg.hidden_act,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings,
        attention_bias=False,
        mlp_bias=False,
        attn_implementation="eager",
    )
    hf = LlamaForCausalLM(hf_cfg).float().eval()
    ours = mvl.VendoredLlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger, non-trivial weights so any mismatch shows well above atol
        for name, p in hf.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith("norm.weight") else p.normal_(0.0, 0.15)
    # Parameter names mirror transformers' Llama, so no renaming is needed.
    missing, unexpected = ours.load_state_dict(hf.state_dict(), strict=True)
    assert not missing and not unexpected

    ids = torch.randint(0, cfg.vocab_size, (2, 11))
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=None).logits
        got = ours(ids)
    assert expected.abs().max() > 1.0  # logits are not trivially tiny
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_liger_swap_on_meta_device():
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    cfg = tiny_config()
    with torch.device("meta"):
        reference = mvl.VendoredLlamaForCausalLM(cfg)

    originals = (mvl.LlamaRMSNorm, mvl.LlamaMLP, mvl.apply_rotary_pos_emb)
    try:
        mvl.LlamaRMSNorm = LigerRMSNorm
        mvl.LlamaMLP = LigerSwiGLUMLP
        mvl.apply_rotary_pos_emb = liger_rotary_pos_emb
        with torch.device("meta"):
            patched = mvl.VendoredLlamaForCausalLM(cfg)
        assert mvl.apply_rotary_pos_emb is liger_rotary_pos_emb
    finally:
        mvl.LlamaRMSNorm, mvl.LlamaMLP, mvl.apply_rotary_pos_emb = originals

    assert mvl.LlamaRMSNorm is originals[0] and mvl.apply_rotary_pos_emb is originals[2]
    for layer in patched.model.layers:
        assert type(layer.mlp) is LigerSwiGLUMLP
        assert type(layer.input_layernorm) is LigerRMSNorm
        assert type(layer.post_attention_layernorm) is LigerRMSNorm
        assert layer.input_layernorm.variance_epsilon == cfg.rms_norm_eps
    assert type(patched.model.norm) is LigerRMSNorm
    assert not any(isinstance(m, (mvl.LlamaRMSNorm, mvl.LlamaMLP)) for m in patched.modules())
    assert all(p.is_meta for p in patched.parameters())
    assert _shapes(patched) == _shapes(reference)
    assert list(patched.state_dict()) == list(reference.state_dict())


def test_the_official_llama_route_cannot_reach_the_vendored_copy():
    from pathlib import Path

    from ligerkit import LigerKernelKit
    from ligerkit.train.config import load_recipe_config
    from ligerkit.train.recipe.loading import load_engine

    recipe = Path(__file__).resolve().parents[1]
    engine = load_engine(recipe / "configs" / "cpu.yaml")
    kit = LigerKernelKit()
    try:
        kit.apply(model_family="llama")
        model = engine.build_model(torch.device("meta"))
        scan = kit.scan(model)
    finally:
        kit.revert()
    assert scan.counts and not any(scan.counts.values()), "the official llama swaps must not show up"
    assert len(scan.unused) == 2  # LlamaRMSNorm and LlamaMLP of transformers, never instantiated here
    assert load_recipe_config(recipe / "configs" / "gpu.yaml").model.source == "custom"
