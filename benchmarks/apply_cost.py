"""What the first ``kit.apply()`` of a process costs beyond Liger itself, with the verdict cache cold and warm.

For each family, in fresh processes (so imports are cold and patches never stack): import Liger,
then time either Liger's helper called directly with the same flags, or ``kit.apply`` (which also
imports the family's modeling modules, snapshots, calls the helper once per module, diffs, and checks
each swap: the in-place verdicts in the whole model and the probes against the source). ``kit cold``
runs with an empty verdict cache (every check computed and written), ``kit warm`` with the cache one
earlier process filled (``ligerkit.probe.verdict_cache``: every check read). The overhead is the
difference of the medians. Budget: a warm ``apply`` within 500 ms of the helper.

    python benchmarks/apply_cost.py [--repeats 5] [--families qwen3,llama] [--out apply_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

FAMILIES = ("qwen3", "llama", "qwen3_vl", "gemma3", "mllama")
BUDGET_MS = 500.0  # warm cache: kit.apply within this of Liger's helper

_CHILD = r"""
import json, sys, time
import liger_kernel.transformers.monkey_patch as mp
mode, family = sys.argv[1], sys.argv[2]
counts = {}
if mode == "kit":
    from ligerkit import LigerKernelKit
    from ligerkit.probe import verdict_cache
    kit = LigerKernelKit()
    start = time.perf_counter()
    kit.apply(model_family=family)
    elapsed = time.perf_counter() - start
    counts = dict(verdict_cache.COUNTS)
else:
    import inspect
    helper = mp.MODEL_TYPE_TO_APPLY_LIGER_FN[family]
    params = inspect.signature(helper).parameters
    flags = {k: False for k in ("cross_entropy", "fused_linear_cross_entropy") if k in params}
    start = time.perf_counter()
    helper(**flags)
    elapsed = time.perf_counter() - start
print(json.dumps({"ms": elapsed * 1000, "counts": counts}))
"""


def measure(mode: str, family: str, cache: str | None = None) -> dict:
    """One cold call in a fresh process: ``{"ms": ..., "counts": the verdict cache's counts}``; ``cache``
    is the cache folder (``None``: an empty one of its own)."""
    if cache is None:
        with tempfile.TemporaryDirectory(prefix="ligerkit-cold-") as empty:
            return measure(mode, family, empty)
    env = {**os.environ, "LIGERKIT_CACHE_DIR": cache}
    env.pop("LIGERKIT_VERDICT_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, family], capture_output=True, text=True, check=True,
                          env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def family_row(family: str, repeats: int) -> dict:
    """Medians of ``repeats`` processes each: the helper, the kit with an empty cache, the kit with a warm one."""
    helper = statistics.median(measure("helper", family)["ms"] for _ in range(repeats))
    cold = [measure("kit", family) for _ in range(repeats)]  # each with an empty cache folder of its own
    with tempfile.TemporaryDirectory(prefix="ligerkit-warm-") as warm_dir:
        measure("kit", family, warm_dir)  # fills the cache
        warm = [measure("kit", family, warm_dir) for _ in range(repeats)]
    computed = sum(run["counts"].get("computed", 0) for run in warm)
    return {"family": family, "helper_ms": helper, "kit_cold_ms": statistics.median(r["ms"] for r in cold),
            "kit_warm_ms": statistics.median(r["ms"] for r in warm), "checks_per_apply": cold[0]["counts"],
            "warm_recomputed": computed}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for family in args.families.split(","):
        row = family_row(family, args.repeats)
        row["cold_overhead_ms"] = row["kit_cold_ms"] - row["helper_ms"]
        row["warm_overhead_ms"] = row["kit_warm_ms"] - row["helper_ms"]
        rows.append(row)
        # each family as it is done, and the file so far: a run stopped by a time limit keeps what it measured
        print(f"{family}: helper {row['helper_ms']:.1f} ms, kit cold {row['kit_cold_ms']:.0f} ms, "
              f"warm {row['kit_warm_ms']:.1f} ms", flush=True)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump({"rows": rows, "budget_ms": BUDGET_MS, "repeats": args.repeats, "complete": False}, fh,
                          indent=2)
    print("| family | Liger helper (ms) | kit.apply, cache cold (ms) | kit.apply, cache warm (ms) | warm overhead (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['family']} | {r['helper_ms']:.1f} | {r['kit_cold_ms']:.0f} | {r['kit_warm_ms']:.1f} "
              f"| {r['warm_overhead_ms']:.1f} |")
    worst = max(r["warm_overhead_ms"] for r in rows)
    recomputed = sum(r["warm_recomputed"] for r in rows)
    print(f"\nWorst warm overhead {worst:.1f} ms (budget {BUDGET_MS:.0f} ms); checks recomputed with a warm cache: "
          f"{recomputed}; medians of {args.repeats} fresh processes.")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rows": rows, "budget_ms": BUDGET_MS, "repeats": args.repeats, "complete": True}, fh,
                      indent=2)
    sys.exit(0 if worst < BUDGET_MS and recomputed == 0 else 1)


if __name__ == "__main__":
    main()
