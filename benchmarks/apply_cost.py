"""What ``kit.apply()`` costs beyond Liger itself.

For each family, in fresh processes (so imports are cold and patches never stack): import Liger,
then time either Liger's helper called directly with the same flags, or ``kit.apply`` (which also
imports the family's modeling modules, snapshots, calls the helper once per module and diffs).
The overhead is the difference of the medians. Budget: under 50 ms.

    python benchmarks/apply_cost.py [--repeats 5] [--out apply_cost.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

FAMILIES = ("qwen3", "llama", "qwen3_vl", "gemma3", "mllama")
BUDGET_MS = 50.0

_CHILD = r"""
import json, sys, time
import liger_kernel.transformers.monkey_patch as mp
mode, family = sys.argv[1], sys.argv[2]
if mode == "kit":
    from ligerkit import LigerKernelKit
    kit = LigerKernelKit()
    start = time.perf_counter()
    kit.apply(model_family=family)
else:
    import inspect
    helper = mp.MODEL_TYPE_TO_APPLY_LIGER_FN[family]
    params = inspect.signature(helper).parameters
    flags = {k: False for k in ("cross_entropy", "fused_linear_cross_entropy") if k in params}
    start = time.perf_counter()
    helper(**flags)
print(json.dumps((time.perf_counter() - start) * 1000))
"""


def measure(mode: str, family: str) -> float:
    """Milliseconds for one cold call in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, family], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for family in FAMILIES:
        helper = statistics.median(measure("helper", family) for _ in range(args.repeats))
        kit = statistics.median(measure("kit", family) for _ in range(args.repeats))
        rows.append({"family": family, "helper_ms": helper, "kit_apply_ms": kit, "overhead_ms": kit - helper})
    print("| family | Liger helper (ms) | kit.apply (ms) | overhead (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['family']} | {r['helper_ms']:.1f} | {r['kit_apply_ms']:.1f} | {r['overhead_ms']:.1f} |")
    worst = max(r["overhead_ms"] for r in rows)
    print(f"\nWorst overhead {worst:.1f} ms (budget {BUDGET_MS:.0f} ms), medians of {args.repeats} cold processes.")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rows": rows, "budget_ms": BUDGET_MS, "repeats": args.repeats}, fh, indent=2)
    sys.exit(0 if worst < BUDGET_MS else 1)


if __name__ == "__main__":
    main()
