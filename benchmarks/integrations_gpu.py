"""GPU: Hugging Face Trainer and TRL's SFTTrainer with the kit, Liger on vs off, side by side.

One Qwen3 checkpoint (random weights, the Qwen3-0.6B shape by default) is written once; then

- **speed and memory, in rounds**: every arm is ``examples/hf_trainer.py`` or ``examples/trl_sft.py``
  in its own process (the kit's swaps never leak between arms) for ``--steps`` steps (bf16), the arms
  interleaved round by round (``--rounds``, default 3), so drift or a neighbour on the machine slows
  every arm of a round alike. An arm's tokens/s in a round is the median over its steps after the
  first ``--warmup``; the table gives the median over rounds with the spread (min-max), and the speed
  ratio against the same trainer's Liger-off arm is the median of the per-round ratios. Arms: HF
  Trainer with the model's loss, Liger off / kit / kit + ``FusedLossTrainer``; SFTTrainer with
  TRL's chunked LM head, Liger off / kit / kit + ``LigerKitSFTTrainer``, each with TRL's default
  gradient checkpointing (on) and with it off (``_nogc``);
- **where the time goes** (``--profile``): one more process per arm trains ``--warmup`` steps, then
  profiles ``--active`` steps with ``torch.profiler`` (GPU kernel time by kind, the time no kernel
  ran, the host operators with the most self time) and counts the host-device synchronizations per
  step with their source lines (CUDA's sync debug mode, ``ligerkit.proof.syncs``);
- **gradients at step 1**, in one process with the kit reverted between arms: each trainer runs one
  step (no clipping) in float32 with Liger off (the truth), bf16 off, bf16 with the kit, and bf16 with
  the kit and the fused loss; every parameter's gradient is compared with the float32 one (patched
  within 2x eager's relative error + 0.01, ``ligerkit.probe.tolerance``).

    python benchmarks/integrations_gpu.py --out integrations.json --profile [--markdown]
    python benchmarks/integrations_gpu.py --out x.json --arms hf_off,hf_kit_fused --rounds 3 --no-grads
    python benchmarks/integrations_gpu.py --out x.json --tiny --liger off --rounds 1 --steps 4 --warmup 1  # CPU plumbing
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import _common  # noqa: E402

MARK = "MEASURE_JSON "
ARMS = {  # name: (example, liger, loss path, more arguments)
    "hf_off": ("hf_trainer", "off", "model", ()), "hf_kit": ("hf_trainer", "on", "model", ()),
    "hf_kit_fused": ("hf_trainer", "on", "fused", ()),
    "trl_off": ("trl_sft", "off", "trl", ()), "trl_kit": ("trl_sft", "on", "trl", ()),
    "trl_kit_fused": ("trl_sft", "on", "fused", ()),
    "trl_off_nogc": ("trl_sft", "off", "trl", ("--gradient-checkpointing", "off")),
    "trl_kit_nogc": ("trl_sft", "on", "trl", ("--gradient-checkpointing", "off")),
    "trl_kit_fused_nogc": ("trl_sft", "on", "fused", ("--gradient-checkpointing", "off")),
}


def base_of(name: str) -> str:
    """The Liger-off arm an arm is compared with (same trainer, same gradient checkpointing)."""
    trainer = name.split("_")[0]
    return f"{trainer}_off_nogc" if name.endswith("_nogc") else f"{trainer}_off"


def arm_argv(name: str, ckpt: Path, args: argparse.Namespace, work: Path, steps: int) -> list[str]:
    """The example's command-line arguments for one arm."""
    _, liger, loss, more = ARMS[name]
    liger = "off" if args.liger == "off" else liger
    argv = ["--model", str(ckpt), "--liger", liger, "--loss", loss, "--steps", str(steps), "--batch", str(args.batch),
            "--grad-accum", "1", "--seq-len", str(args.seq_len), "--lr", "1e-4", "--output-dir", str(work / name), *more]
    return argv + (["--dtype", "bfloat16"] if torch.cuda.is_available() else [])


def run_arm(name: str, ckpt: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One arm in a fresh process: its per-step losses and times, tokens/s after the warm-up, memory."""
    out = work / f"{name}.json"
    cmd = [sys.executable, str(EXAMPLES / f"{ARMS[name][0]}.py"), *arm_argv(name, ckpt, args, work, args.steps),
           "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=EXAMPLES)
    if done.returncode != 0:
        raise SystemExit(f"arm {name} failed:\n{done.stderr[-4000:]}")
    result = json.loads(out.read_text())
    timed = result["step_seconds"][args.warmup:] or result["step_seconds"]
    result["tokens_per_s"] = result["tokens_per_step"] / statistics.median(timed)
    return result


class Measure(_common.TrainerCallback):
    """After ``warmup`` optimizer steps, profiles ``active`` steps and counts their synchronizations."""

    def __init__(self, warmup: int, active: int):
        self.warmup, self.active, self.done = warmup, active, 0
        self.prof: Any = None
        self.syncs: Any = None
        self.began = 0.0
        self.summary: dict[str, Any] = {}

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """Start measuring at the first step after the warm-up."""
        if state.global_step != self.warmup or self.prof is not None:
            return
        from torch.profiler import ProfilerActivity, profile

        from ligerkit.proof.syncs import SyncCounter

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()
        self.syncs = SyncCounter() if torch.cuda.is_available() else None
        if self.syncs is not None:
            self.syncs.__enter__()
        self.began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """Count the step; after ``active`` of them, stop and summarize."""
        if self.prof is None or self.summary:
            return
        if self.syncs is not None:
            self.syncs.step()
        self.done += 1
        if self.done < self.active:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - self.began) * 1e3
        if self.syncs is not None:
            self.syncs.__exit__(None, None, None)
        self.prof.__exit__(None, None, None)
        from ligerkit.proof.kernel_time import host_ops, profiled_kernels, summarize_kernels

        self.summary = summarize_kernels(profiled_kernels(self.prof), self.active, wall_ms)
        self.summary["host_ops"] = host_ops(self.prof, self.active)
        self.summary["syncs_per_step"] = self.syncs.per_step if self.syncs is not None else None
        self.summary["sync_sources"] = self.syncs.sources() if self.syncs is not None else None


def measure_child(name: str, ckpt: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """In this process: one arm trained ``warmup + active`` steps, the last ``active`` measured."""
    example = importlib.import_module(ARMS[name][0])
    measure = Measure(args.warmup, args.active)
    example.main(arm_argv(name, ckpt, args, work, args.warmup + args.active), callbacks=[measure])
    if not measure.summary:
        raise SystemExit(f"arm {name}: the profiled steps never ran")
    return measure.summary


def profile_arm(name: str, ckpt: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``measure_child`` in a fresh process."""
    cmd = [sys.executable, __file__, "--child", name, "--ckpt", str(ckpt), "--work", str(work), "--out", "-",
           "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--warmup", str(args.warmup),
           "--active", str(args.active), "--liger", args.liger]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=EXAMPLES)
    if done.returncode != 0 or MARK not in done.stdout:
        return {"error": done.stderr[-3000:]}
    return json.loads(done.stdout[done.stdout.rindex(MARK) + len(MARK):])


def spread(values: list[float]) -> dict[str, float]:
    """Median, minimum and maximum."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(rounds: dict[str, list[dict[str, Any]]], name: str) -> dict[str, Any]:
    """An arm against its trainer's Liger-off arm over every round: loss gap per step (round 1),
    tokens/s and memory, and the per-round speed ratios' median and spread."""
    base_name = base_of(name)
    base, arm = rounds[base_name], rounds[name]
    gaps = [abs(a - b) / max(abs(a), 1e-6) for a, b in zip(base[0]["losses"], arm[0]["losses"], strict=True)]
    ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(arm, base, strict=True)]
    mem = [a["peak_mem_gib"] / b["peak_mem_gib"] for a, b in zip(arm, base, strict=True)
           if a["peak_mem_gib"] and b["peak_mem_gib"]]
    return {"vs": base_name, "max_rel_loss_gap": max(gaps), "final_loss": arm[0]["losses"][-1],
            "base_final_loss": base[0]["losses"][-1], "tokens_per_s_ratio": spread(ratios),
            "tokens_per_s": spread([a["tokens_per_s"] for a in arm]),
            "peak_mem_ratio": statistics.median(mem) if mem else None,
            "peak_mem_gib": arm[0]["peak_mem_gib"], "swaps": arm[0].get("swaps"), "wrappers": arm[0].get("wrappers"),
            "gradient_checkpointing": arm[0].get("gradient_checkpointing")}


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

    from ligerkit.integrations import FusedLossTrainer, LigerKitSFTTrainer, load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = (load_model(ckpt, dtype=dtype) if liger else
             AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, local_files_only=True, use_kernels=False))
    common = dict(output_dir=str(work / f"grads_{kind}"), max_steps=1, per_device_train_batch_size=args.batch,
                  learning_rate=1e-4, max_grad_norm=0.0, report_to=[], save_strategy="no", seed=0,
                  use_cpu=device == "cpu", bf16=dtype == torch.bfloat16, logging_steps=1)
    grab = GradGrab()
    data = _common.samples(64, args.seq_len)
    try:
        if kind == "hf":
            cls = FusedLossTrainer if fused else Trainer
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
    rounds = result["rounds"]
    lines = [f"| arm | vs | tokens/s, median of {rounds} (min-max) | tokens/s ratio (min-max) | peak memory ratio | "
             "peak GiB | max rel. loss gap |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in result["speed"].items():
        t, r = row["tokens_per_s"], row["tokens_per_s_ratio"]
        mem = f"{row['peak_mem_ratio']:.3f}x" if row["peak_mem_ratio"] else "-"
        gib = f"{row['peak_mem_gib']:.1f}" if row["peak_mem_gib"] else "-"
        gap = f"{row['max_rel_loss_gap']:.2e}" if row["max_rel_loss_gap"] is not None else "-"
        lines.append(f"| {name} | {row['vs'] or '-'} | {t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f}) | "
                     f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}) | {mem} | {gib} | {gap} |")
    if result.get("profile"):
        lines += ["", "| arm | step ms | no kernel ms | kernels by kind, ms per step | syncs per step | top sync source |",
                  "| --- | ---: | ---: | --- | ---: | --- |"]
        for name, p in result["profile"].items():
            if "error" in p:
                lines.append(f"| {name} | failed | | | | |")
                continue
            kinds = ", ".join(f"{k} {v:.1f}" for k, v in list(p["kinds_ms"].items())[:6])
            syncs = p.get("syncs_per_step") or []
            top = next(iter(p.get("sync_sources") or {}), "-")
            lines.append(f"| {name} | {p['step_ms']:.1f} | {p['no_kernel_ms']:.1f} | {kinds} | "
                         f"{statistics.median(syncs) if syncs else '-'} | {top} |")
    if result.get("grads"):
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
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of: {', '.join(ARMS)}")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every arm (medians over them)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timing (and before profiling)")
    parser.add_argument("--active", type=int, default=3, help="profiled steps with --profile")
    parser.add_argument("--profile", action="store_true", help="also profile every arm and count its syncs")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--grad-seq-len", type=int, default=1024, help="sequence length of the gradient arms")
    parser.add_argument("--no-grads", action="store_true", help="skip the step-1 gradient comparison")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (plumbing check)")
    parser.add_argument("--liger", choices=("on", "off"), default="on", help="off: every arm unpatched (CPU check)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one profiled arm, in this process
    parser.add_argument("--ckpt", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(measure_child(args.child, Path(args.ckpt), args, Path(args.work))), flush=True)
        return
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    if args.rounds < 1 or args.steps <= args.warmup:
        parser.error("--rounds must be at least 1 and --steps more than --warmup")
    work = Path(tempfile.mkdtemp(prefix="integrations_"))
    shape = _common.TINY if args.tiny else _common.QWEN3_06B
    ckpt = _common.checkpoint(work / "ckpt", shape, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    print(f"checkpoint written: {ckpt}", flush=True)
    result: dict[str, Any] = {"shape": shape, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                              "batch": args.batch, "seq_len": args.seq_len,
                              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                              "speed": {}, "profile": {}, "grads": {}, "runs": {a: [] for a in arms}}

    def save() -> None:  # after every arm: a run cut short keeps what it measured
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    for r in range(args.rounds):
        for name in arms:
            began = time.perf_counter()
            result["runs"][name].append(run_arm(name, ckpt, args, work))
            print(f"round {r + 1} {name}: {result['runs'][name][-1]['tokens_per_s']:,.0f} tokens/s "
                  f"({time.perf_counter() - began:.0f} s)", flush=True)
            save()
    for name in arms:
        if base_of(name) in arms and name != base_of(name):
            result["speed"][name] = compare(result["runs"], name)
        else:
            result["speed"][name] = {"vs": None, "max_rel_loss_gap": None, "tokens_per_s_ratio": spread([1.0]),
                                     "tokens_per_s": spread([x["tokens_per_s"] for x in result["runs"][name]]),
                                     "peak_mem_ratio": None, "peak_mem_gib": result["runs"][name][0]["peak_mem_gib"]}
    save()
    if args.profile:
        for name in arms:
            result["profile"][name] = profile_arm(name, ckpt, args, work)
            print(f"profiled {name}", flush=True)
            save()
    if not args.no_grads:
        grad_args = argparse.Namespace(**{**vars(args), "seq_len": args.grad_seq_len, "batch": 2})
        for kind in sorted({ARMS[a][0].split("_")[0] for a in arms}):
            result["grads"][kind] = grad_parity(kind, ckpt, grad_args, work)
            save()
    print(markdown(result) if args.markdown else json.dumps({k: result[k] for k in ("speed", "grads")}, indent=2))


if __name__ == "__main__":
    main()
