"""GPU: one micro-batch's gradients on the standard and the fused loss paths, against a float32 truth.

The recipe's model (Liger's kernel swaps off, so only the loss path differs) computes the
gradient of the token-normalized loss on one micro-batch four ways: the standard path (full bf16
logits, float32 cross entropy), the fused path through Liger's FLCE, the fused path through the
chunked PyTorch implementation, and the standard path on a float32 copy of the same weights (the
reference). For each, the total gradient norm and the relative error ``|g - g_ref| / |g_ref|`` of
every parameter are reported (worst parameters listed), so a systematic difference shows as a
larger error than the standard path's own bf16 rounding.

    python benchmarks/loss_grads_gpu.py recipes/qwen3/configs/gpu.yaml --out grads.json
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch

from ligerkit.loss import token_loss_sum, valid_tokens
from ligerkit.train.loading import load_engine
from ligerkit.loss import fused_linear_token_loss, output_head


def grads(engine, model, batch, mode: str, count: float, chunk: int | None) -> dict[str, torch.Tensor]:
    """Gradients of one micro-batch's normalized loss, by loss path ``mode``."""
    model.zero_grad(set_to_none=True)
    if mode == "standard":
        loss = token_loss_sum(engine.forward_logits(model, batch), batch["labels"]) / count
    else:
        head = output_head(model)
        hidden = engine.forward_hidden(model, batch)
        loss = fused_linear_token_loss(hidden, head.weight, batch["labels"], count, head.bias,
                                       backend=mode, chunk_tokens=chunk)
    loss.backward()
    return {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}


def total_norm(grads: dict[str, torch.Tensor]) -> float:
    """The norm of all gradients together (float64 sum)."""
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))


def compare(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], ref_total: float) -> dict:
    """Total norm and per-parameter relative errors of ``got`` against ``ref`` (whose norm is ``ref_total``)."""
    errors = {n: float((got[n] - r).norm() / r.norm().clamp_min(1e-30)) for n, r in ref.items() if n in got}
    missing = sorted(set(ref) - set(got))
    total = total_norm(got)
    diff = total_norm({n: got[n] - r for n, r in ref.items() if n in got})
    worst = sorted(errors.items(), key=lambda kv: -kv[1])[:6]
    return {"total_norm": total, "total_rel_error": diff / ref_total, "missing": missing, "worst": worst}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    engine = load_engine(args.config, ["model.liger_kernel.enabled=false", *args.overrides])
    device = torch.device("cuda")
    model = engine.prepare_model(device)
    reference = copy.deepcopy(model).float()
    vocab = model.get_output_embeddings().weight.shape[0]
    batch = engine.micro_batches(0, vocab)[0]
    count = float(valid_tokens(batch["labels"]))
    batch = engine.device_batch(batch, device)
    ref = grads(engine, reference, batch, "standard", count, None)
    ref_total = total_norm(ref)
    result = {"config": args.config, "valid_tokens": count, "reference_total_norm": ref_total}
    for name, mode, chunk in [("standard_bf16", "standard", None), ("fused_liger", "liger", None),
                              ("fused_liger_chunk128", "liger", 128), ("fused_torch_bf16", "torch", None)]:
        result[name] = compare(grads(engine, model, batch, mode, count, chunk), ref, ref_total)
        r = result[name]
        print(f"{name}: total norm {r['total_norm']:.5f} (ref {result['reference_total_norm']:.5f}), "
              f"total rel error {r['total_rel_error']:.2e}, missing {r['missing']}, worst "
              + ", ".join(f"{n} {e:.1e}" for n, e in r["worst"][:4]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
