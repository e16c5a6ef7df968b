"""An Accelerate loop with the kit and the fused token loss, on one process or many.

    python examples/accelerate_loop.py
    accelerate launch --num_processes 2 examples/accelerate_loop.py     # or torchrun --nproc-per-node 2

Each process counts its valid labels; ``accelerator.reduce`` sums them over processes, and since
DDP averages gradients, every process divides its sum of cross entropy by that total over the
number of processes: the loss of the whole global batch, each token weighed once.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

from _common import checkpoint, close_distributed, collate, samples, write
from ligerkit.integrations import load_model, token_loss
from ligerkit.loss import valid_tokens


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The example's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a local checkpoint folder (default: a tiny random Qwen3 written to a temp folder)")
    p.add_argument("--liger", choices=("on", "off", "auto"), default="auto", help="auto: on where a GPU is")
    p.add_argument("--loss", choices=("fused", "standard"), default="fused")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2, help="per process")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--json", default=None, help="also write the result here (main process)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train; return the per-step losses of the global batch."""
    a = parse(argv)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    gpu = accelerator.device.type == "cuda"
    liger = a.liger == "on" or (a.liger == "auto" and gpu)
    dtype = torch.bfloat16 if gpu else torch.float32
    path = a.model or checkpoint(tempfile.mkdtemp(prefix="tiny_qwen3_"))
    if liger:
        model = load_model(path, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    data = samples(a.steps * a.batch * accelerator.num_processes, a.seq_len)
    losses = []
    try:
        for step in range(a.steps):
            first = (step * accelerator.num_processes + accelerator.process_index) * a.batch
            batch = {k: v.to(accelerator.device) for k, v in collate(data[first:first + a.batch]).items()}
            count = accelerator.reduce(torch.tensor(valid_tokens(batch["labels"]), device=accelerator.device), "sum")
            loss = token_loss(model, batch, float(count) / accelerator.num_processes, path=a.loss)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(accelerator.reduce(loss.detach(), "mean")))
    finally:
        if liger:
            accelerator.unwrap_model(model).ligerkit.kit.revert()  # training is over: the swaps go back
    return {"losses": losses, "liger": liger, "loss_path": a.loss, "processes": accelerator.num_processes}


if __name__ == "__main__":
    result = main()
    if Accelerator().is_main_process:
        write(result, parse(None).json)
    close_distributed()
