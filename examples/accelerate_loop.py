"""An Accelerate loop with the kit and the fused loss, on one process or many.

    python examples/accelerate_loop.py
    accelerate launch --num_processes 2 examples/accelerate_loop.py     # 2 GPUs
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_loop.py   # 2 gloo processes on a CPU
    torchrun --nproc-per-node 2 examples/accelerate_loop.py

On a machine without a GPU, ``accelerate launch --num_processes N`` alone starts one process (its CPU
launcher expects ``mpirun``); ``--multi_gpu`` picks accelerate's torchrun launcher, which starts N
processes that talk over gloo. The script refuses the single process rather than report it as N.

Each process counts its valid labels; ``accelerator.reduce`` sums them over processes, and since
DDP averages gradients, every process divides its sum of cross entropy by that total over the
number of processes: the loss of the whole global batch, each token weighed once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
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


class LaunchError(RuntimeError):
    """The launcher started fewer processes than it was asked for."""


def check_launch(accelerator: Accelerator) -> None:
    """Refuse a lone process that ``accelerate launch --num_processes N`` (N > 1) started on a CPU.

    Accelerate's CPU launcher sets ``MASTER_ADDR`` for N > 1 but starts one process (it expects
    ``mpirun``), which would train alone and report one process.
    """
    asked_for_more = "ACCELERATE_USE_CPU" in os.environ and "MASTER_ADDR" in os.environ
    if accelerator.num_processes == 1 and asked_for_more and "WORLD_SIZE" not in os.environ:
        raise LaunchError(
            "accelerate launch started 1 process on a machine without a GPU: add --multi_gpu "
            "(`accelerate launch --multi_gpu --num_processes 2 examples/accelerate_loop.py` starts 2 gloo "
            "processes on the CPU), or use `torchrun --nproc-per-node 2 examples/accelerate_loop.py`; "
            "for one process, leave out --num_processes (and unset MASTER_ADDR)")


def shared_checkpoint(accelerator: Accelerator) -> str:
    """A tiny random Qwen3 that the main process writes to a temporary folder and every process loads.

    transformers' ``save_pretrained`` writes weights on rank 0 only once a process group exists, so
    a folder per rank would hold only the tokenizer on the others: the main process writes it, the
    others wait for it at a barrier.
    """
    folder = [tempfile.mkdtemp(prefix="tiny_qwen3_") if accelerator.is_main_process else None]
    folder = broadcast_object_list(folder)
    if accelerator.is_main_process:
        checkpoint(folder[0])
    accelerator.wait_for_everyone()
    return str(folder[0])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train; return the per-step losses of the global batch."""
    a = parse(argv)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    check_launch(accelerator)
    gpu = accelerator.device.type == "cuda"
    liger = a.liger == "on" or (a.liger == "auto" and gpu)
    dtype = torch.bfloat16 if gpu else torch.float32
    path = a.model or shared_checkpoint(accelerator)
    if liger:
        model = load_model(path, dtype=dtype)
    else:
        # Liger off stays eager: no hub kernels (transformers 5.25 turns them on by default)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True, use_kernels=False)
    if not a.model:
        accelerator.wait_for_everyone()  # every process has loaded it: the temporary folder goes
        if accelerator.is_main_process:
            shutil.rmtree(path, ignore_errors=True)
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
