"""Which swap of a ``suggest`` map moves a failing gradient: the map applied one key at a time.

For each module, ``suggest MODULE --gpu``'s map (in-place checks on the GPU) is proven key by key on
the module's whole model (``map_grad_parity``), and one JSON line per key is printed: the verdict,
the coverage and the worst tensor against its bound.

    python3 benchmarks/ablate_map_gpu.py transformers.models.minimax_m2.modeling_minimax_m2 ...
"""

from __future__ import annotations

import json
import sys

import torch

from ligerkit.proof.recipe_grads import map_grad_parity, suggested_patches
from ligerkit.suggest import suggest


def ablate(module: str) -> None:
    """Print one line per key of ``module``'s suggested map, proven alone."""
    found = suggest(module, device="cuda")
    patches = suggested_patches(found)
    for key, value in patches.items():
        try:
            result = map_grad_parity(found.module_object, found.config_object, {key: value}, torch.device("cuda"))
            worst = result.worst(1)[0]
            row = {"verdict": result.verdict, "coverage": result.coverage.describe(), "worst": worst.name,
                   "patched": worst.patched, "bound": worst.bound, "eager": worst.eager}
        except Exception as exc:  # one key's failure is a result, not the end of the run
            row = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps({"module": module, "key": key, **row}), flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        ablate(name)
