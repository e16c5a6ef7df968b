"""GPU: loss-path variants side by side, for docs/benchmarks.md's "Loss-compatibility path".

Each arm trains one recipe config in its own process (same seed and data) and is written
``NAME:VARIANT[:KEY=VALUE...]``, the KEY=VALUE pairs being config overrides. VARIANT is one of:

  engine                the engine as shipped
  liger_sum_then_scale  the fused path's sum taken by Liger's own FLCE function (reduction="sum",
                        float32 weight-gradient accumulation, 1024-row chunks) and then multiplied
                        by 1/N, which rounds the logits' gradient twice
  padded_labels         the standard path computed as transformers computes it: the labels padded
                        with -100 instead of the logits sliced

It prints each arm's median tokens/s (after 4 steps) and peak memory, and the max per-step loss
gap of every pair of arms, and writes them all to --out.

    python benchmarks/loss_variants_gpu.py recipes/qwen3/configs/gpu.yaml --out rounding.json \\
        std:engine:train.global_batch_size=8:train.deterministic=true \\
        fused:engine:train.global_batch_size=8:train.deterministic=true:model.liger_kernel.loss=fused \\
        sum_then_scale:liger_sum_then_scale:train.global_batch_size=8:train.deterministic=true:model.liger_kernel.loss=fused
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from ligerkit.proof.arms import loss_gap, summarize

VARIANTS = ("engine", "liger_sum_then_scale", "padded_labels")


def _liger_sum_then_scale(hidden, weight, labels, normalizer, bias=None, *, ignore_index=-100,
                          label_smoothing=0.0, softcap=None, chunk_tokens=1024):
    import torch
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    from ligerkit.loss.fused import liger_chunk_mem_const

    out = liger_fused_linear_cross_entropy(
        hidden, weight, labels, bias=bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
        reduction="sum", softcap=softcap, accum_dtype=torch.float32,
        chunk_mem_const=liger_chunk_mem_const(hidden.shape[0], hidden.shape[1], weight.shape[0], 1024))
    out = out[0] if isinstance(out, tuple) else out
    return out * (1.0 / normalizer)


def _padded_labels_loss_sum(logits, labels):
    import torch
    import torch.nn.functional as F

    shifted = torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), -100)], dim=1).reshape(-1)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), shifted, ignore_index=-100, reduction="sum")


def run_as_variant(variant: str, cli_args: list[str]) -> None:
    """Patch the engine for ``variant`` and run the ligerkit CLI with ``cli_args`` in this process."""
    if variant == "liger_sum_then_scale":
        import ligerkit.loss.fused as fused

        fused.liger_token_normalized_loss = _liger_sum_then_scale
    elif variant == "padded_labels":
        import ligerkit.engine.engine as engine

        engine.token_loss_sum = _padded_labels_loss_sum
    from ligerkit.cli import main as cli

    sys.argv = ["ligerkit", *cli_args]
    cli()


def run_arm(config: str, spec: str) -> dict:
    """One arm in a fresh process; its summary (losses, grad norms, tokens/s, peak memory)."""
    name, variant, *sets = spec.split(":")
    if variant not in VARIANTS:
        raise SystemExit(f"arm {name!r}: unknown variant {variant!r}; pick one of {', '.join(VARIANTS)}")
    cmd = [sys.executable, __file__, "--as-variant", variant, "train", config, "--json",
           "--set", "train.progress=false"]
    for item in sets:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode:
        raise SystemExit(f"arm {name!r} failed:\n{proc.stderr[-3000:]}")
    summary = summarize(json.loads(proc.stdout[proc.stdout.index("{"):]), 4)
    return {"variant": variant, "overrides": sets, **summary}


def main() -> None:
    """CLI."""
    if len(sys.argv) > 2 and sys.argv[1] == "--as-variant":
        run_as_variant(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("arms", nargs="+", help="NAME:VARIANT[:KEY=VALUE...]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    arms = {}
    for spec in args.arms:
        name = spec.split(":")[0]
        arms[name] = run_arm(args.config, spec)
        a = arms[name]
        peak = f"{a['peak_mem_gib']:.3f} GiB" if a["peak_mem_gib"] is not None else "n/a (no GPU)"
        print(f"{name}: {a['tokens_per_s']:,.0f} tokens/s, peak {peak}", flush=True)
    gaps = {f"{a} vs {b}": loss_gap(arms[a]["losses"], arms[b]["losses"]) for a, b in itertools.combinations(arms, 2)}
    for pair, gap in gaps.items():
        print(f"{pair}: max per-step loss gap {gap:.2e}", flush=True)
    Path(args.out).write_text(json.dumps({"config": args.config, "arms": arms, "max_loss_gaps": gaps}, indent=2))


if __name__ == "__main__":
    main()
