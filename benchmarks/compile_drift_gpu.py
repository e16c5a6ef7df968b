"""GPU: where compiling over Liger's swaps changes training, swap by swap, with step-1 gradients.

For each recipe (its ``configs/gpu.yaml``), one process runs ``--calls`` forward+backward passes (the
micro-batches of one step, no optimizer step between them) of these arms and compares the last
one's every parameter gradient with the float32, Liger-off, uncompiled model's
(``ligerkit.proof.arm_grads``), and records any parameter or buffer the passes changed:

- ``eager``, ``compile`` (Liger off), ``liger`` (every swap);
- ``liger_compile``: every swap, compiled, Liger's kernels through ``ligerkit.compile`` operators (the
  default; its graph breaks are counted: none beyond the ``compile`` arm's);
- ``liger_compile_inline``: every swap, compiled, torch.compile tracing into Liger's autograd functions
  (``train.compile=trace``: the path measured to drift);
- with ``--per-key``: ``only_<key>`` / ``only_<key>_compile`` (one swap alone, operators) and
  ``pair_<a>+<b>_inline`` (two swaps, traced inline): which combination writes into the weights.

    python benchmarks/compile_drift_gpu.py --out drift.json [--recipes qwen3,custom_lm] [--per-key] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ligerkit.proof.arm_grads import Arm, recipe_arm_grads
from ligerkit.train.config.arms import modules_line
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.recipe.setup import set_up_model

ROOT = Path(__file__).resolve().parents[1]
ON = "model.liger_kernel.enabled=true"
OFF = "model.liger_kernel.enabled=false"
COMPILE = ("train.compile=ops",)
INLINE = ("train.compile=trace",)


def swap_keys(config: Path, overrides: list[str], device: torch.device) -> list[str]:
    """The module keys the recipe turns on with Liger enabled (from a real apply + build)."""
    engine = load_engine(config, [*overrides, ON])
    try:
        model = set_up_model(engine, device)
        del model
        return [k for k, on in engine.liger_kit.report.modules.items() if on]
    finally:
        engine.liger_kit.revert()


def arms_for(keys: list[str], per_key: bool) -> dict[str, Arm]:
    """Eager/compiled arms: Liger off, every swap (operators and inline), and optionally per swap."""
    arms = {"eager": Arm((OFF,)), "compile": Arm((OFF, *COMPILE), compiled=True),
            "liger": Arm((ON,)), "liger_compile": Arm((ON, *COMPILE), compiled=True),
            "liger_compile_inline": Arm((ON, *INLINE), compiled=True)}
    if per_key:
        for key in keys:
            arms[f"only_{key}"] = Arm((ON, modules_line(keys, {key})))
            arms[f"only_{key}_compile"] = Arm((ON, modules_line(keys, {key}), *COMPILE), compiled=True)
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                arms[f"pair_{a}+{b}_inline"] = Arm((ON, modules_line(keys, {a, b}), *INLINE), compiled=True)
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--recipes", default="qwen3,custom_lm,composite_vlm")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every recipe (e.g. data.seq_len=2048)")
    parser.add_argument("--calls", type=int, default=2,
                        help="forward+backward passes per arm before the comparison (micro-batches of one step)")
    parser.add_argument("--per-key", action="store_true", help="also each swap alone and each pair inline")
    args = parser.parse_args()
    device = torch.device("cuda")
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "overrides": args.set, "recipes": {}}
    for recipe in args.recipes.split(","):
        config = ROOT / "recipes" / recipe / "configs" / "gpu.yaml"
        start = time.perf_counter()
        try:
            keys = swap_keys(config, args.set, device)
            result = recipe_arm_grads(config, args.set, arms_for(keys, args.per_key), device, args.calls)
        except Exception as exc:  # one recipe's failure is recorded, the others still run
            out["recipes"][recipe] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"{recipe}: FAILED {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
            continue
        out["recipes"][recipe] = {"keys": keys, "seconds": time.perf_counter() - start,
                                  "arms": {name: r.to_dict() for name, r in result.items()}}
        for name, r in result.items():
            print(f"{recipe:14s} {name:24s} loss {r.loss:.6f} gap {r.loss - result['eager'].loss:+.2e} "
                  f"max r {r.max_error:.4f} mean r {r.mean_error:.5f} breaks {r.graph_breaks} "
                  f"losses {['%.6f' % x for x in r.losses]} changed {r.changed[:4]} ({len(r.changed)})", flush=True)
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
