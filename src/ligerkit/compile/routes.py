"""Where Liger's module classes call their kernels, and what they call instead under compile.

Liger's module classes reach their kernels through a few names bound in Liger's own modules
(``LigerRMSNormFunction`` in ``liger_kernel.transformers.rms_norm``, the ``dispatch`` its rotary
function calls, ...). In compile mode the kit rebinds exactly those names to the stand-ins below,
which call ``ligerkit.compile.ops``; the model's classes stay Liger's (reports, scans and
``__class__.__module__`` checks see no difference) and their arguments mean what they meant.
The rebinding is a swap like any other: recorded, process-wide, reverted with the kit.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

import torch
from torch import Tensor

from ligerkit.compile import ops

_CASTING_BY_NUMBER = {0: "none", 1: "llama", 2: "gemma"}


def _casting_name(mode: Any) -> str:
    """Liger passes the casting mode as a name, or (already converted) as its number."""
    if isinstance(mode, str):
        return mode
    value = getattr(mode, "value", mode)
    if value not in _CASTING_BY_NUMBER:
        raise ValueError(f"unknown RMSNorm casting mode {mode!r}")
    return _CASTING_BY_NUMBER[value]


class RMSNormFunction:
    """Stands in for ``LigerRMSNormFunction``: same ``apply`` arguments, the ``ligerkit::rms_norm``
    operator underneath. ``in_place`` is accepted and has no effect: the operator never writes into
    the incoming gradient (the value of dX is the same)."""

    @staticmethod
    def apply(x: Tensor, weight: Tensor | None, eps: float, offset: float = 0.0, casting_mode: Any = "llama",
              in_place: bool = True, row_mode: bool | None = None) -> Tensor:
        """``LigerRMSNormFunction.apply`` through the compile-mode operator."""
        return ops.rms_norm(x, weight, float(eps), float(offset), _casting_name(casting_mode), row_mode)[0]


class SiLUMulFunction:
    """Stands in for ``LigerSiLUMulFunction`` (SwiGLU): the ``ligerkit::silu_mul`` operator."""

    @staticmethod
    def apply(a: Tensor, b: Tensor, gate_multiplier: float = 1.0, down_multiplier: float = 1.0) -> Tensor:
        """``LigerSiLUMulFunction.apply`` through the compile-mode operator."""
        return ops.silu_mul(a, b, float(gate_multiplier), float(down_multiplier))


class GELUMulFunction:
    """Stands in for ``LigerGELUMulFunction`` (GEGLU, tanh GELU): the ``ligerkit::gelu_mul`` operator."""

    @staticmethod
    def apply(a: Tensor, b: Tensor) -> Tensor:
        """``LigerGELUMulFunction.apply`` through the compile-mode operator."""
        return ops.gelu_mul(a, b)


def rope_dispatch(op_name: str, *args: Any, impl: str | None = None, backend: str | None = None,
                  **kwargs: Any) -> Any:
    """Stands in for the ``dispatch`` Liger's rotary functions call: ``"rope"`` with no implementation
    asked for goes to the ``ligerkit::rope`` operator; anything else to Liger's dispatcher."""
    if op_name == "rope" and impl is None and backend is None and set(kwargs) <= {"rotary_dim"} and 4 <= len(args) <= 6:
        q, k, cos, sin = args[:4]
        unsqueeze_dim = args[5] if len(args) == 6 else 1
        return ops.rope(q, k, cos, sin, int(unsqueeze_dim), kwargs.get("rotary_dim"))
    from liger_kernel.backends.dispatch import dispatch

    return dispatch(op_name, *args, impl=impl, backend=backend, **kwargs)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-6, *, impl: str | None = None,
               mode: str | None = None, backend: str | None = None) -> Tensor:
    """Stands in for ``liger_kernel.functional.layer_norm`` as ``LigerLayerNorm`` calls it: the
    ``ligerkit::layer_norm`` operator unless an implementation or kernel mode is asked for."""
    if impl is None and mode is None and backend is None:
        return ops.layer_norm(x, weight, bias, float(eps))[0]
    from liger_kernel.functional import layer_norm as liger_layer_norm

    return liger_layer_norm(x, weight, bias, eps, impl=impl, mode=mode, backend=backend)


@dataclass(frozen=True)
class Route:
    """One name in a Liger module rebound in compile mode.

    ``kernel`` is the module key it serves (``rms_norm``, ...); ``module`` is where Liger's classes and
    functions for that kernel live, and where the name is rebound.
    """

    kernel: str
    module: str
    attr: str
    replacement: object


ROUTES: tuple[Route, ...] = (
    Route("rms_norm", "liger_kernel.transformers.rms_norm", "LigerRMSNormFunction", RMSNormFunction),
    Route("layer_norm", "liger_kernel.transformers.layer_norm", "_functional_layer_norm", layer_norm),
    Route("swiglu", "liger_kernel.transformers.swiglu", "LigerSiLUMulFunction", SiLUMulFunction),
    Route("geglu", "liger_kernel.transformers.geglu", "LigerGELUMulFunction", GELUMulFunction),
    Route("rope", "liger_kernel.transformers.rope", "dispatch", rope_dispatch),
)


def route_for(qualified: str) -> Route | None:
    """The route of the Liger module a replacement is defined in, by qualified name (``None``: none).

    A name says where a replacement lives, not what it runs (``LigerExperts`` lives beside the SwiGLU
    MLP and runs the fused-MoE kernel); :func:`kernels_called` reads what it runs."""
    return next((r for r in ROUTES if qualified.startswith(r.module + ".")), None)


@dataclass(frozen=True)
class KernelCalls:
    """What a Liger replacement runs: the routes its kernels go through, and the Liger kernels (autograd
    functions) it calls that no route serves, which torch.compile would trace inline."""

    routes: tuple[Route, ...]
    unrouted: tuple[str, ...]

    @property
    def fully_routed(self) -> bool:
        """Every kernel it calls goes through a compile-mode operator (and it calls at least one)."""
        return bool(self.routes) and not self.unrouted


def kernels_called(replacement: object) -> KernelCalls:
    """Read, from its code, which kernels a Liger replacement runs: a class's ``forward`` and those of
    the classes it inherits from (a subclass's ``super().forward()`` runs them), or a function,
    following the module-level functions they call in Liger's modules. A route counts when the code
    reads the route's rebound name from the module it is rebound in."""
    if isinstance(replacement, type):
        todo = [vars(cls)["forward"] for cls in replacement.__mro__ if callable(vars(cls).get("forward"))]
    else:
        todo = [replacement] if callable(replacement) else []
    routes: dict[str, Route] = {}
    unrouted: dict[str, None] = {}
    seen: set[int] = set()
    while todo:
        fn = inspect.unwrap(todo.pop())
        code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if code is None or scope is None or id(code) in seen:
            continue
        seen.add(id(code))
        for name in _global_names(code):
            route = next((r for r in ROUTES if r.attr == name and _module_dict(r.module) is scope), None)
            value = scope.get(name)
            if route is not None:
                routes[route.kernel] = route
            elif _is_liger_function(value):
                unrouted[f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', name)}"] = None
            elif inspect.isfunction(value) and str(getattr(value, "__module__", "")).startswith("liger_kernel."):
                todo.append(value)
    return KernelCalls(tuple(routes.values()), tuple(unrouted))


def _global_names(code: CodeType) -> set[str]:
    """Names a code object (and the code nested in it) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _global_names(const)
    return names


def _module_dict(module: str) -> dict[str, Any] | None:
    loaded = sys.modules.get(module)
    return vars(loaded) if loaded is not None else None


def _is_liger_function(value: object) -> bool:
    """An autograd function of Liger's (what its modules call their Triton kernels through)."""
    return (isinstance(value, type) and issubclass(value, torch.autograd.Function)
            and str(getattr(value, "__module__", "")).startswith("liger_kernel."))
