"""GPU: Hugging Face Trainer and TRL's SFTTrainer with the kit, Liger on vs off, side by side.

One Qwen3 checkpoint (random weights, the Qwen3-0.6B shape by default) is written once; then

- **speed and loss**: each arm is ``examples/hf_trainer.py`` or ``examples/trl_sft.py`` in its own
  process for ``--steps`` steps (bf16): Trainer with the model's loss, Liger off / kit on / kit on +
  ``FusedTokenLossTrainer``; SFTTrainer with TRL's chunked LM head, Liger off / kit on, and kit on +
  ``LigerKitSFTTrainer`` (ligerkit's fused token loss instead of TRL's head). Per-step losses, median
  tokens/s after the first step, peak memory, ratios against the Liger-off arm of the same trainer;
- **gradients at step 1**, in one process with the kit reverted between arms: each trainer runs one
  step (no clipping) in float32 with Liger off (the truth), bf16 off, bf16 with the kit, and bf16 with
  the kit and the fused loss; every parameter's gradient is compared with the float32 one (patched
  within 2x eager's relative error + 0.01, ``ligerkit.probe.tolerance``).

    python benchmarks/integrations_gpu.py --out integrations.json [--markdown]
    python benchmarks/integrations_gpu.py --out x.json --tiny --liger off    # plumbing check on a CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import _common  # noqa: E402

ARMS = {  # name: (example, liger, loss path)
    "hf_off": ("hf_trainer", "off", "model"), "hf_kit": ("hf_trainer", "on", "model"),
    "hf_kit_fused": ("hf_trainer", "on", "fused"),
    "trl_off": ("trl_sft", "off", "trl"), "trl_kit": ("trl_sft", "on", "trl"), "trl_kit_fused": ("trl_sft", "on", "fused"),
}


def run_arm(name: str, ckpt: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One arm in a fresh process (the kit's swaps never leak from one arm into another)."""
    script, liger, loss = ARMS[name]
    liger = "off" if args.liger == "off" else liger
    out = work / f"{name}.json"
    cmd = [sys.executable, str(EXAMPLES / f"{script}.py"), "--model", str(ckpt), "--liger", liger, "--loss", loss,
           "--steps", str(args.steps), "--batch", str(args.batch), "--grad-accum", "1", "--seq-len", str(args.seq_len),
           "--lr", "1e-4", "--output-dir", str(work / name), "--json", str(out)]
    if torch.cuda.is_available():
        cmd += ["--dtype", "bfloat16"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=EXAMPLES)
    if done.returncode != 0:
        raise SystemExit(f"arm {name} failed:\n{done.stderr[-4000:]}")
    print(f"{name}: done", flush=True)
    return json.loads(out.read_text())


def compare(base: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    """An arm against its trainer's Liger-off arm: loss gap per step, speed and memory ratios."""
    gaps = [abs(a - b) / max(abs(a), 1e-6) for a, b in zip(base["losses"], arm["losses"], strict=True)]
    mem = arm["peak_mem_gib"] / base["peak_mem_gib"] if base["peak_mem_gib"] and arm["peak_mem_gib"] else None
    return {"max_rel_loss_gap": max(gaps), "final_loss": arm["losses"][-1], "base_final_loss": base["losses"][-1],
            "tokens_per_s_ratio": arm["tokens_per_s"] / base["tokens_per_s"], "peak_mem_ratio": mem,
            "tokens_per_s": arm["tokens_per_s"], "peak_mem_gib": arm["peak_mem_gib"], "swaps": arm.get("swaps"),
            "wrappers": arm.get("wrappers")}


class GradGrab(_common.TrainerCallback):
    """Copies every parameter's gradient (float32) right before the first optimizer step."""

    def __init__(self) -> None:
        self.grads: dict[str, torch.Tensor] = {}

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        """Keep the gradients of step 1."""
        if not self.grads:
            self.grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()
                          if p.grad is not None}


def step1_grads(kind: str, ckpt: Path, liger: bool, fused: bool, dtype: torch.dtype, args: argparse.Namespace,
                work: Path) -> tuple[dict[str, torch.Tensor], float]:
    """One optimizer step of ``kind`` (hf or trl): the gradients and the loss."""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from trl import SFTConfig, SFTTrainer

    from ligerkit.integrations import FusedTokenLossTrainer, LigerKitSFTTrainer, load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = (load_model(ckpt, dtype=dtype) if liger else
             AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, local_files_only=True))
    common = dict(output_dir=str(work / f"grads_{kind}"), max_steps=1, per_device_train_batch_size=args.batch,
                  learning_rate=1e-4, max_grad_norm=0.0, report_to=[], save_strategy="no", seed=0,
                  use_cpu=device == "cpu", bf16=dtype == torch.bfloat16, logging_steps=1)
    grab = GradGrab()
    data = _common.samples(64, args.seq_len)
    try:
        if kind == "hf":
            cls = FusedTokenLossTrainer if fused else Trainer
            trainer = cls(model=model, args=TrainingArguments(**common), train_dataset=data,
                          data_collator=_common.collate, callbacks=[grab])
        else:
            cls = LigerKitSFTTrainer if fused else SFTTrainer
            rows = [{"input_ids": s["input_ids"][s["attention_mask"].bool()].tolist()} for s in data]
            from datasets import Dataset
            from transformers import AutoTokenizer

            trainer = cls(model=model, args=SFTConfig(**common, max_length=args.seq_len,
                                                      dataset_kwargs={"skip_prepare_dataset": True}),
                          train_dataset=Dataset.from_list(rows), callbacks=[grab],
                          processing_class=AutoTokenizer.from_pretrained(ckpt, local_files_only=True))
        trainer.train()
        loss = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    finally:
        if liger:
            model.ligerkit.kit.revert()
    grads = {n: g.cpu() for n, g in grab.grads.items()}
    del trainer, model
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return grads, loss


def grad_parity(kind: str, ckpt: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Per-parameter relative gradient errors at step 1 against float32, for each bf16 arm."""
    from ligerkit.probe.tolerance import GradTolerance, relative_error

    low = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    on = args.liger != "off"
    truth, loss32 = step1_grads(kind, ckpt, False, False, torch.float32, args, work)
    eager, loss_eager = step1_grads(kind, ckpt, False, False, low, args, work)
    eager_err = {n: relative_error(eager[n], truth[n]) for n in truth}
    tol = GradTolerance()
    result: dict[str, Any] = {"losses": {"float32": loss32, "eager": loss_eager}, "tensors": len(truth),
                              "max_eager": max(eager_err.values())}
    for arm, fused in (("kit", False), ("kit_fused", True)):
        grads, loss = step1_grads(kind, ckpt, on, fused, low, args, work)
        if set(grads) != set(truth):
            raise SystemExit(f"{kind} {arm}: parameter names differ from the float32 arm")
        errors = {n: relative_error(grads[n], truth[n]) for n in truth}
        failures = sorted((n for n in truth if not errors[n] <= tol.bound(eager_err[n])),
                          key=lambda n: -errors[n] / tol.bound(eager_err[n]))
        worst = max(truth, key=lambda n: errors[n] / tol.bound(eager_err[n]))
        result["losses"][arm] = loss
        result[arm] = {"passed": not failures, "max_patched": max(errors.values()), "failures": failures[:5],
                       "worst": {"name": worst, "patched": errors[worst], "eager": eager_err[worst],
                                 "bound": tol.bound(eager_err[worst])}}
        print(f"{kind} {arm} gradients: {'PASS' if not failures else 'FAIL'}", flush=True)
    return result


def markdown(result: dict[str, Any]) -> str:
    """The tables docs/benchmarks.md quotes."""
    lines = ["| arm | vs | max rel. loss gap (steps) | tokens/s ratio | peak memory ratio | tokens/s | peak GiB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in result["speed"].items():
        mem = f"{row['peak_mem_ratio']:.3f}x" if row["peak_mem_ratio"] else "-"
        gib = f"{row['peak_mem_gib']:.1f}" if row["peak_mem_gib"] else "-"
        lines.append(f"| {name} | {row['vs']} | {row['max_rel_loss_gap']:.2e} ({result['steps']}) | "
                     f"{row['tokens_per_s_ratio']:.2f}x | {mem} | {row['tokens_per_s']:,.0f} | {gib} |")
    lines += ["", "| trainer | arm | gradients at step 1 | max rel. error (eager bf16) | worst tensor: error / bound |",
              "| --- | --- | --- | --- | --- |"]
    for kind, g in result["grads"].items():
        for arm in ("kit", "kit_fused"):
            w = g[arm]["worst"]
            lines.append(f"| {kind} | {arm} | {'PASS' if g[arm]['passed'] else 'FAIL'} ({g['tensors']} tensors) | "
                         f"{g[arm]['max_patched']:.3g} ({g['max_eager']:.3g}) | {w['name']}: {w['patched']:.3g} / "
                         f"{w['bound']:.3g} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--grad-seq-len", type=int, default=1024, help="sequence length of the gradient arms")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (plumbing check)")
    parser.add_argument("--liger", choices=("on", "off"), default="on", help="off: every arm unpatched (CPU check)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="integrations_"))
    shape = _common.TINY if args.tiny else _common.QWEN3_06B
    ckpt = _common.checkpoint(work / "ckpt", shape, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    print(f"checkpoint written: {ckpt}", flush=True)
    result: dict[str, Any] = {"shape": shape, "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len,
                              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                              "speed": {}, "grads": {}, "runs": {}}

    def save() -> None:  # after every stage: a run cut short keeps what it measured
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    runs = result["runs"]
    for name in ARMS:
        runs[name] = run_arm(name, ckpt, args, work)
        if not name.endswith("_off"):
            base = name.split("_")[0] + "_off"
            result["speed"][name] = {"vs": base, **compare(runs[base], runs[name])}
        save()
    grad_args = argparse.Namespace(**{**vars(args), "seq_len": args.grad_seq_len, "batch": 2})
    for kind in ("hf", "trl"):
        result["grads"][kind] = grad_parity(kind, ckpt, grad_args, work)
        save()
    print(markdown(result) if args.markdown else json.dumps({k: result[k] for k in ("speed", "grads")}, indent=2))


if __name__ == "__main__":
    main()
