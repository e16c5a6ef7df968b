"""GPU: scaled_dot_product_attention's backends at a recipe's attention shape, forward + backward.

For each backend PyTorch offers on CUDA (flash, cuDNN, memory-efficient), with grouped-query heads
passed as ``enable_gqa=True`` (what transformers does without a mask) and with the key/value heads
repeated: the median time of a forward + backward, and the relative error of the output and of the
query/key/value gradients against a float32 run of the math backend. A backend that refuses the
inputs is listed with its reason.

    python benchmarks/attention_gpu.py --out attention.json [--batch 4 --heads 16 --kv-heads 8 --seq 4096 --head-dim 128]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> torch.Tensor:
    """Causal attention; GQA through ``enable_gqa`` or by repeating the key/value heads."""
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, gqa: bool) -> list[torch.Tensor]:
    """Output and q/k/v gradients of one forward + backward."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, gqa)
    out.backward(grad)
    return [out.detach(), *[t.grad for t in leaves]]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b).norm() / b.norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    q = torch.randn(args.batch, args.heads, args.seq, args.head_dim, device=dev)
    k = torch.randn(args.batch, args.kv_heads, args.seq, args.head_dim, device=dev)
    v = torch.randn(args.batch, args.kv_heads, args.seq, args.head_dim, device=dev)
    grad = torch.randn(args.batch, args.heads, args.seq, args.head_dim, device=dev)
    with sdpa_kernel(SDPBackend.MATH):
        truth = run(q, k, v, grad, gqa=False)
    bf16 = [t.bfloat16() for t in (q, k, v, grad)]
    flops = 4 * args.batch * args.heads * args.seq * args.seq * args.head_dim / 2 * 3.5  # causal, fwd + 2.5x bwd
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                 "cudnn": torch.backends.cudnn.version(), "shape": vars(args), "rows": []}
    for name, backend in BACKENDS.items():
        for gqa in (True, False):
            row: dict[str, object] = {"backend": name, "gqa": "enable_gqa" if gqa else "repeated kv"}
            try:
                with sdpa_kernel(backend):
                    got = run(*bf16, gqa=gqa)
                    times = []
                    for i in range(args.iters + 5):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        run(*bf16, gqa=gqa)
                        end.record()
                        torch.cuda.synchronize()
                        if i >= 5:
                            times.append(start.elapsed_time(end))
                ms = statistics.median(times)
                row.update(ms=ms, tflops=flops / ms / 1e9,
                           errors={n: rel(a, b) for n, a, b in zip(("out", "dq", "dk", "dv"), got, truth, strict=True)})
            except RuntimeError as exc:
                row["refused"] = str(exc).splitlines()[0][:300]
            result["rows"].append(row)
            print(row, flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
