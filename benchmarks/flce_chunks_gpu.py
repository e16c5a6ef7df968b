"""GPU: the loss head alone at the Qwen3-0.6B shape: standard loss vs Liger FLCE at several chunk sizes.

One micro-batch of the ``qwen3`` recipe's GPU config (4 x 4096 tokens, hidden 1024, vocab 151936,
bf16): forward + backward of the token loss from the final hidden states, timed (median of
``--iters`` after ``--warmup``) with its peak memory above the inputs. ``standard`` is the engine's
standard loss (full logits, float32 cross entropy); ``fused@N`` is ``ligerkit.loss`` asking Liger for
about N rows per chunk (``128`` is Liger's own default at this shape). Gradients are compared with the
standard loss's.

    python benchmarks/flce_chunks_gpu.py --out flce_chunks.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from ligerkit.loss import fused_linear_token_loss


def standard(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, count: float) -> torch.Tensor:
    """The engine's standard loss: full logits, float32 cross entropy, summed, divided by ``count``."""
    logits = F.linear(hidden, weight)
    flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    return F.cross_entropy(flat, labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum") / count


def measure(fn, hidden, weight, labels, count, warmup: int, iters: int) -> dict:
    """Median forward+backward time (ms), peak memory above the inputs (GiB), and the gradients."""
    times = []
    for i in range(warmup + iters):
        hidden.grad = weight.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = fn(hidden, weight, labels, count)
        loss.backward()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    return {"ms": statistics.median(times), "peak_gib_above_inputs": peak, "loss": loss.item(),
            "grads": (hidden.grad.float().clone(), weight.grad.float().clone())}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--chunks", default="128,512,1024,2048,4096,8192")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    hidden = (torch.randn(args.batch, args.seq, args.hidden, device=dev) * 1.0).bfloat16().requires_grad_()
    weight = (torch.randn(args.vocab, args.hidden, device=dev) * 0.02).bfloat16().requires_grad_()
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    labels[0, -300:] = -100
    count = float((labels[:, 1:] != -100).sum())
    arms = {"standard": standard}
    for n in (int(c) for c in args.chunks.split(",")):
        arms[f"fused@{n}"] = partial(fused_linear_token_loss, chunk_tokens=n)
    rows, ref = {}, None
    for name, fn in arms.items():
        r = measure(fn, hidden, weight, labels, count, args.warmup, args.iters)
        grads = r.pop("grads")
        if ref is None:
            ref = grads
        r["max_grad_diff_vs_standard"] = max(float((a - b).abs().max()) for a, b in zip(grads, ref, strict=True))
        rows[name] = r
        print(f"| {name} | {r['ms']:.1f} ms | {r['peak_gib_above_inputs']:.2f} GiB | loss {r['loss']:.6f} | "
              f"grad diff {r['max_grad_diff_vs_standard']:.2e} |", flush=True)
    Path(args.out).write_text(json.dumps({"shape": vars(args), "arms": rows}, indent=2))


if __name__ == "__main__":
    main()
