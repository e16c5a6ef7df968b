"""GPU: per kernel, Liger's kernel (as a ``ligerkit.compile`` operator) vs Inductor's own fusion.

For each kernel a recipe swaps, the recipe's model (``configs/gpu.yaml``, ``--layers`` decoder layers)
is built twice and compiled per layer: with that one swap (through the compile-mode operators) and
with no swap (Inductor fuses the original module). Each runs ``--iters`` timed forward+loss+backward
passes on the recipe's first micro-batch after ``--warmup``; the medians go into the table the kit
reads in compile mode (``src/ligerkit/compile/inductor_table.json``): where Inductor is faster by more
than ``--margin``, the kit leaves that module to Inductor.

    python benchmarks/compile_table_gpu.py --out src/ligerkit/compile/inductor_table.json
    # the same kernels at another width (the Qwen3-4B shape), added as rows of that width:
    python benchmarks/compile_table_gpu.py --config-name gpu_4b.yaml --merge --out src/ligerkit/compile/inductor_table.json

Each row records the model's width (its hidden size); ``--merge`` keeps the rows of other widths already
in ``--out`` (a row of the same width is replaced), so the kit can pick the row nearest to the model it
applies for (``ligerkit.compile.table``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from ligerkit.hf import hidden_width
from ligerkit.loss import valid_tokens
from ligerkit.train.config.arms import modules_line
from ligerkit.compile.layers import compile_layers, reset_compiled
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.train.step import device_batch

ROOT = Path(__file__).resolve().parents[1]
# (recipe, the kernels measured on it, its layer-count key)
PLAN = (("qwen3", ("rms_norm", "swiglu", "rope"), "model.config.num_hidden_layers"),
        ("custom_lm", ("geglu",), "model.config.num_hidden_layers"))


def timed(config: Path, overrides: list[str], warmup: int, iters: int, device: torch.device) -> float:
    """Median milliseconds of one compiled forward+loss+backward pass."""
    engine = load_engine(config, overrides)
    try:
        model = set_up_model(engine, device)
        compile_layers(model, engine.fsdp_units(model))
        vocab = model.get_output_embeddings().weight.shape[0]
        batch = device_batch(engine.make_batch(0, engine.config.train.micro_batch_size, vocab), device,
                             engine.config.train.drop_right_padding_mask)
        scale = 1.0 / max(valid_tokens(batch["labels"]), 1)
        times = []
        for i in range(warmup + iters):
            torch.cuda.synchronize()
            start = time.perf_counter()
            engine.loss(engine, model, batch, scale).backward()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
            model.zero_grad(set_to_none=True)
        return statistics.median(times)
    finally:
        if engine.liger_kit.active:
            engine.liger_kit.revert()
        reset_compiled()
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per pass (of the recipe's length)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--margin", type=float, default=0.02, help="Inductor must be faster by this fraction")
    parser.add_argument("--config-name", default="gpu.yaml",
                        help="each recipe's config file to measure at (a recipe without it is skipped)")
    parser.add_argument("--merge", action="store_true", help="keep the rows of other widths already in --out")
    args = parser.parse_args()
    os.environ["LIGERKIT_INDUCTOR_TABLE"] = "none"  # measure every kernel, whatever the committed table says
    device = torch.device("cuda")
    kernels: dict[str, list[dict[str, object]]] = {}
    if args.merge and Path(args.out).is_file():
        kernels = {k: [r for r in (v if isinstance(v, list) else [v])]
                   for k, v in json.loads(Path(args.out).read_text()).get("kernels", {}).items()}
    for recipe, keys, layers in PLAN:
        config = ROOT / "recipes" / recipe / "configs" / args.config_name
        if not config.is_file():
            print(f"{recipe}: no configs/{args.config_name}, skipped", flush=True)
            continue
        base = [f"{layers}={args.layers}", "train.compile=ops", f"train.micro_batch_size={args.micro_batch}"]
        width = hidden_width(load_engine(config, base).model_config())
        inductor = timed(config, [*base, "model.liger_kernel.enabled=false"], args.warmup, args.iters, device)
        for key in keys:
            liger = timed(config, [*base, "model.liger_kernel.enabled=true", modules_line(keys, {key})],
                          args.warmup, args.iters, device)
            row = {"width": width, "measured": datetime.date.today().isoformat(),
                   "liger_ms": round(liger, 3), "inductor_ms": round(inductor, 3),
                   "model": f"{recipe} {args.config_name}, {args.layers} layers, {args.micro_batch} sequence(s)"}
            kernels[key] = [r for r in kernels.get(key, []) if r.get("width") != width] + [row]
            print(f"{key}: Liger {liger:.2f} ms, Inductor {inductor:.2f} ms", flush=True)
            write(args, kernels)  # after every row: a run stopped by a time limit keeps what it measured


def write(args: argparse.Namespace, kernels: dict[str, list[dict[str, object]]]) -> None:
    """The table as the kit reads it, with the command that measured it."""
    table = {"device": torch.cuda.get_device_name(), "measured": datetime.date.today().isoformat(),
             "command": "python benchmarks/compile_table_gpu.py " + " ".join(sys.argv[1:]),
             "torch": torch.__version__, "margin": args.margin, "kernels": kernels}
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
