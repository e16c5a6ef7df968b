"""The fused loss equals the recipe's standard token-normalized loss, and refuses
models whose logits it cannot reproduce."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ligerkit.train.config import ConfigError, load_recipe_config
from ligerkit.train.data.batches import IGNORE_INDEX
from ligerkit.train.step import StepModule
from ligerkit.train import Trainer, set_up_model
from ligerkit.train.recipe.loading import load_engine
from ligerkit.loss import FusedLossRefusedError, fused_linear_token_loss, output_head
from ligerkit.loss.wiring import check_head_reproduces_logits
from ligerkit.loss.liger_chunks import CHUNK_TOKENS
from helpers import GradCapture

ROOT = Path(__file__).resolve().parents[1]
QWEN3_CPU = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"


def standard(hidden, weight, labels, count, bias=None, softcap=None, smoothing=0.0, per_token=False):
    logits = F.linear(hidden, weight, bias).float()
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                             ignore_index=IGNORE_INDEX, label_smoothing=smoothing, reduction="none")
    return (losses / count).reshape(labels.shape[0], -1) if per_token else losses.sum() / count


def inputs(seed=0, batch=3, seq=11, hidden=16, vocab=37, ignored=0.3):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, seq, hidden, generator=g, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=g, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, seq), generator=g)
    labels[torch.rand(batch, seq, generator=g) < ignored] = IGNORE_INDEX
    return h, w, labels


def grads(fn, *tensors):
    loss = fn()
    loss.sum().backward() if loss.dim() else loss.backward()
    out = [loss.detach()] + [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out


@pytest.mark.parametrize("options", [
    {}, {"softcap": 30.0}, {"smoothing": 0.1}, {"bias": True}, {"per_token": True},
])
def test_fused_path_equals_the_standard_loss_and_gradients(options):
    h, w, labels = inputs()
    b = torch.randn(w.shape[0], requires_grad=True) if options.get("bias") else None
    count = int((labels[:, 1:] != IGNORE_INDEX).sum()) + 5  # a global count larger than this micro-batch's
    kw = dict(softcap=options.get("softcap"), per_token=options.get("per_token", False))
    tensors = [t for t in (h, w, b) if t is not None]
    want = grads(lambda: standard(h, w, labels, count, b, smoothing=options.get("smoothing", 0.0), **kw), *tensors)
    got = grads(lambda: fused_linear_token_loss(h, w, labels, count, b, label_smoothing=options.get("smoothing", 0.0),
                                                chunk_tokens=7, **kw), *tensors)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def test_all_ignored_micro_batch_gives_zero_loss_and_zero_grads():
    h, w, labels = inputs(ignored=1.1)
    loss = fused_linear_token_loss(h, w, labels, 0)
    loss.backward()
    assert loss.item() == 0.0 and not torch.isnan(h.grad).any() and h.grad.abs().sum() == 0


def test_chunking_never_keeps_full_logits_for_backward():
    h, w, labels = inputs(batch=4, seq=65, vocab=300)
    full = h.shape[0] * (h.shape[1] - 1) * w.shape[0]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        fused_linear_token_loss(h, w, labels, 10, chunk_tokens=32)
    assert saved and max(saved) < full / 4


@pytest.mark.parametrize("tie", [True, False])
def test_the_fused_loss_equals_the_standard_one_across_uneven_micro_batches(tie):
    """Same batches (2 micro-batches, very different valid counts), same weights: same loss and grads."""
    results = {}
    for loss in ("standard", "fused"):
        engine = load_engine(QWEN3_CPU, [f"train.loss.path={loss}", f"model.config.tie_word_embeddings={tie}"])
        model = set_up_model(engine, torch.device("cpu"))
        batches = Trainer(engine).micro_batches(step=0, vocab_size=320)
        batches[1]["labels"][:, :50] = IGNORE_INDEX
        capture = GradCapture(model)
        value, _, _ = Trainer(engine).train_step(StepModule(engine, model, engine.loss), capture, batches, torch.device("cpu"))
        results[loss] = (value, capture.grads)
    assert results["fused"][0] == pytest.approx(results["standard"][0], rel=1e-6)
    for name, grad in results["standard"][1].items():
        torch.testing.assert_close(results["fused"][1][name], grad, rtol=1e-4, atol=1e-6)


def test_final_logit_softcapping_is_reproduced_exactly():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    model = Gemma2ForCausalLM(Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=64,
                                           final_logit_softcapping=5.0, attn_implementation="eager"))
    ids = torch.randint(0, 64, (2, 9))
    head = output_head(model)
    assert head.softcap == 5.0
    logits = model(input_ids=ids).logits
    hidden = model.model(input_ids=ids).last_hidden_state
    check_head_reproduces_logits(logits, hidden, head)
    count = 2 * 8
    want = F.cross_entropy(logits[:, :-1].reshape(-1, 64).float(), ids[:, 1:].reshape(-1), reduction="sum") / count
    got = fused_linear_token_loss(hidden, head.weight, ids, count, softcap=head.softcap)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config_name, attr", [("CohereConfig", "logit_scale"), ("GraniteConfig", "logits_scaling")])
def test_scaled_logits_are_refused(config_name, attr):
    import transformers

    config = getattr(transformers, config_name)(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                                **{attr: 4.0})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(FusedLossRefusedError, match=attr):
        output_head(model)


def test_hidden_transformations_are_caught_by_the_logit_check():
    h, w, _ = inputs()
    head = output_head_like(w)
    logits = 2.0 * F.linear(h, w)  # a model that scales its logits without saying so in its config
    with pytest.raises(FusedLossRefusedError, match="not its output head"):
        check_head_reproduces_logits(logits, h, head)


def output_head_like(weight):
    from ligerkit.loss.wiring import OutputHead

    return OutputHead(weight, None, None)


def test_non_linear_head_is_refused():
    class Odd(torch.nn.Module):
        def get_output_embeddings(self):
            return torch.nn.Sequential(torch.nn.Linear(4, 4))

    with pytest.raises(FusedLossRefusedError, match="not an nn.Linear"):
        output_head(Odd())


def test_fused_with_liger_loss_kernels_left_on_is_rejected():
    with pytest.raises(ConfigError, match="no double patching"):
        load_recipe_config(QWEN3_CPU, ["train.loss.path=fused", "model.liger_kernel.excluded_modules=[]"])
    assert load_recipe_config(QWEN3_CPU, ["train.loss.path=standard"]).train.loss.path == "standard"


@pytest.mark.parametrize("recipe", ["qwen3", "qwen3_vl", "composite_vlm", "custom_lm", "vendored_llm", "diffllama"])
def test_every_recipe_trains_the_same_on_both_loss_paths(recipe):
    losses = {}
    for loss in ("standard", "fused"):
        engine = load_engine(ROOT / "recipes" / recipe / "configs" / "cpu.yaml",
                             ["train.run.progress=false", "train.steps=2", f"train.loss.path={loss}"])
        losses[loss] = [s.loss for s in Trainer(engine).train(torch.device("cpu")).steps]
    assert losses["fused"] == pytest.approx(losses["standard"], rel=1e-5)


def test_mixed_precision_trains_and_both_loss_paths_agree_under_autocast():
    """float32 master weights + bfloat16 autocast: the fused and standard losses see the same math."""
    losses = {}
    for name, sets in (("off", ["train.autocast_bf16=true", "train.loss.path=standard"]),
                       ("fused", ["train.autocast_bf16=true", "train.loss.path=fused"]),
                       ("fp32", ["train.autocast_bf16=false"])):
        engine = load_engine(QWEN3_CPU, ["train.run.progress=false", "train.steps=6", "model.dtype=float32", *sets])
        losses[name] = [s.loss for s in Trainer(engine).train(torch.device("cpu")).steps]
    assert losses["off"][-1] < losses["off"][0]
    assert losses["fused"] == pytest.approx(losses["off"], abs=1e-4)
    assert losses["off"] != losses["fp32"], "autocast must change the arithmetic"


@pytest.mark.parametrize("rows", [128, 512, 1024, 2048, 4096])
def test_liger_chunk_request_gives_that_many_rows_under_liger_split_rule(rows):
    """Liger 0.8.5 splits BT rows into ceil(V / (c*H)) parts, each rounded up to a power of two."""
    from ligerkit.loss.fused import liger_chunk_mem_const

    bt, h, v = 4 * 4095, 1024, 151936
    c = liger_chunk_mem_const(bt, h, v, rows)
    parts = -(-v // (c * h))
    chunk = min(1 << (-(-bt // parts) - 1).bit_length(), bt)
    assert chunk == rows
    assert liger_chunk_mem_const(bt, h, v, 1) == 1  # never below Liger's own default


def test_fused_loss_rejects_a_non_positive_chunk():
    h, w, labels = torch.randn(1, 4, 8), torch.randn(16, 8), torch.randint(0, 16, (1, 4))
    with pytest.raises(ValueError, match="chunk_tokens"):
        fused_linear_token_loss(h, w, labels, 3, chunk_tokens=0)


def test_a_fractional_token_count_is_used_as_given_and_a_negative_one_refused():
    torch.manual_seed(0)
    h, w, labels = torch.randn(2, 5, 8), torch.randn(16, 8), torch.randint(0, 16, (2, 5))
    whole = fused_linear_token_loss(h, w, labels, 1.0)
    torch.testing.assert_close(fused_linear_token_loss(h, w, labels, 0.5), 2 * whole)
    with pytest.raises(ValueError, match="num_valid_tokens"):
        fused_linear_token_loss(h, w, labels, -1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_weight_gradient_is_rounded_down_inside_its_own_storage(dtype, monkeypatch):
    import ligerkit.loss.liger_chunks as chunks

    monkeypatch.setattr(chunks, "_DOWNCAST_BLOCK", 999)  # many blocks, the first overlapping its source
    acc = torch.randn(300, 77) * 5
    want = acc.to(dtype)
    got = chunks._downcast_in_place(acc, dtype)
    assert got.dtype == dtype and got.shape == acc.shape
    assert got.untyped_storage().data_ptr() == acc.untyped_storage().data_ptr()
    assert torch.equal(got, want)
    assert chunks._downcast_in_place(acc, torch.float32) is acc


def test_the_chunk_setting_needs_the_fused_path():
    with pytest.raises(ConfigError, match="chunk_tokens"):
        load_recipe_config(QWEN3_CPU, ["train.loss.chunk_tokens=64"])
    with pytest.raises(ConfigError, match="chunk_tokens"):
        load_recipe_config(QWEN3_CPU, ["train.loss.path=fused", "train.loss.chunk_tokens=0"])


def test_the_chunk_setting_reaches_the_loss_and_the_report(monkeypatch):
    import ligerkit.loss.choice

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["chunk_tokens"])
        return fused_linear_token_loss(*args, **kwargs)

    monkeypatch.setattr(ligerkit.loss.choice, "fused_linear_token_loss", spy)
    sets = ["train.run.progress=false", "train.steps=2", "train.loss.path=fused"]
    engine = load_engine(QWEN3_CPU, [*sets, "train.loss.chunk_tokens=48"])
    chunked = [s.loss for s in Trainer(engine).train(torch.device("cpu")).steps]
    assert "48 rows of logits at a time" in engine.loss_path()
    assert seen and set(seen) == {48}
    default = load_engine(QWEN3_CPU, sets)
    assert f"{CHUNK_TOKENS} rows" in default.loss_path()
    assert [s.loss for s in Trainer(default).train(torch.device("cpu")).steps] == pytest.approx(chunked, rel=1e-6)


def test_the_gpu_loop_hands_its_gradients_out_once_scaled_by_the_caller():
    """The backward of the GPU loop (its forward needs CUDA): scale in place, refuse a second call."""
    from types import SimpleNamespace

    from ligerkit.loss.liger_chunks import _TokenNormalizedFLCE

    gx, gw = torch.ones(3, 4, dtype=torch.bfloat16), torch.full((5, 4), 2.0, dtype=torch.bfloat16)
    ctx = SimpleNamespace(grad_x=gx, grad_w=gw, grad_b=None)
    out = _TokenNormalizedFLCE.backward(ctx, torch.tensor(0.5))
    assert torch.equal(out[0], torch.full((3, 4), 0.5, dtype=torch.bfloat16))
    assert torch.equal(out[1], torch.ones(5, 4, dtype=torch.bfloat16))
    assert out[2] is None and len(out) == 9
    with pytest.raises(RuntimeError, match="once"):
        _TokenNormalizedFLCE.backward(ctx, torch.tensor(1.0))


def test_the_head_check_runs_on_a_prefix_of_a_text_batch_and_compares_in_row_chunks():
    import torch

    from ligerkit.loss.wiring import FusedLossRefusedError, OutputHead, check_head_reproduces_logits, head_check_batch

    text = {"input_ids": torch.zeros(2, 4096, dtype=torch.long), "labels": torch.zeros(2, 4096, dtype=torch.long),
            "attention_mask": torch.ones(2, 4096, dtype=torch.long)}
    cut = head_check_batch(text, tokens=512)
    assert all(v.shape == (2, 512) for v in cut.values())
    images = {**text, "pixel_values": torch.zeros(2, 3, 8, 8)}
    assert head_check_batch(images, tokens=512) is images  # image positions may need every token
    short = {k: v[:, :100] for k, v in text.items()}
    assert head_check_batch(short, tokens=512) is short

    torch.manual_seed(0)
    head = OutputHead(torch.randn(7, 5), None, None)
    hidden = torch.randn(1, 50, 5)
    logits = hidden @ head.weight.T
    check_head_reproduces_logits(logits, hidden, head, rows=8)  # equal in every chunk
    logits[0, 45, 3] += 1.0  # one position, in the last chunk only
    with pytest.raises(FusedLossRefusedError, match="max difference 1"):
        check_head_reproduces_logits(logits, hidden, head, rows=8)
