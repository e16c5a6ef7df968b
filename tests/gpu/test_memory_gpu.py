"""GPU: ``benchmarks/memory_gpu.py`` measures the same memory whether the step that makes the optimizer
states runs at the measured length or short (``--first-step-tokens``, what the context sweep's
``--breakdown`` runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ligerkit.proof.context_sweep import trial_overrides

ROOT = Path(__file__).resolve().parents[2]


def measured(*more: str) -> dict:
    sets = [part for line in trial_overrides("liger_fused+offload", 8192) for part in ("--set", line)]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "memory_gpu.py"),
                           str(ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"), "--saved", *sets, *more],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.gpu
def test_a_short_first_step_measures_what_a_full_length_one_does():
    full, short = measured(), measured("--first-step-tokens", "1024")
    assert (full["first_step_tokens"], short["first_step_tokens"]) == (8192, 1024)
    # cuBLAS's workspaces apart: the first process's set-up left two more (64 MiB in its weights row)
    assert short["workspace_gib"] == full["workspace_gib"] > 0
    assert short["weights_gib"] == full["weights_gib"]
    assert short["optimizer_states_gib"] == pytest.approx(full["optimizer_states_gib"], abs=0.01)
    for key in ("saved_by_forward_gib", "micro_batch_peak_gib", "host_offloaded_gib", "saved_gib"):
        assert short[key] == pytest.approx(full[key], rel=0.02, abs=0.01), key
