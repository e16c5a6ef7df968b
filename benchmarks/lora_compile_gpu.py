"""Why does compile mode with LoRA train differently on the H200? A diagnosis, arm by arm.

At the Qwen3-8B shape with LoRA, ``compile_fused`` matched eager's loss at step 1 and was 0.40 lower
at step 2 in every round, while eager, ``liger`` and ``liger_fused`` agreed within 2e-3; on the CPU the
same comparison agrees. This runs a small recipe config with LoRA in one process per arm (compile off
or ``ops``, loss ``standard`` or ``fused``) through ``ligerkit``'s own trainer, and records per step:
the loss and gradient norm; at step 1, the adapters' starting values (sum of magnitudes per kind), per adapter kind (``lora_A`` / ``lora_B``), how many gradient
entries are non-zero and their largest magnitude, how far the optimizer moved each kind, and the loss of
the same first batch after the update (the update's own effect, without the next batch's); and the
largest change of any frozen weight over the run (it must be 0). The arms are then compared with the
first one.

    python benchmarks/lora_compile_gpu.py --config recipes/qwen3/configs/gpu.yaml --out lora_compile.json
    python benchmarks/lora_compile_gpu.py --config recipes/qwen3/configs/cpu.yaml --device cpu --out cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ARMS = {"eager": ("train.compile=off", "train.loss.path=standard"),
        "eager_fused": ("train.compile=off", "train.loss.path=fused"),
        "compile": ("train.compile=ops", "train.loss.path=standard"),
        "compile_fused": ("train.compile=ops", "train.loss.path=fused"),
        "float32": ("train.compile=off", "train.loss.path=standard", "model.dtype=float32")}
LORA = "train.lora={rank: 16, alpha: 32}"


def run_arm(config: str, lines: list[str], device: str, run_dir: str) -> dict:
    """One arm in this process: train with the lines, return what the module docstring lists."""
    import torch

    from ligerkit.train import Trainer, load_engine

    engine = load_engine(Path(config), [*lines, "train.run.progress=false", f"train.run.output_dir={run_dir}"])
    found: dict = {"step1_grads": {}, "step1_moves": {}}

    class Watching(Trainer):
        def train_step(self, model, optimizer, batches, device, step=0, data=None):  # noqa: ANN001, D102
            params = dict(model.named_parameters())
            before = {n: p.detach().clone() for n, p in params.items() if step == 0 and ".lora_" in n}
            if step == 0:  # the adapters' starting values: every arm must start from the same ones
                found["lora_init"] = {kind: float(sum(p.detach().double().abs().sum() for n, p in params.items()
                                                      if f".{kind}." in n)) for kind in ("lora_A", "lora_B")}
                found["frozen_before"] = [(p, p.detach().float().clone()) for p in list(params.values())[:50]
                                          if not p.requires_grad]
            out = super().train_step(model, optimizer, batches, device, step, data)
            if step == 0:  # the first update's effect on the same batch, without the next batch's variation
                from ligerkit.loss import valid_tokens
                from ligerkit.train.step import device_batch

                with torch.no_grad():
                    same = [model(device_batch(b, device, self.config.train.drop_right_padding_mask), 1.0)
                            for b in batches]
                tokens = sum(valid_tokens(b["labels"]) for b in batches)
                found["step1_loss_before"] = out[0]
                found["step1_same_batch_loss_after"] = float(sum(same)) / max(tokens, 1)
            for n, b in before.items():
                kind = "lora_A" if ".lora_A." in n else "lora_B"
                move = float((params[n].detach().float() - b.float()).abs().max())
                found["step1_moves"][kind] = max(found["step1_moves"].get(kind, 0.0), move)
            return out

    from ligerkit.train import update as U

    real_clip = U.clip_to

    def watching_clip(model, max_norm, norm):  # noqa: ANN001, ANN202 (the step-1 gradients, before the clip)
        if not found["step1_grads"]:
            for n, p in model.named_parameters():
                if ".lora_" in n and p.grad is not None:
                    kind = "lora_A" if ".lora_A." in n else "lora_B"
                    g = found["step1_grads"].setdefault(kind, {"nonzero": 0, "total": 0, "max": 0.0})
                    g["nonzero"] += int((p.grad != 0).sum())
                    g["total"] += p.grad.numel()
                    g["max"] = max(g["max"], float(p.grad.abs().max()))
        return real_clip(model, max_norm, norm)

    trainer = Watching(engine)
    U.clip_to = watching_clip
    try:
        result = trainer.train(torch.device(device))
    finally:
        U.clip_to = real_clip
    if not found["step1_grads"]:
        raise RuntimeError("no adapter gradient was seen before the first update: the hook on "
                           "ligerkit.train.update.clip_to did not run")
    frozen_moved = max((float((p.detach().float() - b).abs().max()) for p, b in found.pop("frozen_before")),
                       default=0.0)
    return {"losses": [s.loss for s in result.steps], "grad_norms": [s.grad_norm for s in result.steps],
            "frozen_moved": frozen_moved, **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="recipes/qwen3/configs/gpu.yaml")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--set", action="append", default=[], help="more config lines for every arm")
    parser.add_argument("--out", required=True)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        lines = json.loads(args.child)
        with tempfile.TemporaryDirectory() as run_dir:  # the run folders stay out of the result's folder
            print(json.dumps(run_arm(args.config, lines, args.device, run_dir)))
        return
    results = {}
    for arm in args.arms.split(","):
        lines = [LORA, f"train.steps={args.steps}", *ARMS[arm], *args.set]
        proc = subprocess.run([sys.executable, __file__, "--config", args.config, "--device", args.device,
                               "--out", args.out, "--child", json.dumps(lines)], capture_output=True, text=True)
        if proc.returncode:
            results[arm] = {"error": proc.stderr[-2000:]}
        else:
            results[arm] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(arm, json.dumps({k: v for k, v in results[arm].items() if k != "error"} or results[arm])[:600],
              flush=True)
    first = next(iter(results.values()))
    for arm, r in results.items():
        if "losses" in r and "losses" in first:
            r["loss_gap_vs_first"] = [abs(a - b) for a, b in zip(r["losses"], first["losses"], strict=False)]
    Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
