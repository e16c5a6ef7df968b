"""Gradient parity: the proof a loss curve cannot give.

A loss can match to 1e-4 while every gradient is wrong (an in-place norm backward under a residual
add was measured at 1e5x off with an unchanged loss). So a swap is proved per parameter tensor:
the same model, the same weights and the same batch run three times in one process, with exact
revert between arms:

- **float32**, unpatched: the truth;
- **eager**, unpatched, in the training dtype (bfloat16): what rounding alone costs;
- **patched**, the kit's swaps on, in the training dtype.

For each parameter tensor ``r = ||g - g_fp32|| / ||g_fp32||``, where a model routes tokens by top-k
(mixtures of experts) ``g_fp32`` being the float32 run that makes the arm's own choices
(``routes.py``: a flipped route is a discontinuity of the model, not an error of a swap). The
patched model fails when any tensor's ``r`` exceeds ``factor * r(eager) + slack`` (defaults 2 and
0.01), and the result names the worst tensors. ``r(eager)`` is one sample of what rounding costs;
where a gradient is a sum that nearly cancels (diffllama's ``lambda_*``: sums over every attention
score), that sample is noisy, and measured on an H200 three unrelated swaps each landed 2.5x over
a bound set by a lucky eager sample. So a tensor over its first bound is judged again against the
larger of two samples of eager's error: the second at the same weights nudged by one bfloat16 step
(its own float32 truth), where rounding falls otherwise. A swap that is wrong stays far over either
(1e5x for the shared-gradient norm, 9x for the misread rotary). What the proof cannot see: a swap
whose error only shows at other shapes or after many steps (``smoke``'s loss curves cover steps),
and a parameter the batch never reaches.

A verdict names its coverage: the model class it ran, how many parameter tensors it compared and
what share of the model's trainable parameters they hold. Every parameter that requires a
gradient counts; one that got no gradient in the float32 run is *not compared*, and a result that
compared less than all of them is **PARTIAL** (never PASS), whatever the compared tensors say.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ligerkit.probe.tolerance import GradTolerance, relative_error
from ligerkit.proof.routes import Routes, Routing, differing, recording_routes, replaying_routes
from ligerkit.train.recipe.adapters import perturb_zero_adapters

Build = Callable[[], nn.Module]
Loss = Callable[[nn.Module], torch.Tensor]


@dataclass(frozen=True)
class TensorError:
    """One parameter tensor's relative gradient error in both arms, against float32."""

    name: str
    eager: float
    patched: float
    bound: float

    @property
    def ok(self) -> bool:
        """Within the tolerance (a NaN or infinite error never is)."""
        return math.isfinite(self.patched) and self.patched <= self.bound


PASS, PARTIAL, FAIL = "PASS", "PARTIAL", "FAIL"
PARTIAL_EXIT = 4  # the CLI's exit code for a PARTIAL verdict (PASS 0, FAIL 1, no GPU 3)


def exit_code(verdict: str) -> int:
    """The CLI exit code of a gradient verdict: PASS 0, FAIL 1, PARTIAL :data:`PARTIAL_EXIT`."""
    return {PASS: 0, FAIL: 1, PARTIAL: PARTIAL_EXIT}[verdict]


@dataclass(frozen=True)
class Coverage:
    """What a gradient verdict saw: the model, and which of its trainable parameters it compared."""

    model: str
    compared: int  # parameter tensors compared
    total: int  # parameter tensors that require a gradient
    compared_numel: int
    total_numel: int
    not_compared: tuple[str, ...] = ()  # required a gradient, got none

    @property
    def share(self) -> float:
        """The share of the trainable parameters (by element count) the compared tensors hold."""
        return self.compared_numel / self.total_numel if self.total_numel else 0.0

    @property
    def complete(self) -> bool:
        """Every parameter that requires a gradient was compared."""
        return self.total > 0 and self.compared == self.total

    def describe(self) -> str:
        """``in Qwen3ForCausalLM: 310 of 310 tensors (100% of the parameters)``."""
        missing = ""
        if self.not_compared:
            shown = ", ".join(self.not_compared[:3]) + (" ..." if len(self.not_compared) > 3 else "")
            missing = f"; no gradient: {shown}"
        return (f"in {self.model}: {self.compared} of {self.total} tensors ({self.share:.1%} of the parameters)"
                f"{missing}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"model": self.model, "compared": self.compared, "total": self.total, "share": self.share,
                "not_compared": list(self.not_compared)}


@dataclass
class GradParity:
    """Per-tensor errors of the eager and the patched arm, the three losses, the coverage, the verdict."""

    tensors: list[TensorError]
    losses: dict[str, float]
    tolerance: GradTolerance = field(default_factory=GradTolerance)
    coverage: Coverage | None = None
    routing: Routing | None = None  # set when the model makes top-k choices (routes.py)
    resampled: tuple[str, ...] = ()  # tensors over their first bound, whose eager error was sampled twice

    @property
    def verdict(self) -> str:
        """``FAIL`` (a tensor over its bound), ``PARTIAL`` (not every trainable parameter compared), or ``PASS``."""
        if not self.tensors or not all(t.ok for t in self.tensors):
            return FAIL
        if self.coverage is None or not self.coverage.complete:
            return PARTIAL
        return PASS

    @property
    def passed(self) -> bool:
        """Every trainable parameter compared, and every tensor within the tolerance."""
        return self.verdict == PASS

    @property
    def failures(self) -> list[TensorError]:
        """Tensors over the bound, worst (largest ratio to the bound) first."""
        return sorted((t for t in self.tensors if not t.ok), key=lambda t: -_ratio(t))

    def worst(self, n: int = 5) -> list[TensorError]:
        """The ``n`` tensors closest to (or furthest over) their bound."""
        return sorted(self.tensors, key=lambda t: -_ratio(t))[:n]

    @property
    def max_eager(self) -> float:
        """Largest eager relative error."""
        return max((t.eager for t in self.tensors), default=0.0)

    @property
    def max_patched(self) -> float:
        """Largest patched relative error."""
        return max((t.patched for t in self.tensors), default=0.0)

    def summary(self) -> str:
        """One line: the verdict, the worst tensor, the largest errors."""
        worst = self.worst(1)
        name = f"worst {worst[0].name}: {worst[0].patched:.3g} vs bound {worst[0].bound:.3g}; " if worst else ""
        seen = self.coverage.describe() if self.coverage is not None else f"{len(self.tensors)} tensors"
        routing = f"; {self.routing.describe()}" if self.routing is not None else ""
        if self.resampled:
            routing += f"; eager's error sampled twice for {len(self.resampled)} tensor(s)"
        return (f"gradients {self.verdict} ({seen}; {name}"
                f"max relative error eager {self.max_eager:.3g}, patched {self.max_patched:.3g}; "
                f"bound {self.tolerance.factor:g} x eager + {self.tolerance.slack:g}{routing})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (worst tensors first)."""
        return {"passed": self.passed, "verdict": self.verdict,
                "coverage": self.coverage.to_dict() if self.coverage is not None else None,
                "routing": self.routing.to_dict() if self.routing is not None else None,
                "resampled": list(self.resampled),
                "tolerance": {"factor": self.tolerance.factor, "slack": self.tolerance.slack},
                "losses": dict(self.losses), "max_eager": self.max_eager, "max_patched": self.max_patched,
                "failures": [t.name for t in self.failures],
                "tensors": [t.__dict__ for t in self.worst(len(self.tensors))]}


def _ratio(t: TensorError) -> float:
    return t.patched / t.bound if math.isfinite(t.patched) else math.inf


def gradients(model: nn.Module, loss: Loss, reached: set[str] | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    """One forward and backward: the loss and every parameter's gradient (float32, detached; zeros
    for a parameter that got none). ``reached``, when given, receives the names that got one."""
    model.zero_grad(set_to_none=True)
    value = loss(model)
    value.backward()
    grads = {name: (p.grad.detach().float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32))
             for name, p in model.named_parameters() if p.requires_grad}
    if reached is not None:
        reached.update(name for name, p in model.named_parameters() if p.requires_grad and p.grad is not None)
    model.zero_grad(set_to_none=True)
    return float(value.detach().float()), grads


def coverage_of(model: nn.Module, reached: set[str]) -> Coverage:
    """The coverage of a comparison over ``model``'s trainable parameters, ``reached`` being compared."""
    trainable = [(name, p.numel()) for name, p in model.named_parameters() if p.requires_grad]
    seen = [(name, n) for name, n in trainable if name in reached]
    return Coverage(type(model).__name__, len(seen), len(trainable), sum(n for _, n in seen),
                    sum(n for _, n in trainable), tuple(name for name, _ in trainable if name not in reached))


def grad_parity(build: Build, loss: Loss, patched: Callable[[], AbstractContextManager[Any]],
                dtype: torch.dtype = torch.bfloat16, tolerance: GradTolerance | None = None) -> GradParity:
    """Compare a model's gradients with its swaps on and off against a float32 run.

    ``build()`` returns the model on its device in float32 (called once per arm; the float32 arm's
    weights are loaded into the others, cast to ``dtype``, so every arm starts from the same point).
    ``patched()`` is a context manager under which the swaps are on (``kit.applied(...)``); the patched
    arm is built and run inside it and everything is reverted when it exits. The coverage is read from
    the float32 run: a trainable parameter without a gradient there is not compared.
    """
    tolerance = tolerance or GradTolerance()
    truth_model = build().float()
    perturb_zero_adapters(truth_model)  # LoRA's B starts at zero: every A gradient would be zero
    state = {k: v.detach().clone() for k, v in truth_model.state_dict().items()}
    reached: set[str] = set()
    with recording_routes() as truth_routes:
        loss32, truth = gradients(truth_model, loss, reached)
    coverage = coverage_of(truth_model, reached)
    truth = {name: g for name, g in truth.items() if name in reached}  # no gradient: not compared
    names = list(truth)

    def run(model: nn.Module) -> tuple[float, dict[str, torch.Tensor], Routes]:
        with recording_routes() as routes:
            value, grads = gradients(model, loss)
        missing = sorted(set(names) - set(grads))
        if missing:
            raise ValueError(f"the arms' parameters differ (missing {missing[:3]}); the swaps must keep the names")
        return value, {name: grads[name] for name in names}, routes

    def arm() -> nn.Module:
        model = build()
        model.load_state_dict(state)
        return model.to(dtype)

    def errors(grads: dict[str, torch.Tensor], routes: Routes, reference: dict[str, torch.Tensor],
               reference_routes: Routes, float32: nn.Module) -> tuple[dict[str, float], int | None]:
        """Relative errors against ``float32`` making the arm's own top-k choices (routes.py), and how
        many of the arm's choices differ from the float32 run's (``None``: not comparable, not pinned)."""
        flips = differing(routes, reference_routes) if reference_routes.calls else 0
        if flips:
            with replaying_routes(routes):
                _, pinned = gradients(float32, loss)
            reference = {name: pinned[name] for name in names}
        return {name: relative_error(grads[name], reference[name]) for name in names}, flips

    eager_model = arm()
    loss_eager, eager_grads, eager_routes = run(eager_model)
    eager, eager_flips = errors(eager_grads, eager_routes, truth, truth_routes, truth_model)
    del eager_grads
    with patched():
        patched_model = arm()
        loss_patched, patched_grads, patched_routes = run(patched_model)
        del patched_model
    swapped, patched_flips = errors(patched_grads, patched_routes, truth, truth_routes, truth_model)
    del patched_grads
    over = [name for name in names if not swapped[name] <= tolerance.bound(eager[name])]
    if over:  # eager's own error sampled again, at weights nudged by a step of ``dtype``
        nudged = nudge(state)
        truth_model.load_state_dict(nudged)
        with recording_routes() as routes2:
            _, truth2 = gradients(truth_model, loss)
        eager_model.load_state_dict(nudged)
        _, grads2, eager_routes2 = run(eager_model)
        second, _ = errors(grads2, eager_routes2, truth2, routes2, truth_model)
        truth_model.load_state_dict(state)
        eager = {name: max(eager[name], second[name]) if name in over else eager[name] for name in names}
    del truth_model, eager_model
    tensors = [TensorError(name, eager[name], swapped[name], tolerance.bound(eager[name])) for name in names]
    routing = None if not truth_routes.calls else Routing(truth_routes.choices, eager_flips, patched_flips)
    return GradParity(tensors, {"float32": loss32, "eager": loss_eager, "patched": loss_patched}, tolerance,
                      coverage, routing, resampled=tuple(over))


def nudge(state: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Every floating tensor of ``state`` moved by about one step of ``dtype`` (up or down, from a fixed
    seed): the same model a rounding away, where ``dtype``'s rounding falls otherwise."""
    g = torch.Generator().manual_seed(17)
    step = torch.finfo(dtype).eps
    found = {}
    for key, value in state.items():
        if value.is_floating_point():
            sign = torch.randint(0, 2, value.shape, generator=g).to(value.device, value.dtype) * 2 - 1
            value = value * (1 + sign * step)
        found[key] = value
    return found
