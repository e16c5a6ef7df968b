"""GPU proof for the recipes: each GPU config, Liger off vs on (separate processes), and Qwen3 on
two GPUs with FSDP2 against the one-GPU curve.

    python benchmarks/recipes_gpu.py --recipes qwen3,custom_lm --out results/ [--gpu 0]
    python benchmarks/recipes_gpu.py --fsdp qwen3 --out results/     # needs 2 GPUs

Writes one JSON per recipe (and ``fsdp_<recipe>.json``) and prints a markdown row for each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ligerkit.proof.arm_runs import compare_liger, loss_gap, run_arm, summarize

ROOT = Path(__file__).resolve().parents[1]


def row(name: str, r: dict) -> str:
    """One markdown table row."""
    off, on = r["off"], r["on"]
    mfu = lambda x: f"{x:.1%}" if x is not None else "n/a"  # noqa: E731
    return (f"| {name} | {r['steps']} | {r['max_loss_gap']:.2e} | {off['tokens_per_s']:,.0f} | "
            f"{on['tokens_per_s']:,.0f} | {r['speedup']:.2f}x | {off['peak_mem_gib']:.1f} | {on['peak_mem_gib']:.1f} | "
            f"{mfu(off['mfu'])} | {mfu(on['mfu'])} | {on['swaps']} |")


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default="")
    parser.add_argument("--fsdp", default="")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=1e-2)
    parser.add_argument("--gpu", default=None, help="CUDA_VISIBLE_DEVICES for the single-GPU arms")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"CUDA_VISIBLE_DEVICES": args.gpu} if args.gpu is not None else None
    failed = False
    for name in filter(None, args.recipes.split(",")):
        config = ROOT / "recipes" / name / "configs" / "gpu.yaml"
        result = compare_liger(config, args.steps, args.tolerance, env=env)
        (out / f"{name}.json").write_text(json.dumps(result, indent=2))
        print(row(name, result), flush=True)
        failed |= not result["loss_parity"] or result["speedup"] <= 1.0
    for name in filter(None, args.fsdp.split(",")):
        config = ROOT / "recipes" / name / "configs" / "gpu.yaml"
        # 8 sequences per step: one micro-batch of 4 per GPU on two, two micro-batches on one
        base = [f"train.steps={args.steps}", "train.run.progress=false", "train.global_batch_size=8"]
        one = summarize(run_arm(config, base, env={"CUDA_VISIBLE_DEVICES": "0"}), 3)
        two = summarize(run_arm(config, base, nproc=2), 3)
        gap = loss_gap(one["losses"], two["losses"])
        result = {"config": str(config), "steps": args.steps, "one_gpu": one, "two_gpus_fsdp2": two,
                  "max_loss_gap": gap, "loss_parity": gap <= args.tolerance}
        (out / f"fsdp_{name}.json").write_text(json.dumps(result, indent=2))
        print(f"| {name} FSDP2 x2 vs 1 GPU | {args.steps} | {gap:.2e} | 1 GPU {one['tokens_per_s']:,.0f} tok/s | "
              f"2 GPUs {two['tokens_per_s']:,.0f} tok/s total, {two['tokens_per_s_per_device']:,.0f} per GPU |",
              flush=True)
        failed |= not result["loss_parity"]
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
