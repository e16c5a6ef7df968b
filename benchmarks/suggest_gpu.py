"""GPU proof for ``suggest``: every family whose map it writes trains the same with and without it.

Parity: for each family of ``tests/verify_expectations.py`` that ``suggest`` maps, a tiny config
(hidden 64, 2 layers) trains 10 steps without Liger and, in a separate process, with the suggested
``custom_patches`` applied through the kit; per-step losses must agree within 1e-2. Speed: one
Llama-like family Liger has no helper for (``diffllama``) at Qwen3-0.6B scale (hidden 1024,
28 layers, bf16, batch 4 x 4096), suggested map vs none.

    python benchmarks/suggest_gpu.py parity --out parity.json
    python benchmarks/suggest_gpu.py speed --out speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SPEED_FAMILY = "diffllama"
SPEED_DIMS = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=64, vocab_size=151936, max_position_embeddings=8192)


def _family_config(family: str, dims: dict | None) -> tuple[object, object]:
    from verify_expectations import FAMILIES

    from ligerkit.suggest import load_config, load_module

    spec = FAMILIES[family]
    module = load_module(spec["module"])
    return module, load_config(spec["config_class"], module, dims)


def _patches(family: str, dims: dict | None) -> tuple[dict, object]:
    from verify_expectations import FAMILIES

    from ligerkit import LigerPatch
    from ligerkit.probe.catalog import CATALOG
    from ligerkit.suggest import suggest

    spec = FAMILIES[family]
    found = suggest(spec["module"], spec["config_class"], dims)
    objs = {r.name: r.obj for r in CATALOG}
    patches: dict[str, list] = {}
    for c in found.matched:
        patches.setdefault(c.module_name, []).append(LigerPatch(found.module, c.symbol, objs[c.replacement]))
    return patches, found


def train_family(family: str, liger: bool, steps: int, batch: int, seq: int, dims: dict | None,
                 warmup: int = 2) -> dict:
    """Train one family's causal LM in this process; with ``liger`` the suggested map is applied first."""
    import torch
    from transformers.models.auto import modeling_auto

    from ligerkit import LigerKernelKit
    from ligerkit.hf import model_class_for

    _, config = _family_config(family, dims)
    if config.model_type not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return {"family": family, "skipped": "not a causal LM (no causal-LM head to train)"}
    kit = LigerKernelKit()
    swaps = 0
    try:
        if liger:
            patches, _ = _patches(family, dims)
            report = kit.apply(model_family=family, custom_patches=patches, config=config)
            swaps = len(report.patched)
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = model_class_for(config)._from_config(config).to(torch.bfloat16)
        if liger:
            kit.verify(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        vocab = config.vocab_size
        losses, times = [], []
        for _ in range(steps):
            motif = torch.randint(3, vocab, (batch, 16), generator=g)
            ids = motif.repeat(1, seq // 16).cuda()
            torch.cuda.synchronize()
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            losses.append(loss.item())
        return {"family": family, "losses": losses, "swaps": swaps,
                "tokens_per_s": batch * seq / statistics.median(times[warmup:]),
                "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}
    except Exception as exc:
        return {"family": family, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
    finally:
        kit.revert()


def _spawn(args: list[str]) -> list[dict]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["parity", "speed", "arm"])
    parser.add_argument("--liger", action="store_true")
    parser.add_argument("--families", default="")
    parser.add_argument("--scale", choices=["tiny", "speed"], default="tiny")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.mode == "arm":
        dims = SPEED_DIMS if args.scale == "speed" else None
        steps, batch, seq = (12, 4, 4096) if args.scale == "speed" else (10, 4, 256)
        rows = [train_family(f, args.liger, steps, batch, seq, dims) for f in args.families.split(",")]
        print(json.dumps(rows))
        return
    from verify_expectations import FAMILIES

    if args.mode == "parity":
        families = [f for f, s in FAMILIES.items() if any(v != "leave_off" for v, _ in s["expect"].values())]
        common = ["arm", "--families", ",".join(families)]
        off, on = _spawn(common), _spawn([*common, "--liger"])
        rows = []
        for a, b in zip(off, on, strict=True):
            row = {"family": a["family"], "off": a, "on": b}
            if "losses" in a and "losses" in b:
                row["max_loss_gap"] = max(abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True))
                row["parity"] = row["max_loss_gap"] <= 1e-2
            rows.append(row)
            print(a["family"], row.get("max_loss_gap"), b.get("swaps"), a.get("skipped") or a.get("error") or
                  b.get("error") or "", flush=True)
        result = {"rows": rows}
    else:
        common = ["arm", "--families", SPEED_FAMILY, "--scale", "speed"]
        off, on = _spawn(common)[0], _spawn([*common, "--liger"])[0]
        result = {"family": SPEED_FAMILY, "dims": SPEED_DIMS, "off": off, "on": on}
        if "tokens_per_s" in off and "tokens_per_s" in on:
            result["speedup"] = on["tokens_per_s"] / off["tokens_per_s"]
            result["memory_ratio"] = on["peak_mem_gib"] / off["peak_mem_gib"]
            result["max_loss_gap"] = max(abs(x - y) for x, y in zip(off["losses"], on["losses"], strict=True))
        print(json.dumps({k: v for k, v in result.items() if k not in ("off", "on")}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
