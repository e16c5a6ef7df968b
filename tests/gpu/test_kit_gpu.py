"""GPU: a kit-wired Qwen3 keeps the loss of the unpatched model and the speed of Liger's helper.

Both sides run through the same trainer; the speed ratio is the median over alternating kit/helper
process pairs (``ligerkit.proof.helper_speed``), so a job sharing the host slows both sides of a pair.
The claim is one-sided: the kit must not be slower than the helper. Single pairs of short runs on the
H200 have ranged from 0.95 to 1.13 (docs/results/kit/), so the bound allows 3% of noise below 1 on the
median of five longer pairs; a kit that is faster is no fault.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ligerkit.proof.helper_speed import compare_kit_to_helper, to_markdown

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["model.config.num_hidden_layers=12", "model.config.vocab_size=32000", "data.seq_len=2048",
         "train.global_batch_size=8", "train.micro_batch_size=8"]


@pytest.mark.gpu
def test_kit_wired_qwen3_matches_eager_loss_and_direct_helper_speed():
    result = compare_kit_to_helper(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml", SHAPE, steps=60, warmup=10,
                                   repeats=5)
    out = os.environ.get("LIGERKIT_RESULTS_DIR")
    if out:
        Path(out, "kit_parity.json").write_text(json.dumps(result, indent=2))
        Path(out, "kit_parity.md").write_text(to_markdown(result) + "\n")
    assert result["max_loss_gap_kit_vs_direct"] <= 1e-2  # the same kernels: only run-to-run drift
    assert result["max_loss_gap_kit_vs_eager"] <= 1e-2
    assert result["tokens_per_s_kit_over_direct"] >= 0.97
    assert result["tokens_per_s_kit_over_eager"] > 1.0
