"""GPU: over a training run, compiling over Liger's swaps keeps the loss at least as close to eager's
as plain torch.compile does, on every recipe.

Per recipe, three ``ligerkit train`` processes from the same seed and data for the recipe's
``train.steps``: ``eager`` (Liger off), ``compile`` (Liger off, compiled per layer) and
``liger_compile`` (every swap, compiled, Liger's kernels through the compile-mode operators;
``LIGERKIT_INDUCTOR_TABLE=none`` so none is left to Inductor). The claim: the largest per-step loss
gap of ``liger_compile`` against eager is no larger than ``compile``'s.

The three run side by side on one GPU (loss values do not depend on what else the GPU runs), at
``train.micro_batch_size=2``: the same global batch in more micro-batches (qwen3 then also runs two per
step, the case where compiling inline overwrote norm weights), so the three fit in memory together.
``LIGERKIT_RESULTS_DIR`` set: each recipe's losses and gaps are written there.

diffllama is a strict expected failure, measured on the H200 on 2026-12-01 (docs/benchmarks.md,
"Compile over Liger"): compiling moves its loss away from eager's by 1.18e-2 without Liger and
1.37e-2 with it, while the two compiled runs stay within 2.0e-3 of each other. Compiling, not Liger,
moves it: at step 1 eager's bf16 differential attention is 3.6e-3 from a float32 run, the compiled
arms 1.9e-4 and 1.7e-4. The margin is about the distance between the two compiled runs, so a re-run
may pass; strict, the test then reports that the claim held.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ligerkit.proof.arms import loss_gap, run_arm

ROOT = Path(__file__).resolve().parents[2]
EAGER_IS_THE_OUTLIER = pytest.mark.xfail(
    strict=True, reason="diffllama: compiling moves the loss from bf16 eager by 1.2e-2 to 1.4e-2 with or without "
                        "Liger (measured 2026-12-01: 1.37e-2 with Liger against 1.18e-2 without)")
RECIPES = [pytest.param(name, marks=EAGER_IS_THE_OUTLIER) if name == "diffllama" else name
           for name in sorted(p.parent.name for p in ROOT.glob("recipes/*/configs"))]
COMMON = ["train.micro_batch_size=2", "train.progress=false", "train.arm=null"]
ARMS = {
    "eager": ["model.liger_kernel.enabled=false", "train.compile=off"],
    "compile": ["model.liger_kernel.enabled=false", "train.compile=ops"],
    "liger_compile": ["model.liger_kernel.enabled=true", "train.compile=ops"],
}


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_mode_loss_stays_as_close_to_eager_as_plain_compile(recipe):
    config = ROOT / "recipes" / recipe / "configs" / "gpu.yaml"
    env = {"LIGERKIT_INDUCTOR_TABLE": "none"}
    with ThreadPoolExecutor(len(ARMS)) as pool:
        futures = {arm: pool.submit(run_arm, config, [*COMMON, *sets], env=env) for arm, sets in ARMS.items()}
        runs = {arm: f.result() for arm, f in futures.items()}
    losses = {arm: [s["loss"] for s in run["steps"]] for arm, run in runs.items()}
    gaps = {arm: loss_gap(losses[arm], losses["eager"]) for arm in ("compile", "liger_compile")}
    swaps = len(runs["liger_compile"]["report"]["patched"])
    out = os.environ.get("LIGERKIT_RESULTS_DIR")
    if out:
        Path(out, f"compile_loss_{recipe}.json").write_text(
            json.dumps({"recipe": recipe, "overrides": COMMON, "max_loss_gap_vs_eager": gaps, "swaps": swaps,
                        "losses": losses}, indent=2))
    assert swaps > 0
    assert gaps["liger_compile"] <= gaps["compile"], gaps
