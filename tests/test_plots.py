"""smoke.png and bench.png hold the panels their verdicts rest on (CPU, synthetic results).

The figures are inspected as matplotlib objects: each panel found by its title, the tolerance or
bound drawn as its own line, one bar per step or per arm, the rounds' spread as error bars.
"""

from __future__ import annotations

import math

import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof import bench as B
from ligerkit.proof import bench_output as BO
from ligerkit.proof import plots, smoke
from ligerkit.proof.grads import Coverage, GradParity, TensorError
from ligerkit.proof.recommend import recommend

CONFIG = "recipes/qwen3/configs/gpu.yaml"


def _parity(over: int | None = None) -> GradParity:
    tol = GradTolerance()
    tensors = []
    for i in range(12):
        eager = 0.002 * (i + 1)
        patched = 0.5 if i == over else eager * 1.1
        tensors.append(TensorError(f"model.layers.{i}.mlp.weight", eager, patched, tol.bound(eager)))
    return GradParity(tensors, {"float32": 5.0, "eager": 5.0, "patched": 5.0}, tol,
                      Coverage("Qwen3ForCausalLM", 12, 12, 120, 120))


def _smoke(gap_at: int | None = None, gradients: GradParity | None = None) -> smoke.SmokeResult:
    off = {"losses": [5.0, 4.0, 3.5, 3.0], "grad_norms": [2.0, 1.5, 1.2, 1.0]}
    on = {"losses": [l + (0.05 if i == gap_at else 0.001) for i, l in enumerate(off["losses"])],
          "grad_norms": [g * 1.02 for g in off["grad_norms"]]}
    return smoke.SmokeResult(CONFIG, "bfloat16", 1e-2, 0.1, off, on, gradients)


def _axes(fig, title: str):
    found = [ax for ax in fig.axes if ax.get_title().startswith(title)]
    assert len(found) == 1, [ax.get_title() for ax in fig.axes]
    return found[0]


def _line(ax, label_start: str):
    found = [line for line in ax.get_lines() if line.get_label().startswith(label_start)]
    assert len(found) == 1, [line.get_label() for line in ax.get_lines()]
    return found[0]


def _bars(ax) -> list:
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(containers) == 1
    return list(containers[0])


def test_smoke_figure_draws_the_loss_gap_and_grad_norm_gap_against_their_tolerances():
    result = _smoke(gap_at=2, gradients=_parity())
    fig = plots.smoke_figure(result)
    gap = _axes(fig, plots.LOSS_GAP)
    tolerance = _line(gap, "tolerance")
    assert set(tolerance.get_ydata()) == {1e-2}
    bars = _bars(gap)
    assert [b.get_x() + b.get_width() / 2 for b in bars] == [1, 2, 3, 4]  # steps from 1, as the trainer's log
    assert [b.get_height() for b in bars] == pytest.approx(result.loss_gaps)
    over = [b for b in bars if b.get_facecolor()[:3] != bars[0].get_facecolor()[:3]]
    assert len(over) == 1 and over[0].get_height() == pytest.approx(0.05)  # the one step over, in its own colour
    assert "1 of 4 steps OVER" in gap.get_title()
    norm = _axes(fig, plots.GRAD_NORM_GAP)
    assert set(_line(norm, "tolerance").get_ydata()) == {0.1}
    assert [b.get_height() for b in _bars(norm)] == pytest.approx(result.grad_norm_rel_gaps)
    assert "every step within" in norm.get_title()
    curves = _axes(fig, plots.LOSS_CURVES)
    assert [line.get_label() for line in curves.get_lines()] == ["Liger off", "Liger on"]
    assert fig.get_suptitle().startswith("qwen3: smoke FAIL")


def test_smoke_figure_draws_every_tensor_error_eager_and_patched_against_its_bound():
    parity = _parity(over=5)
    fig = plots.smoke_figure(_smoke(gradients=parity))
    ax = _axes(fig, plots.GRADIENTS)
    assert ax.get_yscale() == "log" and "FAIL" in ax.get_title() and "12 of 12 tensors" in ax.get_title()
    eager, patched, bound = _line(ax, "eager"), _line(ax, "patched"), _line(ax, "bound")
    ordered = sorted(parity.tensors, key=lambda t: (t.eager, t.name))
    assert list(eager.get_ydata()) == pytest.approx([t.eager for t in ordered])
    assert list(patched.get_ydata()) == pytest.approx([t.patched for t in ordered])
    assert list(bound.get_ydata()) == pytest.approx([t.bound for t in ordered])
    assert bound.get_label() == "bound = 2 x eager + 0.01"
    over = _line(ax, "over the bound")
    assert list(over.get_ydata()) == [0.5]
    assert any("worst: model.layers.5.mlp.weight" in t.get_text() for t in ax.texts)


def test_smoke_figure_says_when_no_gradient_pass_ran_and_marks_a_nan_error():
    fig = plots.smoke_figure(_smoke())
    ax = _axes(fig, plots.GRADIENTS)
    assert ax.get_title().endswith("not checked") and not ax.get_lines()
    tol = GradTolerance()
    nan = GradParity([TensorError("w", 0.01, math.nan, tol.bound(0.01)), TensorError("v", 0.01, 0.01, tol.bound(0.01))],
                     {}, tol, None)
    ax = _axes(plots.smoke_figure(_smoke(gradients=nan)), plots.GRADIENTS)
    assert len(_line(ax, "over the bound").get_ydata()) == 1  # drawn above everything, never dropped


def test_smoke_write_outputs_saves_the_figure(tmp_path):
    files = smoke.write_outputs(_smoke(gradients=_parity()), tmp_path)
    assert [f.name for f in files] == ["smoke.json", "smoke.png"]
    assert files[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bench_result(repeats: int = 3, memory: bool = True) -> dict:
    speeds = {"eager": [100.0, 120.0, 90.0], "liger": [150.0, 180.0, 150.0], "liger_fused": [160.0, 165.0, 170.0]}
    mems = {"eager": [40.0, 40.5, 40.2], "liger": [30.0, 30.1, 30.4], "liger_fused": [15.0, 15.2, 15.1]}
    rounds = []
    for k in range(repeats):
        res = {a: {"losses": [1.0, 0.9], "grad_norms": [1.0, 1.0], "tokens_per_s": s[k], "step_time_s": 1 / s[k],
                   "tokens_per_s_per_device": s[k], "peak_mem_gib": mems[a][k] if memory else None, "mfu": None,
                   "swaps": 3} for a, s in speeds.items()}
        B.add_ratios(res)
        rounds.append(res)
    arms = B.combine_rounds(rounds)
    pick = recommend({a: r["tokens_per_s_vs_eager"] for a, r in arms.items()},
                     {a: r["max_loss_gap_vs_eager"] for a, r in arms.items()}, 1e-2, None)
    assert pick.arm == "liger_fused"
    return {"config": CONFIG, "steps": 20, "warmup": 5, "nproc": 1, "repeats": repeats, "arms": arms,
            "loss_tolerance": 1e-2, "complete": True, "gradients": None, "recommendation": pick.to_dict()}


def _spread(ax) -> list[float]:
    """low, high of each error bar, in a flat list."""
    containers = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(containers) == 1
    segments = containers[0].lines[2][0].get_segments()
    return [float(y) for s in segments for y in (s[0][1], s[1][1])]


def test_bench_figure_draws_one_bar_per_arm_with_the_spread_of_its_rounds():
    result = _bench_result()
    fig = plots.bench_figure(result)
    speed, memory = _axes(fig, plots.TOKENS), _axes(fig, plots.MEMORY)
    for ax in (speed, memory):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["eager", "liger", "liger_fused"]
        assert len(_bars(ax)) == 3
    arms = result["arms"]
    assert [b.get_height() for b in _bars(speed)] == pytest.approx([arms[a]["tokens_per_s"] for a in arms])
    assert _spread(speed) == pytest.approx([90.0, 120.0, 150.0, 180.0, 160.0, 170.0])
    assert [b.get_height() for b in _bars(memory)] == pytest.approx([40.5, 30.4, 15.2])  # the worst round
    assert _spread(memory) == pytest.approx([40.0, 40.5, 30.0, 30.4, 15.0, 15.2])
    assert [t.get_text() for t in speed.texts] == ["1.00x", "1.50x", "1.60x"]  # ratio to eager, per-round median
    colours = [b.get_facecolor() for b in _bars(speed)]
    assert colours[2] != colours[0] == colours[1]  # the recommended arm stands out
    assert "3 rounds" in fig.get_suptitle() and "min-max" in fig.get_suptitle()


def test_bench_figure_without_memory_or_rounds_says_so(tmp_path):
    fig = plots.bench_figure(_bench_result(repeats=1, memory=False))
    memory = _axes(fig, plots.MEMORY)
    assert not _bars_or_none(memory) and any("no peak memory" in t.get_text() for t in memory.texts)
    assert _spread(_axes(fig, plots.TOKENS)) == pytest.approx([100.0, 100.0, 150.0, 150.0, 160.0, 160.0])
    assert "one round: no spread" in fig.get_suptitle()
    with pytest.raises(plots.PlotError, match="--arms"):
        plots.bench_figure({"arms": {}})


def _bars_or_none(ax) -> list:
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_bench_write_outputs_writes_the_plot_next_to_the_json_and_the_table(tmp_path):
    files = BO.write_outputs(_bench_result(), tmp_path)
    assert [f.name for f in files] == ["bench.json", "bench.md", "bench.png"]
    assert files[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
