"""GPU: over a training run, compiling over Liger's swaps keeps the loss as close to eager's as plain
torch.compile does, up to how far plain compile lands from itself on a second run.

Per recipe, four ``ligerkit train`` processes from the same seed and data for the recipe's
``train.steps``: ``eager`` (Liger off), ``compile`` (Liger off, compiled per layer), ``compile`` once
more, and ``liger_compile`` (every swap, compiled, Liger's kernels through the compile-mode operators;
``LIGERKIT_INDUCTOR_TABLE=none`` so none is left to Inductor). The claim: the largest per-step loss
gap of ``liger_compile`` against eager is no larger than ``compile``'s plus the largest gap between
the two ``compile`` runs (their run-to-run spread: two runs of one compiled config need not be equal
to the bit, and the claim is not tighter than that).

The spread is measured, not assumed, because the claim without it was flaky on the H200: composite_vlm
passed on one run and failed on the next on 2026-12-02, with the same code (the failure's message was
cut off by the call's time limit); its two compiled arms had been 5.6e-3 apart on 2026-12-01, more
than either was from eager (docs/benchmarks.md, "Compile over Liger"). The swap this test was written
for, the inline norm-weight overwrite, moved custom_lm's step-1 loss by 9.8e-3 from the first step on;
custom_lm's two compiled arms were 2.7e-3 apart over 20 steps once it was fixed.

They run three at a time on one GPU (loss values do not depend on what else the GPU runs; three is
what was measured to fit), at ``train.micro_batch_size=2``: the same global batch in more micro-batches
(qwen3 then also runs two per step, the case where compiling inline overwrote norm weights).
``LIGERKIT_RESULTS_DIR`` set: each recipe's losses and gaps are written there.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ligerkit.proof.arms import loss_gap, run_arm

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.parent.name for p in ROOT.glob("recipes/*/configs"))
SIDE_BY_SIDE = 3  # processes on the GPU at once: three fitted on the H200 (2026-12-01)
COMMON = ["train.micro_batch_size=2", "train.progress=false", "train.arm=null"]
ARMS = {
    "eager": ["model.liger_kernel.enabled=false", "train.compile=off"],
    "compile": ["model.liger_kernel.enabled=false", "train.compile=ops"],
    "compile_again": ["model.liger_kernel.enabled=false", "train.compile=ops"],
    "liger_compile": ["model.liger_kernel.enabled=true", "train.compile=ops"],
}


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_mode_loss_stays_as_close_to_eager_as_plain_compile_within_its_spread(recipe):
    config = ROOT / "recipes" / recipe / "configs" / "gpu.yaml"
    env = {"LIGERKIT_INDUCTOR_TABLE": "none"}
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        futures = {arm: pool.submit(run_arm, config, [*COMMON, *sets], env=env) for arm, sets in ARMS.items()}
        runs = {arm: f.result() for arm, f in futures.items()}
    losses = {arm: [s["loss"] for s in run["steps"]] for arm, run in runs.items()}
    gaps = {arm: loss_gap(losses[arm], losses["eager"]) for arm in ("compile", "liger_compile")}
    spread = loss_gap(losses["compile_again"], losses["compile"])
    swaps = len(runs["liger_compile"]["report"]["patched"])
    out = os.environ.get("LIGERKIT_RESULTS_DIR")
    if out:
        Path(out, f"compile_loss_{recipe}.json").write_text(
            json.dumps({"recipe": recipe, "overrides": COMMON, "max_loss_gap_vs_eager": gaps,
                        "compile_run_to_run": spread, "swaps": swaps,
                        "losses": losses}, indent=2))
    assert swaps > 0
    assert gaps["liger_compile"] <= gaps["compile"] + spread, (gaps, spread)
