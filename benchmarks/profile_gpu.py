"""GPU: where a training step's time goes, per arm: CUDA kernel time by kind, from torch.profiler.

Each arm trains the recipe in its own process (Liger's patches are process-wide) for ``--warmup``
steps, then ``--active`` steps under ``torch.profiler``. Kernel times are summed by kind (matmul,
attention, Inductor/Triton fused kernels, Liger's kernels, loss, optimizer, embedding, copies) and
reported per step, with the trainer's own step time (data generation excluded) and the part of it
no kernel ran (the host launching work, synchronisation, and profiler overhead). The top kernels by time are listed too.

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
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARK = "PROFILE_JSON "

# kind -> how a kernel's name (lower case) starts or what it holds; the first kind that matches wins
LIGER_PREFIXES = ("_rms_norm_", "_layer_norm_forward", "_layer_norm_backward", "_swiglu_", "_geglu_",
                  "_triton_rope", "_triton_qwen2vl_mrope", "liger_", "_fused_linear", "_jsd_", "_kldiv_")
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("communication", ("nccl",)),
    ("attention", ("flash", "fmha", "sdpa", "attention", "attn", "cudnn::fusion")),
    ("loss", ("cross_entropy", "nll_loss", "logsoftmax", "log_softmax", "element_mul_kernel")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm100_", "wgmma", "matmul")),
    ("optimizer", ("adam", "multi_tensor_apply", "foreach")),
    ("embedding", ("embedding", "index_select", "indexselect", "index_put", "indexput", "radix", "sort",
                   "scatter", "gather")),
    ("inductor_fused", ("triton_",)),
    ("aten_pointwise", ("copy", "memcpy", "memset", "fill", "cat", "elementwise_kernel", "vectorized_elementwise",
                        "unrolled_elementwise", "reduce_kernel")),
)


def kind_of(kernel: str) -> str:
    """The kind of a CUDA kernel, from its name (``other`` when none matches)."""
    name = kernel.lower()
    if name.startswith(LIGER_PREFIXES) and not name.startswith("liger_cross_entropy"):
        return "liger"
    for kind, needles in KINDS:
        if any(n in name for n in needles):
            return kind
    return "other"


def union_us(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` spans."""
    total, reach = 0.0, -float("inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def exposed_us(spans: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """How much of the union of ``spans`` no span of ``cover`` overlaps (communication not hidden
    behind compute, on GPUs that run them on separate streams)."""
    return union_us(spans) - (union_us(spans + cover) - union_us(cover))


def summarize_kernels(kernels: list[tuple[str, float, float]], steps: int, wall_ms: float,
                      top: int = 25) -> dict[str, Any]:
    """(kernel name, start, end in microseconds) over ``steps`` profiled steps of ``wall_ms`` total (the
    trainer's own step times: data generation excluded) -> per-step times by kind, the time some kernel
    ran (streams overlap, so it is less than the sum), the time none ran, the communication not
    overlapped by compute, and the ``top`` kernels."""
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    comm: list[tuple[float, float]] = []
    compute: list[tuple[float, float]] = []
    for name, start, end in kernels:
        kind = kind_of(name)
        by_kind[kind] += end - start
        by_name[name] += end - start
        count[name] += 1
        (comm if kind == "communication" else compute).append((start, end))
    kernel_ms = sum(by_kind.values()) / 1e3 / steps
    busy_ms = union_us(comm + compute) / 1e3 / steps
    step_ms = wall_ms / steps
    return {
        "steps": steps, "step_ms": step_ms, "kernel_ms": kernel_ms, "busy_ms": busy_ms,
        "no_kernel_ms": step_ms - busy_ms, "exposed_communication_ms": exposed_us(comm, compute) / 1e3 / steps,
        "kinds_ms": {k: v / 1e3 / steps for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "kinds_share": {k: v / 1e3 / steps / step_ms for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"kernel": n[:160], "kind": kind_of(n), "ms_per_step": us / 1e3 / steps, "calls_per_step": count[n] / steps}
                for n, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]],
    }


def profile_arm(config: Path, arm: str, overrides: list[str], warmup: int, active: int) -> dict[str, Any]:
    """In this process: train ``arm`` for warmup + active steps, the last ``active`` under the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from ligerkit.train.arms import ARMS
    from ligerkit.train.loading import load_engine
    from ligerkit.train.trainer import Trainer

    lines = [*overrides, *ARMS[arm], f"train.arm={arm}", f"train.steps={warmup + active}", "train.progress=false"]
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=max(warmup - 1, 0), warmup=1 if warmup else 0, active=active))

    class Profiled(Trainer):
        def _after_step(self, step, start, model, optimizer, device, stop):  # type: ignore[no-untyped-def]
            super()._after_step(step, start, model, optimizer, device, stop)
            prof.step()

    with prof:
        result = Profiled(load_engine(config, lines)).train()
    # device events are kernels, memcpys and memsets, plus the GPU-side spans of annotations (the
    # profiler's step, the optimizer's step), which cover kernels already counted
    kernels = [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
               and not e.name.startswith(("ProfilerStep", "Optimizer."))]
    timed = [s.step_time_s * 1e3 for s in result.steps[warmup:]]
    out = summarize_kernels(kernels, active, sum(timed))
    out.update(arm=arm, lines=lines, trainer_step_ms=timed, mfu=[s.mfu for s in result.steps[warmup:]],
               peak_mem_gib=max((s.peak_mem_gib or 0.0) for s in result.steps),
               swaps=len(result.report.patched) if result.report is not None else 0)
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
              f"{r['no_kernel_ms']:.1f} ms, communication not overlapped {r['exposed_communication_ms']:.1f} ms; {kinds}",
              flush=True)


if __name__ == "__main__":
    main()
