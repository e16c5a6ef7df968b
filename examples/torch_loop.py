"""A plain PyTorch loop with the kit and the token-normalized loss (fused or standard).

    python examples/torch_loop.py                      # Liger on a GPU, off elsewhere; fused loss
    python examples/torch_loop.py --loss standard      # the model's full logits, the same loss

Gradient accumulation divides every micro-batch's summed cross entropy by the valid labels of the
whole optimizer step, so padding and uneven micro-batches weigh every token once.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from _common import checkpoint, collate, samples, summary, write
from ligerkit.integrations import load_model, token_loss
from ligerkit.loss import valid_tokens


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The example's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a local checkpoint folder (default: a tiny random Qwen3 written to a temp folder)")
    p.add_argument("--liger", choices=("on", "off", "auto"), default="auto", help="auto: on where a GPU is")
    p.add_argument("--loss", choices=("fused", "standard"), default="fused")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--json", default=None, help="also write the result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train; return the per-step losses and the speed."""
    a = parse(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    liger = a.liger == "on" or (a.liger == "auto" and device.type == "cuda")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    path = a.model or checkpoint(tempfile.mkdtemp(prefix="tiny_qwen3_"))
    if liger:
        model = load_model(path, dtype=dtype, device=device)
    else:
        # Liger off stays eager: no hub kernels (transformers 5.25 turns them on by default)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True,
                                                     use_kernels=False).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    data = samples(a.steps * a.grad_accum * a.batch, a.seq_len)
    losses, seconds = [], []
    try:
        for step in range(a.steps):
            began = time.perf_counter()
            first = step * a.grad_accum * a.batch
            micro = [collate(data[first + i * a.batch:first + (i + 1) * a.batch]) for i in range(a.grad_accum)]
            count = sum(valid_tokens(b["labels"]) for b in micro)  # the whole optimizer step's tokens
            total = 0.0
            for batch in micro:
                loss = token_loss(model, {k: v.to(device) for k, v in batch.items()}, count, path=a.loss)
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            losses.append(total)
            seconds.append(time.perf_counter() - began)
    finally:
        if liger:
            model.ligerkit.kit.revert()  # training is over: the swaps go back
    checksum = float(sum(p.detach().float().sum() for p in model.parameters()))
    return summary(losses, seconds, a.batch * a.grad_accum * a.seq_len,
                   {"liger": liger, "loss_path": a.loss, "params_checksum": checksum})


if __name__ == "__main__":
    write(main(), parse(None).json)
