"""Hard validation of this recipe's Liger wiring (the requirement's references/asserts.py).

Where Liger's qwen3_vl helper is known to fail on the installed stack (``ligerkit.environment.TESTED``:
transformers 5.23 renamed the VL output classes liger-kernel 0.8.5 imports), the wiring stops at the clear
``HelperFailedError`` naming why, and that is what this proves there.
"""

from pathlib import Path

from helpers import failing_helper
from ligerkit.proof.asserts import run_all


def test_liger_wiring():
    with failing_helper("qwen3_vl"):
        run_all(Path(__file__).resolve().parents[3])
