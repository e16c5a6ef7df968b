"""Where a step's GPU time goes: CUDA kernels from ``torch.profiler`` summed by kind, and the idle time.

Pure functions over ``(kernel name, start us, end us)`` tuples, so the arithmetic is tested on a CPU;
``profiled_kernels`` reads those tuples out of a finished ``torch.profiler.profile``. The kinds are a
name match (the first kind whose needle a kernel's lower-cased name holds), with Liger's Triton
kernels recognised by their function-name prefixes.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

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


GAP_BUCKETS_US: tuple[float, ...] = (10.0, 100.0, 1000.0)
"""Upper bounds of the idle-gap sizes ``idle_gaps`` counts apart (microseconds; the last bucket is open)."""


GAP_SIZES: tuple[str, ...] = (*(f"{low:g}-{high:g} us" for low, high in zip((0.0, *GAP_BUCKETS_US), GAP_BUCKETS_US)),
                              f">= {GAP_BUCKETS_US[-1]:g} us")
"""The size labels ``idle_gaps`` reports, smallest first."""


def _size(us: float) -> str:
    return GAP_SIZES[bisect.bisect_right(GAP_BUCKETS_US, us)]


def idle_gaps(kernels: list[tuple[str, float, float]], steps: int, top: int = 10) -> dict[str, Any]:
    """Where the GPU sat idle between ``kernels`` (name, start, end in microseconds) over ``steps`` steps.

    Every gap between the end of the last kernel still running and the next kernel's start, per step:
    counted and summed by size (many short gaps: the GPU waiting for the host's next launch; a few
    long ones: the host busy with other work, or waiting for the GPU itself), and summed by the pair
    of kernels either side, so a gap that recurs at one place in every step shows up as one row.
    The time before the first kernel and after the last is not a gap here (it is in
    ``summarize_kernels``'s ``no_kernel_ms``)."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    by_size: dict[str, list[float]] = {}
    by_place: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    reach, last = None, ""
    for name, start, end in sorted(kernels, key=lambda k: (k[1], k[2])):
        if reach is not None and start > reach:
            gap = start - reach
            row = by_size.setdefault(_size(gap), [0.0, 0.0])
            row[0] += 1
            row[1] += gap
            place = by_place[(last, name)]
            place[0] += 1
            place[1] += gap
        if reach is None or end >= reach:
            reach, last = end, name
    total = sum(us for _, us in by_size.values())
    return {
        "gap_ms": total / 1e3 / steps,
        "by_size": {size: {"gaps_per_step": by_size[size][0] / steps, "ms_per_step": by_size[size][1] / 1e3 / steps}
                    for size in GAP_SIZES if size in by_size},
        "by_place": [{"after": a[:120], "before": b[:120], "gaps_per_step": n / steps, "ms_per_step": us / 1e3 / steps}
                     for (a, b), (n, us) in sorted(by_place.items(), key=lambda kv: -kv[1][1])[:top]],
    }


def summarize_kernels(kernels: list[tuple[str, float, float]], steps: int, wall_ms: float,
                      top: int = 25) -> dict[str, Any]:
    """Per-step GPU time of ``kernels`` (name, start, end in microseconds) over ``steps`` steps of
    ``wall_ms`` in total: time by kind, the time some kernel ran (streams overlap, so it is less than
    the sum), the time none ran, the communication compute did not hide, and the ``top`` kernels."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
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
    step_ms = wall_ms / steps
    busy_ms = union_us(comm + compute) / 1e3 / steps
    ranked = sorted(by_kind.items(), key=lambda kv: -kv[1])
    return {
        "steps": steps, "step_ms": step_ms, "kernel_ms": sum(by_kind.values()) / 1e3 / steps, "busy_ms": busy_ms,
        "no_kernel_ms": step_ms - busy_ms, "exposed_communication_ms": exposed_us(comm, compute) / 1e3 / steps,
        "kinds_ms": {k: v / 1e3 / steps for k, v in ranked},
        "kinds_share": {k: v / 1e3 / steps / step_ms for k, v in ranked} if step_ms > 0 else {},
        "top": [{"kernel": n[:160], "kind": kind_of(n), "ms_per_step": us / 1e3 / steps, "calls_per_step": count[n] / steps}
                for n, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]],
    }


def profiled_kernels(prof: Any) -> list[tuple[str, float, float]]:
    """The device kernels, copies and sets of a finished ``torch.profiler.profile``, as (name, start,
    end) in microseconds; the GPU-side spans of annotations (the profiler's step, the optimizer's
    step) are left out, since they cover kernels already counted."""
    import torch

    return [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
            and not e.name.startswith(("ProfilerStep", "Optimizer."))]


def host_ops(prof: Any, steps: int, top: int = 20) -> list[dict[str, Any]]:
    """The ``top`` host-side operators of a finished profile by their own (self) CPU time per step:
    where the host spends a step besides launching kernels (data collation, copies, ``.item()``)."""
    rows = sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)[:top]
    return [{"op": r.key[:120], "self_cpu_ms_per_step": r.self_cpu_time_total / 1e3 / steps,
             "calls_per_step": r.count / steps} for r in rows]
