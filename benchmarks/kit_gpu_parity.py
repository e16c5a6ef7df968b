"""GPU proof for the kit core: kit-wired Qwen3 vs unpatched (loss) and vs Liger's helper (speed).

Each arm runs in its own process (Liger's patches are process-global):

- ``eager``:  no Liger;
- ``kit``:    ``LigerKernelKit().apply(model_family="qwen3")`` (rope, rms_norm, swiglu; loss kernels off);
- ``direct``: ``apply_liger_kernel_to_qwen3`` called by hand with the same flags.

A small Qwen3 (bf16, AdamW) trains on fixed synthetic batches from one seed. The first
``--parity-steps`` losses of every ``kit`` run must be within ``--loss-tol`` of ``eager``; the
median tokens/s over the ``kit`` runs must be within ``--speed-tol`` of the median over the
``direct`` runs (kit and direct alternate, ``--repeats`` processes each, so drift hits both).

    python benchmarks/kit_gpu_parity.py --out results.json      # all arms + comparison
    python benchmarks/kit_gpu_parity.py --arm kit               # one arm, JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPE = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=16,
             num_key_value_heads=8, head_dim=64, vocab_size=32000, max_position_embeddings=4096)
BATCH, SEQ = 8, 2048


def batches(n: int, seed: int = 0):
    """Learnable synthetic batches: a random 64-token motif tiled along each sequence."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        motif = torch.randint(0, SHAPE["vocab_size"], (BATCH, 64), generator=g)
        yield motif.repeat(1, SEQ // 64)


def run_arm(arm: str, steps: int, warmup: int) -> dict:
    """Train ``steps`` steps in this process under one arm; return losses and step times."""
    import torch
    from transformers import Qwen3Config

    flags = dict(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False)
    if arm == "kit":
        from ligerkit import LigerKernelKit

        kit = LigerKernelKit()
        report = kit.apply(model_family="qwen3")
        assert {s.name for s in report.patched} == {"rope", "rms_norm", "swiglu"}
    elif arm == "direct":
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3

        apply_liger_kernel_to_qwen3(**flags)
    elif arm != "eager":
        raise SystemExit(f"unknown arm {arm!r}")

    from transformers import Qwen3ForCausalLM  # resolved after the patch, as a recipe builds it

    torch.manual_seed(0)
    config = Qwen3Config(**SHAPE)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    print(f"[{arm}] built in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    model.config.use_cache = False
    if arm == "kit":
        kit.verify(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    losses, times = [], []
    for input_ids in batches(steps):
        input_ids = input_ids.cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    timed = times[warmup:]
    print(f"[{arm}] first step {times[0]:.1f}s, median {statistics.median(timed) * 1000:.1f} ms", file=sys.stderr)
    return {
        "arm": arm,
        "losses": losses,
        "median_step_s": statistics.median(timed),
        "tokens_per_s": BATCH * SEQ / statistics.median(timed),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def spawn(arm: str, steps: int, warmup: int) -> dict:
    """Run one arm in a fresh process."""
    cmd = [sys.executable, __file__, "--arm", arm, "--steps", str(steps), "--warmup", str(warmup)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log = [line for line in proc.stderr.splitlines() if line.startswith(f"[{arm}]")]
    print(*log, f"[{arm}] process {time.perf_counter() - start:.0f}s", sep="\n", file=sys.stderr, flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(steps: int, warmup: int, parity_steps: int, loss_tol: float, speed_tol: float,
            repeats: int) -> dict:
    """All arms side by side; the kit/direct speed arms alternate ``repeats`` times."""
    eager = spawn("eager", steps, warmup)
    runs = {"kit": [], "direct": []}
    for _ in range(repeats):
        for arm in ("kit", "direct"):
            runs[arm].append(spawn(arm, steps, warmup))
    kit, direct = median_run(runs["kit"]), median_run(runs["direct"])
    loss_diff = [abs(a - b) for r in runs["kit"]
                 for a, b in zip(r["losses"][:parity_steps], eager["losses"][:parity_steps])]
    speed_ratio = kit["tokens_per_s"] / direct["tokens_per_s"]
    return {
        "shape": SHAPE, "batch": BATCH, "seq": SEQ, "steps": steps, "warmup": warmup,
        "eager": eager, "kit_runs": runs["kit"], "direct_runs": runs["direct"],
        "max_loss_diff_kit_vs_eager": max(loss_diff),
        "loss_tol": loss_tol,
        "loss_parity": max(loss_diff) <= loss_tol,
        "tokens_per_s_kit_over_direct": speed_ratio,
        "tokens_per_s_kit_over_eager": kit["tokens_per_s"] / eager["tokens_per_s"],
        "speed_tol": speed_tol,
        "speed_parity": abs(1 - speed_ratio) <= speed_tol,
    }


def median_run(runs: list[dict]) -> dict:
    """The run with the median tokens/s (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r["tokens_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def to_markdown(result: dict) -> str:
    """The comparison as a markdown table."""
    eager, kit_runs, direct_runs = result["eager"], result["kit_runs"], result["direct_runs"]
    rows = [("eager (no Liger)", eager), ("kit.apply(qwen3)", median_run(kit_runs)),
            ("apply_liger_kernel_to_qwen3 direct", median_run(direct_runs))]
    lines = ["| arm | tokens/s | vs eager | peak mem (GiB) | loss step 1 | loss step 10 |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in rows:
        lines.append(f"| {name} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / eager['tokens_per_s']:.2f}x | "
                     f"{r['peak_mem_gib']:.1f} | {r['losses'][0]:.4f} | {r['losses'][9]:.4f} |")
    lines.append("")
    lines.append(f"Max per-step loss difference, kit vs eager, first 10 steps: "
                 f"{result['max_loss_diff_kit_vs_eager']:.2e} (tolerance {result['loss_tol']:.0e}).")
    lines.append(f"Tokens/s, kit over direct helper call (median of {len(kit_runs)} alternating processes "
                 f"each): {result['tokens_per_s_kit_over_direct']:.3f} (tolerance +/-{result['speed_tol']:.0%}).")
    per_run = ", ".join(f"{k['tokens_per_s']:,.0f} / {d['tokens_per_s']:,.0f}" for k, d in zip(kit_runs, direct_runs))
    lines.append(f"Per process, kit / direct tokens/s: {per_run}.")
    return "\n".join(lines)


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", choices=["eager", "kit", "direct"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--parity-steps", type=int, default=10)
    parser.add_argument("--loss-tol", type=float, default=1e-2)
    parser.add_argument("--speed-tol", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="write the comparison JSON (and a .md beside it) here")
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.steps, args.warmup)))
        return
    result = compare(args.steps, args.warmup, args.parity_steps, args.loss_tol, args.speed_tol, args.repeats)
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as fh:
            fh.write(to_markdown(result) + "\n")
    print(to_markdown(result))
    sys.exit(0 if result["loss_parity"] and result["speed_parity"] else 1)


if __name__ == "__main__":
    main()
