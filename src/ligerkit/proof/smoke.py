"""``ligerkit smoke``: Liger off vs on, same seed and data, separate processes, step by step.

Modelled on Liger's own convergence tests: the per-step loss must agree within a tolerance chosen
by the training dtype, and the gradient norm within a relative one. A loss is not a proof of the
backward, so smoke also takes the step-1 gradients of every parameter tensor with Liger on and off
against a float32 run (``grads.py``) and fails when any tensor is off by more than the tolerance.
Writes a JSON record and a PNG of what the verdict rests on (``plots.py``); the caller exits
non-zero when parity fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ligerkit.train.config import load_recipe_config
from ligerkit.proof.arm_runs import summarize
from ligerkit.proof.grads import FAIL, PASS, GradParity
from ligerkit.proof.arm_runs import Runner

# (loss absolute tolerance, grad-norm relative tolerance) by training dtype
TOLERANCES = {"bfloat16": (1e-2, 0.1), "float32": (1e-4, 1e-3)}


def training_dtype(config_dtype: str) -> str:
    """``auto`` trains in bfloat16 on an accelerator (smoke only runs there)."""
    return "bfloat16" if config_dtype in ("auto", "bfloat16") else "float32"


@dataclass
class SmokeResult:
    """Both arms' curves and the verdict."""

    config: str
    dtype: str
    loss_tolerance: float
    grad_norm_rtol: float
    off: dict[str, Any]
    on: dict[str, Any]
    gradients: GradParity | None = None

    @property
    def loss_gaps(self) -> list[float]:
        """Per-step absolute loss differences."""
        return [abs(a - b) for a, b in zip(self.off["losses"], self.on["losses"], strict=True)]

    @property
    def grad_norm_rel_gaps(self) -> list[float]:
        """Per-step relative grad-norm differences."""
        return [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(self.off["grad_norms"], self.on["grad_norms"],
                                                                  strict=True)]

    @property
    def verdict(self) -> str:
        """``FAIL`` (a loss, grad-norm or gradient tensor over its tolerance), ``PARTIAL`` (all within,
        but the gradient pass did not compare every trainable parameter), or ``PASS``."""
        curves = (max(self.loss_gaps) <= self.loss_tolerance
                  and max(self.grad_norm_rel_gaps) <= self.grad_norm_rtol)
        grads = self.gradients.verdict if self.gradients is not None else PASS
        return FAIL if not curves or grads == FAIL else grads

    @property
    def passed(self) -> bool:
        """Every step within both tolerances, and every step-1 gradient of every trainable parameter
        within its bound."""
        return self.verdict == PASS

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"config": self.config, "dtype": self.dtype, "loss_tolerance": self.loss_tolerance,
                "grad_norm_rtol": self.grad_norm_rtol, "passed": self.passed, "verdict": self.verdict,
                "max_loss_gap": max(self.loss_gaps), "max_grad_norm_rel_gap": max(self.grad_norm_rel_gaps),
                "gradients": self.gradients.to_dict() if self.gradients is not None else None,
                "off": self.off, "on": self.on}

    def table(self) -> str:
        """Markdown table, one row per step; steps count from 1, as the trainer's log, metrics.jsonl
        and smoke.png do."""
        rows = ["| step | loss off | loss on | gap | grad norm off | grad norm on |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for i, (a, b, ga, gb) in enumerate(zip(self.off["losses"], self.on["losses"], self.off["grad_norms"],
                                               self.on["grad_norms"], strict=True), start=1):
            rows.append(f"| {i} | {a:.4f} | {b:.4f} | {abs(a - b):.2e} | {ga:.3f} | {gb:.3f} |")
        return "\n".join(rows)


def smoke(config: Path, steps: int, overrides: list[str], runner: Runner, nproc: int = 1,
          gradients: Callable[[], GradParity] | None = None) -> SmokeResult:
    """Run both arms through ``runner`` and compare them; ``gradients()`` (run first; the CLI's runs the
    check in a process of its own, ``grads_apart``) gives the step-1 gradient parity."""
    recipe = load_recipe_config(config, overrides)
    dtype = training_dtype(recipe.model.dtype)
    loss_tol, gn_tol = TOLERANCES[dtype]
    grads = gradients() if gradients is not None else None
    base = [*overrides, f"train.steps={steps}", "train.run.progress=false"]
    off = summarize(runner(config, [*base, "model.liger_kernel.enabled=false"], nproc=nproc), 0)
    on = summarize(runner(config, [*base, "model.liger_kernel.enabled=true"], nproc=nproc), 0)
    return SmokeResult(str(config), dtype, loss_tol, gn_tol, off, on, grads)


def write_outputs(result: SmokeResult, out: Path) -> list[Path]:
    """``smoke.json`` and ``smoke.png`` under ``out``: the picture holds what the verdict rests on, the
    per-step loss and grad-norm gaps against their tolerances and every tensor's step-1 gradient error
    against its bound (:func:`ligerkit.proof.plots.smoke_figure`)."""
    from ligerkit.proof.plots import save, smoke_figure

    out.mkdir(parents=True, exist_ok=True)
    record = out / "smoke.json"
    record.write_text(json.dumps(result.to_dict(), indent=2))
    return [record, save(smoke_figure(result), out / "smoke.png")]


def read_record(path: Path) -> SmokeResult:
    """A ``smoke.json`` read back into the :class:`SmokeResult` it records (its picture can then be drawn again
    with today's :func:`ligerkit.proof.plots.smoke_figure`, on any machine). A record written before gradient
    verdicts named their coverage reads without one (so its gradient verdict is PARTIAL, never a PASS it
    cannot show)."""
    from ligerkit.probe.tolerance import GradTolerance
    from ligerkit.proof.grads import Coverage, TensorError

    data = json.loads(Path(path).read_text())
    grads, parity = data.get("gradients"), None
    if grads:
        cov = grads.get("coverage")
        coverage = Coverage(cov["model"], cov["compared"], cov["total"], round(cov["share"] * 10**6), 10**6,
                            tuple(cov.get("not_compared", ()))) if cov else None
        parity = GradParity([TensorError(**t) for t in grads["tensors"]], dict(grads["losses"]),
                            GradTolerance(**grads["tolerance"]), coverage, None, tuple(grads.get("resampled", ())))
    return SmokeResult(data["config"], data["dtype"], data["loss_tolerance"], data["grad_norm_rtol"], data["off"],
                       data["on"], parity)
