"""Hard validation of this recipe's Liger wiring (the requirement's references/asserts.py)."""

from pathlib import Path

from ligerkit.proof.asserts import run_all


def test_liger_wiring():
    run_all(Path(__file__).resolve().parents[3])
