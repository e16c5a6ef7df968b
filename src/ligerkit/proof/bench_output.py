"""``ligerkit bench``'s outputs: the markdown table and the files it writes (``bench.json``, ``bench.md``,
``bench.png``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ligerkit.proof.recommend import Recommendation


def to_markdown(result: dict[str, Any]) -> str:
    """The bench result as a markdown table."""
    lines = ["| arm | median step (ms) | tokens/s | vs eager | tokens/s per device | peak memory (GiB) | vs eager "
             "| MFU | step-1 loss gap vs eager | max loss gap vs eager |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm, r in result["arms"].items():
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "n/a"
        mem_ratio = f"{r['peak_mem_vs_eager']:.3f}x" if r["peak_mem_vs_eager"] is not None else "n/a"
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        step = f"{r['step_time_s'] * 1e3:.1f}" if r.get("step_time_s") is not None else "n/a"
        lines.append(f"| {arm} | {step} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s_vs_eager']:.2f}x | "
                     f"{r['tokens_per_s_per_device']:,.0f} | {mem} | {mem_ratio} | {mfu} | "
                     f"{r['first_loss_gap_vs_eager']:.1e} | {r['max_loss_gap_vs_eager']:.1e} |")
    if result.get("repeats", 1) > 1:
        lines += ["", (f"Medians of {result['repeats']} rounds (every arm once per round; peak memory and loss "
                       "gaps: the worst round's); speed ratio per round:")]
        lines += [f"- {arm}: " + ", ".join(f"{run['tokens_per_s_vs_eager']:.3f}x" for run in r["runs"])
                  for arm, r in result["arms"].items() if arm != "eager"]
    reference = result.get("float32_reference")
    if reference and "losses" in reference:
        lines += ["", "Largest per-step loss gap to a float32 run of eager (" + ", ".join(reference["lines"]) + "): "
                  + ", ".join(f"{arm} {r['max_loss_gap_vs_float32']:.1e}" for arm, r in result["arms"].items()) + "."]
    elif reference:
        lines += ["", f"The float32 loss reference did not fit ({reference['did_not_fit']}): the loss rule is "
                  "against eager alone."]
    if result.get("out_of_memory"):
        lines += ["", "Did not fit, so not in the table nor recommended: " + "; ".join(
            f"{arm}: {why}" for arm, why in result["out_of_memory"].items()) + "."]
    if (result.get("gradients") or {}).get("overrides"):
        lines += ["", "Step-1 gradients checked with " + ", ".join(result["gradients"]["overrides"])
                  + " (the speed arms trained with the config's values)."]
    return "\n".join(lines)


def write_outputs(result: dict[str, Any], out: Path) -> list[Path]:
    """``bench.json``, ``bench.md`` (the speed table, then the recommendation) and ``bench.png`` (tokens/s
    and peak memory per arm with the spread of the rounds: :func:`ligerkit.proof.plots.bench_figure`)
    under ``out``."""
    from ligerkit.proof.plots import bench_figure, save

    out.mkdir(parents=True, exist_ok=True)
    record, table = out / "bench.json", out / "bench.md"
    record.write_text(json.dumps(result, indent=2))
    rounds = f", {result['repeats']} rounds" if result.get("repeats", 1) > 1 else ""
    text = (f"{result['config']}, {result['steps']} steps ({result['warmup']} warm-up excluded){rounds}\n\n"
            + to_markdown(result) + "\n")
    if result.get("recommendation"):
        text += "\n" + Recommendation.from_dict(result["recommendation"]).markdown() + "\n"
    elif result.get("complete") is False:
        text += ("\nSpeed arms only: the step-1 gradient check (run after them) has not finished, so there "
                 "is no recommendation.\n")
    table.write_text(text)
    return [record, table, save(bench_figure(result), out / "bench.png")]
