"""TRL's SFTTrainer with the kit: scanned swaps, TRL's own LM head or ligerkit's fused loss.

    python examples/trl_sft.py                         # TRL's loss; Liger on a GPU, off elsewhere
    python examples/trl_sft.py --loss fused            # LigerKitSFTTrainer: ligerkit's fused loss

SFTTrainer rebinds the model's forward for its own chunked LM head; the kit's guard reports that
wrapper in ``model.ligerkit.scan.wrappers`` (it changes no swap). ``use_liger_kernel`` stays off: the
kit already applied Liger (``LigerKitCallback`` refuses it otherwise).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

from _common import StepClock, checkpoint, close_distributed, samples, summary, write
from ligerkit.integrations import LigerKitCallback, LigerKitSFTTrainer, load_model


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The example's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a local checkpoint folder (default: a tiny random Qwen3 written to a temp folder)")
    p.add_argument("--liger", choices=("on", "off", "auto"), default="auto", help="auto: on where a GPU is")
    p.add_argument("--loss", choices=("trl", "fused"), default="trl", help="TRL's chunked LM head, or ligerkit's loss")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2, help="per device")
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gradient-checkpointing", choices=("default", "on", "off"), default="default",
                   help="TRL's default is on (recompute every layer's activations in backward: less memory, "
                        "about a third more compute); off trains faster where memory allows")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="default: bfloat16 on a GPU")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--json", default=None, help="also write the result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Fine-tune with SFTTrainer, and return the per-step losses, the speed and the kit's scan.

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
    # Token ids, no padding: TRL's collator pads each batch and sets the labels (-100 on padding).
    rows = [{"input_ids": s["input_ids"][s["attention_mask"].bool()].tolist()} for s in samples(256, a.seq_len)]
    config = SFTConfig(
        output_dir=a.output_dir or tempfile.mkdtemp(prefix="trl_sft_"), max_steps=a.steps,
        per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.grad_accum, learning_rate=a.lr,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=not gpu, seed=0, bf16=dtype == torch.bfloat16,
        max_length=a.seq_len, average_tokens_across_devices=True, dataloader_drop_last=True,
        dataset_kwargs={"skip_prepare_dataset": True},
        **({} if a.gradient_checkpointing == "default" else {"gradient_checkpointing": a.gradient_checkpointing == "on"}),
    )
    clock = StepClock()
    trainer_class = LigerKitSFTTrainer if a.loss == "fused" else SFTTrainer
    trainer = trainer_class(model=model, args=config, train_dataset=Dataset.from_list(rows),
                            processing_class=AutoTokenizer.from_pretrained(path, local_files_only=True),
                            callbacks=[clock, *(callbacks or [])] + ([LigerKitCallback()] if liger else []))
    try:
        trainer.train()
    finally:
        if liger:
            model.ligerkit.kit.revert()  # training is over: the swaps go back
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    tokens = a.batch * a.grad_accum * a.seq_len * config.world_size
    extra = {"liger": liger, "loss_path": a.loss, "gradient_checkpointing": config.gradient_checkpointing,
             "swaps": len(model.ligerkit.report.patched) if liger else 0,
             "wrappers": list(model.ligerkit.scan.wrappers) if liger else [],
             "grad_norms": [row["grad_norm"] for row in trainer.state.log_history if "grad_norm" in row],
             "num_tokens": [row["num_tokens"] for row in trainer.state.log_history if "num_tokens" in row],
             "params_checksum": float(sum(p.detach().float().sum() for p in model.parameters()))}
    return summary(losses, clock.seconds, tokens, extra)


if __name__ == "__main__":
    result = main()
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports
        write(result, parse(None).json)
    close_distributed()
