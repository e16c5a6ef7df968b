"""Hugging Face Trainer with the kit: scanned swaps, the report in the run, and the fused loss.

    python examples/hf_trainer.py                      # a tiny local checkpoint; Liger on a GPU, off elsewhere
    python examples/hf_trainer.py --model /ckpt --loss fused --liger on
    torchrun --nproc-per-node 2 examples/hf_trainer.py --loss fused   # average_tokens_across_devices

The model comes from ``ligerkit.integrations.load_model`` (apply, build, scan; the kit stays applied
until the ``finally`` below). ``LigerKitCallback`` refuses ``use_liger_kernel=True`` and writes the
report to ``<output_dir>/ligerkit.json``. ``--loss fused`` trains with ``FusedLossTrainer``:
Trainer's own loss, with the logits never built.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from _common import StepClock, checkpoint, close_distributed, collate, samples, summary, write
from ligerkit.integrations import FusedLossTrainer, LigerKitCallback, load_model


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The example's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a local checkpoint folder (default: a tiny random Qwen3 written to a temp folder)")
    p.add_argument("--liger", choices=("on", "off", "auto"), default="auto", help="auto: on where a GPU is")
    p.add_argument("--loss", choices=("model", "fused"), default="model", help="the model's own loss, or the fused one")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2, help="per device")
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="default: bfloat16 on a GPU")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--json", default=None, help="also write the result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train, and return the per-step losses, the speed and the kit's scan.

    ``callbacks`` are more ``TrainerCallback``s for the trainer (a benchmark's profiler)."""
    a = parse(argv)
    gpu = torch.cuda.is_available()
    liger = a.liger == "on" or (a.liger == "auto" and gpu)
    dtype = getattr(torch, a.dtype or ("bfloat16" if gpu else "float32"))
    path = a.model or checkpoint(tempfile.mkdtemp(prefix="tiny_qwen3_"))
    if liger:
        model = load_model(path, dtype=dtype)
    else:
        # Liger off stays eager: no hub kernels (transformers 5.25 turns them on by default)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True, use_kernels=False)
    args = TrainingArguments(
        output_dir=a.output_dir or tempfile.mkdtemp(prefix="hf_trainer_"), max_steps=a.steps,
        per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.grad_accum, learning_rate=a.lr,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=not gpu, seed=0, bf16=dtype == torch.bfloat16,
        average_tokens_across_devices=True, dataloader_drop_last=True,
    )
    clock = StepClock()
    trainer_class = FusedLossTrainer if a.loss == "fused" else Trainer
    trainer = trainer_class(model=model, args=args, train_dataset=samples(256, a.seq_len), data_collator=collate,
                            callbacks=[clock, *(callbacks or [])] + ([LigerKitCallback()] if liger else []))
    try:
        trainer.train()
    finally:
        if liger:
            model.ligerkit.kit.revert()  # training is over: the swaps go back
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    tokens = a.batch * a.grad_accum * a.seq_len * args.world_size
    extra = {"liger": liger, "loss_path": a.loss, "swaps": len(model.ligerkit.report.patched) if liger else 0,
             "wrappers": list(model.ligerkit.scan.wrappers) if liger else [],
             "grad_norms": [row["grad_norm"] for row in trainer.state.log_history if "grad_norm" in row],
             "params_checksum": float(sum(p.detach().float().sum() for p in model.parameters()))}
    return summary(losses, clock.seconds, tokens, extra)


if __name__ == "__main__":
    result = main()
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports
        write(result, parse(None).json)
    close_distributed()
