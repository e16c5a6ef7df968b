"""On a CUDA GPU, a matching pair also runs through Liger's real kernel, under the gradient-parity rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ligerkit.probe.compare import module_outputs, out_shape
from ligerkit.probe.tolerance import GradTolerance, relative_error

KERNEL_TOLERANCE = GradTolerance()  # Liger's kernel vs float32, against the source in bfloat16 vs float32


def kernel_available() -> bool:
    """Liger's real kernels can run here (a CUDA GPU)."""
    return torch.cuda.is_available()


def _kernel_verdicts(names: list[str], truth: list[torch.Tensor], eager: list[torch.Tensor],
                     kernel: list[torch.Tensor], errors: dict[str, float]) -> list[str]:
    """The gradient-parity rule per output and gradient: the kernel's relative error against the
    float32 source may be at most ``factor x`` the bfloat16 source's, plus ``slack``."""
    reasons = []
    for name, t, e, k in zip(names, truth, eager, kernel, strict=True):
        r_eager, r_kernel = relative_error(e, t), relative_error(k, t)
        errors[f"kernel {name}"] = r_kernel
        if not r_kernel <= KERNEL_TOLERANCE.bound(r_eager):
            reasons.append(f"Liger's kernel on the GPU: {name} is off by {r_kernel:.3g} relative to float32 "
                           f"(the source in bfloat16: {r_eager:.3g})")
    return reasons


def kernel_check_module(source: nn.Module, candidate: nn.Module, x: torch.Tensor,
                         errors: dict[str, float]) -> list[str]:
    """Run the real Liger module on the GPU against the source: outputs and every gradient, the
    kernel in bfloat16 and the source in float32 (truth) and bfloat16 (what rounding costs)."""
    grad = torch.randn(out_shape(source.float(), x.float()), generator=torch.Generator().manual_seed(5)).to("cuda")
    xs = x.to("cuda")
    truth = module_outputs(source.to("cuda", torch.float32), source, xs.float(), grad)
    eager = module_outputs(source.to(torch.bfloat16), source, xs.to(torch.bfloat16), grad)
    candidate = candidate.to("cuda", torch.bfloat16)
    candidate.load_state_dict(source.state_dict())
    kernel = module_outputs(candidate, candidate, xs.to(torch.bfloat16), grad)
    names = ["forward", "grad input", *["grad " + n for n, _ in sorted(source.named_parameters())]]
    return _kernel_verdicts(names, truth, eager, kernel, errors)


def kernel_check_function(fn: Callable[..., Any], kernel: Callable[..., Any], inputs: dict[str, Any],
                           errors: dict[str, float]) -> list[str]:
    """Run the real Liger rotary kernel on the GPU against the source (float32 truth, bfloat16 eager)."""
    def on(dtype: torch.dtype) -> dict[str, Any]:
        return {k: (v.to("cuda", dtype) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}

    truth, eager = fn(**on(torch.float32)), fn(**on(torch.bfloat16))
    got = kernel(**on(torch.bfloat16))  # Liger's rotary writes into the q/k it is given: fresh copies
    return _kernel_verdicts(["q", "k"], list(truth), list(eager), list(got), errors)
