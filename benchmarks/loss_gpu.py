"""GPU proof for the fused loss: eager / Liger / Liger + fused loss, side by side.

For each recipe's GPU config, three arms in separate processes, same seed and data: ``eager``
(Liger off, standard loss), ``liger`` (Liger kernels, standard loss: full logits + cross entropy),
``liger_fused`` (Liger kernels, ``train.loss.path=fused``); they give tokens/s and peak
memory. The fused loss must keep the per-step loss of the ``liger`` arm within 1e-3 (the same
kernels otherwise). That gap is judged on a second pair of ``liger`` and ``liger_fused`` runs with
``train.deterministic=true``: by default some kernels (flash attention's backward) accumulate in a
run-dependent order, and the same command run twice drifts apart by itself; with it, the same
command gives the same losses bit for bit, so the gap left is the loss path's own. The
default-mode gap is recorded too.

    python benchmarks/loss_gpu.py --recipes qwen3,custom_lm --out results [--gpu 0]
    python benchmarks/loss_gpu.py --recipes qwen3 --out results \
        --set model.dtype=float32 --set train.autocast_bf16=true        # mixed precision
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ligerkit.proof.arm_runs import loss_gap, run_arm, summarize

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "eager": ["model.liger_kernel.enabled=false", "train.loss.path=standard"],
    "liger": ["model.liger_kernel.enabled=true", "train.loss.path=standard"],
    "liger_fused": ["model.liger_kernel.enabled=true", "train.loss.path=fused"],
}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--gpu", default=None)
    parser.add_argument("--no-deterministic-parity", dest="deterministic", action="store_false",
                        help="judge the loss gap on the default (non-deterministic) runs")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="config override for every arm, e.g. --set train.autocast_bf16=true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    env = {"CUDA_VISIBLE_DEVICES": args.gpu} if args.gpu is not None else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.recipes.split(","):
        config = ROOT / "recipes" / name / "configs" / "gpu.yaml"
        base = [*args.overrides, f"train.steps={args.steps}", "train.run.progress=false"]
        arms = {arm: summarize(run_arm(config, [*base, *sets], env=env), 3) for arm, sets in ARMS.items()}
        default_gap = loss_gap(arms["liger"]["losses"], arms["liger_fused"]["losses"])
        result = {"config": str(config), "steps": args.steps, "arms": arms,
                  "fused_vs_liger_max_loss_gap_default": default_gap}
        gap = default_gap
        if args.deterministic:
            det = {arm: summarize(run_arm(config, [*base, *ARMS[arm], "train.deterministic=true"], env=env), 3)
                   for arm in ("liger", "liger_fused")}
            gap = loss_gap(det["liger"]["losses"], det["liger_fused"]["losses"])
            result["deterministic_arms"] = {arm: {"losses": a["losses"], "grad_norms": a["grad_norms"]}
                                            for arm, a in det.items()}
            result["fused_vs_liger_max_loss_gap_deterministic"] = gap
            # For scale: the standard loss against itself, only the kernels' summation order changed.
            result["liger_default_vs_deterministic_max_loss_gap"] = loss_gap(arms["liger"]["losses"],
                                                                             det["liger"]["losses"])
        eager = arms["eager"]
        result.update({
            "fused_vs_liger_max_loss_gap": gap, "loss_parity": gap <= args.tolerance,
            "ratios_vs_eager": {arm: {"tokens_per_s": a["tokens_per_s"] / eager["tokens_per_s"],
                                      "peak_mem": a["peak_mem_gib"] / eager["peak_mem_gib"]}
                                for arm, a in arms.items()}})
        (out / f"loss_{name}.json").write_text(json.dumps(result, indent=2))
        r = result["ratios_vs_eager"]
        print(f"| {name} | {gap:.2e} | {default_gap:.2e} | " + " | ".join(
            f"{arms[a]['tokens_per_s']:,.0f} ({r[a]['tokens_per_s']:.2f}x) | {arms[a]['peak_mem_gib']:.1f} "
            f"({r[a]['peak_mem']:.2f}x)" for a in ARMS) + " |", flush=True)
        failed |= not result["loss_parity"]
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
