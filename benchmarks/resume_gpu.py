"""GPU: a run interrupted and resumed follows the uninterrupted curve; checkpoint save and load times.

The ``qwen3`` recipe at its GPU config (Qwen3-0.6B shape, batch 4 x 4096, Liger on, deterministic
kernels so the same command repeats bit for bit), three processes: ``whole`` trains ``--steps``
steps without checkpoints; ``cut`` trains the same with a checkpoint every ``--every`` steps and
stops after ``--stop`` steps (exit 75, resumable, a checkpoint written at the stop); ``resumed``
continues ``cut`` from its newest checkpoint. Under torchrun
(``--nproc 2``) the checkpoint is sharded by FSDP2 (each rank writes its shards).

    python benchmarks/resume_gpu.py --out resume.json [--nproc 2] [--config CONFIG]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ligerkit.proof.arm_runs import ArmFailedError, run_arm

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--stop", type=int, default=6)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--config", default=str(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"),
                        help="the recipe config to run (a CPU config checks this script without a GPU)")
    args = parser.parse_args()
    config = Path(args.config)
    work = Path(tempfile.mkdtemp(prefix="resume_"))
    plain = [f"train.steps={args.steps}", "train.deterministic=true", "train.run.progress=false"]
    base = [*plain, f"train.run.checkpoint_every={args.every}", "train.run.keep_checkpoints=1"]
    whole = run_arm(config, [*plain, f"train.run.output_dir={work / 'whole'}"], nproc=args.nproc)
    try:
        run_arm(config, [*base, f"train.run.output_dir={work / 'cut'}", f"train.run.stop_after_steps={args.stop}"],
                nproc=args.nproc)
        raise SystemExit("the cut run did not stop")
    except ArmFailedError as exc:
        if "stopped after step" not in str(exc):
            raise
    resumed = run_arm(config, base, nproc=args.nproc, resume=str(work / "cut"))
    rows = [json.loads(line) for line in (work / "cut" / "metrics.jsonl").read_text().splitlines()]
    cut_losses = [r["loss"] for r in rows]
    whole_losses = [s["loss"] for s in whole["steps"]]
    saves = [json.loads((p / "meta.json").read_text())["save_seconds"] for p in (work / "cut" / "checkpoints").iterdir()
             if p.name.startswith("step_")]
    result = {
        "config": str(config), "nproc": args.nproc, "steps": args.steps, "stopped_after": args.stop,
        "resumed_from_step": resumed["summary"]["first_step"], "losses_whole": whole_losses, "losses_cut": cut_losses,
        "rows_once": [r["step"] for r in rows] == list(range(1, args.steps + 1)),
        "max_loss_gap": max(abs(a - b) for a, b in zip(whole_losses, cut_losses, strict=True)),
        "save_seconds_newest_checkpoint": saves, "load_seconds": resumed["summary"]["resume_load_seconds"],
        "checkpoint_gib": sum(f.stat().st_size for f in (work / "cut" / "checkpoints").rglob("*") if f.is_file()) / 2**30,
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("losses")}, indent=2))


if __name__ == "__main__":
    main()
