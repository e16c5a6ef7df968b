"""The pictures of ``ligerkit smoke`` and ``ligerkit bench``: what each verdict rests on, drawn.

``smoke.png`` holds the per-step loss gap (Liger on vs off) and the per-step relative grad-norm gap,
each against its tolerance, and the step-1 gradient error of every parameter tensor (eager and
patched, each against float32) against its bound; the two loss curves are kept small, for context.
``bench.png`` holds tokens/s and peak memory per arm, with the spread of the rounds (min-max error
bars, one dot per round) and each arm's ratio to eager.

Figures are built with :class:`matplotlib.figure.Figure` (no pyplot, no global backend), so they
can be inspected in tests and saved from any thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ligerkit.errors import PlotError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ligerkit.proof.grads import GradParity
    from ligerkit.proof.smoke import SmokeResult

OVER, WITHIN, EAGER, PATCHED, BOUND = "#d62728", "#1f77b4", "#7f7f7f", "#1f77b4", "#ff7f0e"
FLOOR = 1e-12  # a zero error is drawn here on the log scale of the gradient panel

# the axes' titles start with these (tests and readers find the panels by them)
LOSS_CURVES = "loss per step"
LOSS_GAP = "loss gap |on - off| per step"
GRAD_NORM_GAP = "grad-norm gap |on - off| / off per step"
GRADIENTS = "step-1 gradient error per parameter tensor, against float32"
TOKENS = "tokens/s per arm"
MEMORY = "peak memory per arm"


def save(fig: Figure, path: Path, dpi: int = 100) -> Path:
    """Write ``fig`` as a PNG to ``path`` (its folder is created) and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def smoke_figure(result: SmokeResult) -> Figure:
    """The smoke verdict's evidence: loss curves, loss gap and grad-norm gap against their tolerances,
    and (when the gradient pass ran) every tensor's gradient error against its bound."""
    from matplotlib.figure import Figure

    if not result.off.get("losses"):
        raise PlotError("the smoke result has no steps to plot: run `ligerkit smoke` with --steps 1 or more")
    fig = Figure(figsize=(14, 8.5), layout="constrained")
    grid = fig.add_gridspec(2, 3, height_ratios=(1, 1.25))
    curves, gap, norm_gap = (fig.add_subplot(grid[0, i]) for i in range(3))
    steps = list(range(1, len(result.off["losses"]) + 1))  # steps count from 1, as the trainer's log
    for name, arm, style in (("Liger off", result.off, "-"), ("Liger on", result.on, "--")):
        curves.plot(steps, arm["losses"], style, label=name)
    curves.set(title=LOSS_CURVES, xlabel="step", ylabel="loss")
    curves.legend()
    _gap_panel(gap, steps, result.loss_gaps, result.loss_tolerance, LOSS_GAP, "absolute loss gap",
               f"tolerance {result.loss_tolerance:g} ({result.dtype})")
    _gap_panel(norm_gap, steps, result.grad_norm_rel_gaps, result.grad_norm_rtol, GRAD_NORM_GAP,
               "relative grad-norm gap", f"tolerance {result.grad_norm_rtol:g} ({result.dtype})")
    gradients_panel(fig.add_subplot(grid[1, :]), result.gradients)
    fig.suptitle(f"{_recipe_name(result.config)}: smoke {result.verdict}, Liger on vs off, {len(steps)} steps",
                 fontweight="bold")
    return fig


def _gap_panel(ax: Axes, steps: Sequence[int], gaps: Sequence[float], tolerance: float, title: str,
               ylabel: str, tolerance_label: str) -> None:
    """One bar per step, red where the gap is over ``tolerance``; the tolerance as a dashed line."""
    over = [not (g <= tolerance) for g in gaps]  # NaN is over
    heights = [g if math.isfinite(g) else tolerance * 2 for g in gaps]
    ax.bar(steps, heights, color=[OVER if o else WITHIN for o in over], width=0.8)
    ax.axhline(tolerance, color=OVER, linestyle="--", label=tolerance_label)
    worst = max(heights)
    ax.set_ylim(0, max(worst, tolerance) * 1.25)
    verdict = f"{sum(over)} of {len(gaps)} steps OVER" if any(over) else "every step within"
    ax.set(title=f"{title}\nmax {max(heights):.2e}: {verdict}", xlabel="step", ylabel=ylabel)
    ax.legend(loc="upper left")


def gradients_panel(ax: Axes, parity: GradParity | None) -> None:
    """Every compared tensor's relative gradient error, eager and patched (each against float32),
    and its bound (``factor * eager + slack``), sorted by the eager error; tensors over the bound in
    red, the worst one named. Without a gradient pass the panel says so."""
    if parity is None or not parity.tensors:
        ax.set(title=f"{GRADIENTS}: not checked", xticks=[], yticks=[])
        ax.text(0.5, 0.5, "no gradient pass in this result", ha="center", va="center", transform=ax.transAxes)
        return
    tensors = sorted(parity.tensors, key=lambda t: (t.eager, t.name))
    x = list(range(1, len(tensors) + 1))
    ax.plot(x, [max(t.eager, FLOOR) for t in tensors], "o", ms=3, color=EAGER, label="eager (bf16, unpatched)")
    patched = [t.patched if math.isfinite(t.patched) else math.nan for t in tensors]
    ax.plot(x, [max(p, FLOOR) for p in patched], "o", ms=3, color=PATCHED, label="patched (Liger)")
    tol = parity.tolerance
    ax.plot(x, [t.bound for t in tensors], "-", color=BOUND, lw=2,
            label=f"bound = {tol.factor:g} x eager + {tol.slack:g}")
    failed = [(i, t) for i, t in zip(x, tensors, strict=True) if not t.ok]
    if failed:
        top = max([t.bound for t in tensors] + [p for p in patched if math.isfinite(p)]) * 2
        ax.plot([i for i, _ in failed], [t.patched if math.isfinite(t.patched) else top for _, t in failed],
                "x", ms=9, mew=2, color=OVER, label=f"over the bound ({len(failed)})")
    ax.set_yscale("log")
    worst = parity.worst(1)[0]
    at = next(i for i, t in zip(x, tensors, strict=True) if t is worst)
    if math.isfinite(worst.patched):
        ax.annotate(f"worst: {worst.name}\n{worst.patched:.3g} vs bound {worst.bound:.3g}",
                    (at, max(worst.patched, FLOOR)), xytext=(0.02, 0.95), textcoords="axes fraction",
                    va="top", fontsize=8, arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.7})
    seen = parity.coverage.describe() if parity.coverage is not None else f"{len(tensors)} tensors"
    ax.set(title=f"{GRADIENTS}: {parity.verdict}\n{seen}",
           xlabel="parameter tensor, sorted by its eager error", ylabel="relative error ||g - g_fp32|| / ||g_fp32||")
    ax.legend(loc="lower right", fontsize=8)


def bench_figure(result: Mapping[str, Any]) -> Figure:
    """Tokens/s and peak memory per arm: the bench's figure as a bar (median tokens/s; peak memory of
    the worst round), min-max error bars and one dot per round, the ratio to eager above each bar;
    the recommended arm's bars in green."""
    from matplotlib.figure import Figure

    arms = result.get("arms") or {}
    if not arms:
        raise PlotError("the bench result has no arms to plot: run `ligerkit bench` with --arms")
    fig = Figure(figsize=(max(8.0, 2.2 * len(arms) + 4), 4.8), layout="constrained")
    speed, memory = fig.subplots(1, 2)
    pick = (result.get("recommendation") or {}).get("arm")
    _arm_panel(speed, arms, "tokens_per_s", "tokens_per_s_vs_eager", pick,
               f"{TOKENS} (bar: median of rounds)", "tokens/s")
    _arm_panel(memory, arms, "peak_mem_gib", "peak_mem_vs_eager", pick,
               f"{MEMORY} (bar: worst round)", "peak memory (GiB)")
    rounds = result.get("repeats", 1)
    recommended = f"; recommended: {pick}" if pick else ""
    spread = "error bars: min-max of the rounds, dots: each round" if rounds > 1 else "one round: no spread"
    fig.suptitle(f"{_recipe_name(str(result.get('config', '')))}: bench, {result.get('steps')} steps "
                 f"({result.get('warmup')} warm-up excluded), {rounds} round{'s' if rounds > 1 else ''}{recommended}\n"
                 f"{spread}; above each bar: the ratio to eager", fontweight="bold")
    return fig


def _arm_panel(ax: Axes, arms: Mapping[str, Mapping[str, Any]], key: str, ratio_key: str, pick: str | None,
               title: str, ylabel: str) -> None:
    """One bar per arm for ``key``, the rounds' spread, and the ratio to eager above each bar."""
    names = list(arms)
    x = list(range(len(names)))
    values = [arms[a].get(key) for a in names]
    ax.set(title=title, ylabel=ylabel, xticks=x)
    ax.set_xticklabels(names, rotation=20, ha="right")
    if all(v is None for v in values):
        ax.text(0.5, 0.5, f"no {ylabel} measured", ha="center", va="center", transform=ax.transAxes)
        return
    heights = [v if v is not None else 0.0 for v in values]
    colors = ["#2ca02c" if a == pick else WITHIN for a in names]
    ax.bar(x, heights, color=colors, width=0.6)
    runs = [[r[key] for r in arms[a].get("runs", []) if r.get(key) is not None] or ([v] if v is not None else [])
            for a, v in zip(names, values, strict=True)]
    low = [h - min(r) if r else 0.0 for h, r in zip(heights, runs, strict=True)]
    high = [max(r) - h if r else 0.0 for h, r in zip(heights, runs, strict=True)]
    ax.errorbar(x, heights, yerr=[[max(v, 0.0) for v in low], [max(v, 0.0) for v in high]], fmt="none",
                ecolor="black", capsize=6, label="min-max of the rounds")
    for i, r in zip(x, runs, strict=True):
        ax.plot([i] * len(r), r, "o", ms=4, color="black", alpha=0.5)
    for i, a, h in zip(x, names, heights, strict=True):
        ratio = arms[a].get(ratio_key)
        text = f"{ratio:.2f}x" if ratio is not None else "n/a"
        ax.annotate(text, (i, max([h, *runs[i]])), xytext=(0, 4), textcoords="offset points", ha="center",
                    fontsize=9)
    ax.set_ylim(0, max(max([h, *r]) for h, r in zip(heights, runs, strict=True)) * 1.18)


def _recipe_name(config: str) -> str:
    """``recipes/qwen3/configs/gpu.yaml`` -> ``qwen3``; any other path as given."""
    path = Path(config)
    return path.parent.parent.name if path.parent.name == "configs" and path.parent.parent.name else str(config)
