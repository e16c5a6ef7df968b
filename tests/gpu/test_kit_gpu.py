"""GPU: a kit-wired Qwen3 keeps the loss of the unpatched model and the speed of Liger's helper."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_kit_wired_qwen3_matches_eager_loss_and_direct_helper_speed():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import kit_gpu_parity as bench

    result = bench.compare(steps=40, warmup=8, parity_steps=10, loss_tol=1e-2, speed_tol=0.02, repeats=3)
    out = os.environ.get("LIGERKIT_RESULTS_DIR")
    if out:
        Path(out, "kit_parity.json").write_text(json.dumps(result, indent=2))
        Path(out, "kit_parity.md").write_text(bench.to_markdown(result) + "\n")
    assert result["max_loss_diff_kit_vs_eager"] <= 1e-2
    assert abs(1 - result["tokens_per_s_kit_over_direct"]) <= 0.02
    assert result["tokens_per_s_kit_over_eager"] > 1.0
