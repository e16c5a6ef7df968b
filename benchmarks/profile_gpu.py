"""GPU: where a training step's time goes, per arm: CUDA kernel time by kind, from torch.profiler.

Each arm trains the recipe in its own process (Liger's patches are process-wide) for ``--warmup``
steps, then ``--active`` steps under ``torch.profiler``. Kernel times are summed by kind (matmul,
attention, Inductor/Triton fused kernels, Liger's kernels, loss, optimizer, embedding, copies) and
reported per step, with the trainer's own step time (data generation excluded) and the part of it
no kernel ran (the host launching work, synchronisation, and profiler overhead). That idle time is
taken apart by where it falls (``ligerkit.proof.kernel_time.idle_gaps``: gaps between kernels by size,
and by the kernels either side, so one place that idles every step is one row; the gap from one
step's last kernel to the next step's first also holds the untimed host work between steps, data
generation among it, so that row overstates its share of the step), and the host's own operators are
ranked by their time. The top kernels by time are listed too,
and the host-device synchronizations of every step after the warm-up are counted with the source line that made
each one (``ligerkit.proof.syncs``: CUDA's sync debug mode).

    python benchmarks/profile_gpu.py --out profile.json [--recipe qwen3] [--arms eager,compile_fused,liger_compile_fused]
        [--nproc 2] [--set KEY=VALUE ...]

With ``--nproc`` > 1 each arm trains under torchrun with FSDP2 and rank 0 is profiled; NCCL kernels
are the ``communication`` kind, and the time they run with no compute kernel beside them is reported
(``exposed_communication_ms``): what the overlap of all-gathers and reduce-scatters fails to hide.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ligerkit.proof.kernel_time import host_ops, idle_gaps, profiled_kernels, summarize_kernels

ROOT = Path(__file__).resolve().parents[1]
MARK = "PROFILE_JSON "


def profile_arm(config: Path, arm: str, overrides: list[str], warmup: int, active: int) -> dict[str, Any]:
    """In this process: train ``arm`` for warmup + active steps, the last ``active`` under the profiler."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from ligerkit.proof.syncs import SyncCounter

    from ligerkit.train.config.arms import ARMS
    from ligerkit.train.recipe.loading import load_engine
    from ligerkit.train.trainer import Trainer

    lines = [*overrides, *ARMS[arm], f"train.arm={arm}", f"train.steps={warmup + active}", "train.run.progress=false"]
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=max(warmup - 1, 0), warmup=1 if warmup else 0, active=active))

    syncs = SyncCounter()

    class Profiled(Trainer):
        def _after_step(self, step, start, model, optimizer, device, stop):  # type: ignore[no-untyped-def]
            super()._after_step(step, start, model, optimizer, device, stop)
            prof.step()
            if step == warmup - 1:
                syncs.__enter__()  # the steps after the warm-up: every synchronization, with its source
            elif step >= warmup:
                syncs.step()

    with prof:
        try:
            result = Profiled(load_engine(config, lines)).train()
        finally:
            syncs.__exit__(None, None, None)
    kernels = profiled_kernels(prof)
    timed = [s.step_time_s * 1e3 for s in result.steps[warmup:]]
    out = summarize_kernels(kernels, active, sum(timed))
    out.update(arm=arm, lines=lines, trainer_step_ms=timed, mfu=[s.mfu for s in result.steps[warmup:]],
               peak_mem_gib=max((s.peak_mem_gib or 0.0) for s in result.steps),
               swaps=len(result.report.patched) if result.report is not None else 0,
               syncs_per_step=syncs.per_step, sync_sources=syncs.sources(), idle=idle_gaps(kernels, active),
               host_ops=host_ops(prof, active))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nproc", type=int, default=1, help="GPUs per arm (torchrun + FSDP2; rank 0 is profiled)")
    parser.add_argument("--recipe", default="qwen3")
    parser.add_argument("--config", help="a config file instead of the recipe's configs/gpu.yaml")
    parser.add_argument("--arms", default="eager,compile_fused,liger_compile_fused")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one arm, in this process
    args = parser.parse_args()
    config = Path(args.config) if args.config else ROOT / "recipes" / args.recipe / "configs" / "gpu.yaml"
    if args.child:
        profiled = profile_arm(config, args.child, args.set, args.warmup, args.active)
        if int(os.environ.get("RANK", "0")) == 0:
            print(MARK + json.dumps(profiled), flush=True)
        return
    result: dict[str, Any] = {"recipe": args.recipe, "overrides": args.set, "nproc": args.nproc, "arms": {}}
    for arm in args.arms.split(","):
        launcher = [sys.executable] if args.nproc == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}"]
        cmd = [*launcher, __file__, "--out", args.out, "--recipe", args.recipe, "--config", str(config), "--warmup", str(args.warmup),
               "--active", str(args.active), "--child", arm, *[x for s in args.set for x in ("--set", s)]]
        began = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            result["arms"][arm] = {"error": proc.stderr[-3000:]}
        else:
            result["arms"][arm] = json.loads(proc.stdout[proc.stdout.rindex(MARK) + len(MARK):])
        result["arms"][arm]["seconds"] = round(time.perf_counter() - began, 1)
        Path(args.out).write_text(json.dumps(result, indent=2))
        r = result["arms"][arm]
        if "error" in r:
            print(f"{arm}: FAILED\n{r['error']}", flush=True)
            continue
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in r["kinds_ms"].items())
        print(f"{arm}: step {r['step_ms']:.1f} ms, kernels {r['kernel_ms']:.1f} ms (busy {r['busy_ms']:.1f}), no kernel "
              f"{r['no_kernel_ms']:.1f} ms, communication not overlapped {r['exposed_communication_ms']:.1f} ms; {kinds}; "
              f"syncs per step {r['syncs_per_step']} from {list(r['sync_sources'])[:4]}", flush=True)
        sizes = ", ".join(f"{size}: {v['gaps_per_step']:.0f} gaps {v['ms_per_step']:.2f} ms" for size, v in r["idle"]["by_size"].items())
        print(f"  idle between kernels {r['idle']['gap_ms']:.1f} ms a step ({sizes}); the longest place: "
              + "; ".join(f"{p['after'][:40]} -> {p['before'][:40]} {p['ms_per_step']:.2f} ms" for p in r["idle"]["by_place"][:3]),
              flush=True)


if __name__ == "__main__":
    main()
