"""GPU: FSDP2 scaling of each arm, one GPU against N, weak and strong (``ligerkit.proof.scaling``).

Weak scaling keeps every GPU's micro-batches (the global batch grows N-fold); strong scaling splits
the one-GPU run's global batch over N GPUs. Per-GPU efficiency = N-GPU tokens/s per GPU over one-GPU
tokens/s (weak), speed-up over N (strong). Needs N GPUs on one host (the ``nvidia-h200-x2`` kind).

    python benchmarks/scaling_gpu.py --out scaling [--recipe qwen3] [--arms eager,liger,liger_fused] [--nproc 2]
        [--steps 12 --warmup 4] [--repeats 1] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ligerkit.proof.arm_runs import default_runner
from ligerkit.proof.scaling import scaling, to_markdown

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for scaling.json and scaling.md")
    parser.add_argument("--recipe", default="qwen3")
    parser.add_argument("--arms", default="eager,liger,liger_fused")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if torch.cuda.device_count() < args.nproc:
        raise SystemExit(f"--nproc {args.nproc} needs that many GPUs; this machine has {torch.cuda.device_count()}")
    config = ROOT / "recipes" / args.recipe / "configs" / "gpu.yaml"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = scaling(config, args.arms.split(","), args.nproc, args.steps, args.warmup, args.set, default_runner(),
                     repeats=args.repeats, on_run=lambda arm, mode: print(f"{arm} {mode}: done", flush=True))
    (out / "scaling.json").write_text(json.dumps(result, indent=2))
    (out / "scaling.md").write_text(to_markdown(result) + "\n")
    print(to_markdown(result))


if __name__ == "__main__":
    main()
