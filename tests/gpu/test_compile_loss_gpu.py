"""GPU: over a training run, compiling over Liger's swaps keeps the loss about as close to eager's as
plain torch.compile does: within twice compile's distance, plus how far compile lands from itself.

Per recipe, four ``ligerkit train`` processes from the same seed and data for the recipe's
``train.steps``: ``eager`` (Liger off), ``compile`` (Liger off, compiled per layer), ``compile`` once
more, and ``liger_compile`` (every swap, compiled, Liger's kernels through the compile-mode operators;
``LIGERKIT_INDUCTOR_TABLE=none`` so none is left to Inductor). The distance of two runs is the mean,
over steps, of their absolute loss difference. The claim: ``liger_compile``'s distance to eager is at
most twice ``compile``'s, plus the distance between the two ``compile`` runs (their run-to-run spread).

Why twice, and the mean: training in bf16 amplifies any change of rounding, so a second correct set of
kernels lands at a distance of the same size as the first, not below it. On 2026-12-02 (fifth
session) diffllama's two arms were equal at step 1 (-3.7e-3 from eager each) and then wandered: at
step 4 compile was 0.0121 from eager and liger_compile 0.0141, while the two compile runs stayed
within 5.9e-4 of each other (identical kernels only differ by non-deterministic sums). A bound of
"compile's gap plus the spread" failed there twice in two runs with no fault; so did composite_vlm
once before. The largest gap is one step's excursion; the mean is what a kernel that computes
something else moves: the inline norm-weight overwrite this test was written for moved custom_lm's
loss by 9.8e-3 from the first step on, where custom_lm's two compiled arms were 2.7e-3 apart at most
over 20 steps once it was fixed.

They run three at a time on a 141 GB GPU, one at a time on a smaller one (loss values do not depend on
what else the GPU runs; three is what was measured to fit on the H200), at ``train.micro_batch_size=2``:
the same global batch in more micro-batches (qwen3 then also runs two per step, the case where compiling
inline overwrote norm weights).
A family whose Liger helper fails on the installed versions takes ligerkit's proven map (``RECIPE_SETS``).
``LIGERKIT_RESULTS_DIR`` set: each recipe's losses and distances are written there.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from helpers import RECIPE_SETS, RECIPES
from ligerkit.proof.arm_runs import loss_gap, run_arm

ROOT = Path(__file__).resolve().parents[2]
COMMON = [*RECIPE_SETS, "train.micro_batch_size=2", "train.run.progress=false", "train.arm=null"]
ARMS = {
    "eager": ["model.liger_kernel.enabled=false", "train.compile=off"],
    "compile": ["model.liger_kernel.enabled=false", "train.compile=ops"],
    "compile_again": ["model.liger_kernel.enabled=false", "train.compile=ops"],
    "liger_compile": ["model.liger_kernel.enabled=true", "train.compile=ops"],
}


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_mode_loss_stays_about_as_close_to_eager_as_plain_compile(recipe):
    config = ROOT / "recipes" / recipe / "configs" / "gpu.yaml"
    env = {"LIGERKIT_INDUCTOR_TABLE": "none"}
    with ThreadPoolExecutor(side_by_side()) as pool:
        futures = {arm: pool.submit(run_arm, config, [*COMMON, *sets], env=env) for arm, sets in ARMS.items()}
        runs = {arm: f.result() for arm, f in futures.items()}
    losses = {arm: [s["loss"] for s in run["steps"]] for arm, run in runs.items()}
    gaps = {arm: loss_gap(losses[arm], losses["eager"]) for arm in ("compile", "liger_compile")}
    distances = {arm: mean_gap(losses[arm], losses["eager"]) for arm in ("compile", "liger_compile")}
    spread = mean_gap(losses["compile_again"], losses["compile"])
    swaps = len(runs["liger_compile"]["report"]["patched"])
    out = os.environ.get("LIGERKIT_RESULTS_DIR")
    if out:
        Path(out, f"compile_loss_{recipe}.json").write_text(
            json.dumps({"recipe": recipe, "overrides": COMMON, "max_loss_gap_vs_eager": gaps,
                        "mean_loss_gap_vs_eager": distances, "compile_run_to_run_mean": spread, "swaps": swaps,
                        "losses": losses}, indent=2))
    assert swaps > 0
    assert distances["liger_compile"] <= 2 * distances["compile"] + spread, (distances, spread, gaps)


def side_by_side() -> int:
    """How many arms run on the GPU at once: three fitted on the 141 GB H200 (2026-12-01); on a smaller
    card, one at a time."""
    return 3 if torch.cuda.get_device_properties(0).total_memory >= 120 * 2**30 else 1


def mean_gap(a: list[float], b: list[float]) -> float:
    """Mean per-step absolute loss difference of two runs of the same steps."""
    assert len(a) == len(b) and a, (len(a), len(b))
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)
