"""What this environment cannot prove, said in every report.

Liger's kernels are Triton kernels for CUDA GPUs and Ascend NPUs. Patching and building models
works anywhere; numerics and speed can only be checked where the kernels run.
"""

from __future__ import annotations

import importlib.metadata

# The one sentence every refusal to run Liger here starts with (train, the API's first forward).
NEEDS_ACCELERATOR = "Liger's kernels need a CUDA GPU or an Ascend NPU"

# Versions this release of ligerkit was tested against (CPU CI and the H200 device machine).
TESTED = {"liger-kernel": ("0.8.5",), "transformers": ("5.22.2",)}


def accelerator() -> str | None:
    """``cuda`` or ``npu`` when Liger's kernels can run here, else ``None``."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return None


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or ``None``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_gaps() -> tuple[str, ...]:
    """Every reason a report here cannot count as a full proof (the environment gaps)."""
    gaps = []
    if accelerator() is None:
        gaps.append(
            "no CUDA GPU or NPU here: swaps and the model scan were checked, Liger's numerics were not; "
            "run `ligerkit smoke RECIPE` (gradients per parameter and the loss curve, Liger off vs on) on a GPU machine"
        )
    for package, versions in TESTED.items():
        found = installed_version(package)
        if found not in versions:
            gaps.append(f"{package} {found} is outside the tested versions ({', '.join(versions)})")
    return tuple(gaps)


def environment_summary() -> str:
    """Installed vs tested versions, in one line."""
    return ", ".join(
        f"{pkg} {installed_version(pkg)} (tested {'/'.join(versions)})" for pkg, versions in TESTED.items()
    )
