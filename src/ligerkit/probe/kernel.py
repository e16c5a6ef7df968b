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


def call_outputs(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], wrt: list[str],
                 grads: list[torch.Tensor] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``fn(*args, **kwargs)``'s output tensors, then the gradients of the arguments named in ``wrt``
    (``"#0"`` for a position, else a keyword) for the upstream ``grads`` (random from a fixed seed when
    ``None``: the same for every call whose outputs have the same shapes); the arguments are fresh
    copies, so a function that writes into its inputs (Liger's rotary) changes nothing the caller holds."""
    args = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    leaves = []
    for name in wrt:
        value = args[int(name[1:])] if name.startswith("#") else kwargs[name]
        value.requires_grad_(True)
        leaves.append(value)
    with torch.enable_grad():
        out = fn(*args, **kwargs)
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        if grads is None:
            g = torch.Generator().manual_seed(5)
            grads = [torch.randn(t.shape, generator=g).to(t.device, t.dtype) for t in outs]
        found = torch.autograd.grad(outs, leaves, [g.to(t.device, t.dtype) for g, t in zip(grads, outs, strict=True)],
                                    allow_unused=True)
    return [t.detach() for t in outs], [g if g is not None else torch.zeros_like(x) for g, x in zip(found, leaves)]


def kernel_check_call(fn: Callable[..., Any], kernel: Callable[..., Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any], wrt: list[str], errors: dict[str, float]) -> list[str]:
    """Run a Liger function (its real kernel, on the GPU) on one call's arguments against the source,
    forward and backward: the kernel in bfloat16 and the source in float32 (truth) and bfloat16."""
    def on(dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def move(v: Any) -> Any:
            if not isinstance(v, torch.Tensor):
                return v
            return v.to("cuda", dtype) if v.is_floating_point() else v.to("cuda")
        return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}

    truth_out, truth_grads = call_outputs(fn, *on(torch.float32), wrt)
    eager_out, eager_grads = call_outputs(fn, *on(torch.bfloat16), wrt)
    got_out, got_grads = call_outputs(kernel, *on(torch.bfloat16), wrt)
    names = [f"output {i}" for i in range(len(truth_out))] + [f"grad {n}" for n in wrt]
    return _kernel_verdicts(names, truth_out + truth_grads, eager_out + eager_grads, got_out + got_grads, errors)
