"""Which bench arm to train with: the fastest one whose loss and step-1 gradients stay within tolerance.

Two rules, both against references measured in the same ``ligerkit bench`` invocation:

- **loss**: the arm's largest per-step absolute loss difference from the ``eager`` arm (same seed,
  same data, every step of the run) is at most ``loss_tolerance`` (``--loss-tolerance``, 1e-2 by
  default: bf16 training's tolerance in ``ligerkit smoke``), or, with ``--loss-reference float32``,
  its largest gap to a float32 run of eager is at most eager's own plus that tolerance;
- **gradients** (unless ``--no-grads``): one forward and backward of every arm on the recipe's first
  micro-batch, from the same weights, against the float32, Liger-off, uncompiled model
  (``ligerkit.proof.arm_grads``). Every parameter tensor's relative error must stay within
  ``factor x reference + slack`` (``GradTolerance``, 2 x ref + 0.01), where the reference is the
  ``eager`` arm's error for an uncompiled arm and the ``compile`` arm's for a compiled one (compiling
  changes rounding by itself); ``compile`` is judged against ``eager``, and a compiled arm passes only
  when ``compile`` does. A parameter or buffer the pass changed (a kernel writing into a weight)
  fails the arm too, and so does a trainable parameter the sample gave no gradient (PARTIAL: what
  was not compared stays unproven).

``eager`` is the reference, so it is always the fallback. Everything here is pure: the bench feeds
it measured numbers, tests feed it synthetic ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ligerkit.probe.tolerance import GradTolerance
from ligerkit.train.config.arms import ARMS, REFERENCE_ARM, config_lines, is_compiled
from ligerkit.train.config import TrainConfig

COMPILED_REFERENCE = "compile"
"""The reference arm of every compiled arm but itself."""


class GradErrors(Protocol):
    """What the gradient rule reads of one arm's result (``ligerkit.proof.arm_grads.ArmGrads``)."""

    @property
    def errors(self) -> Mapping[str, float]:
        """Each parameter tensor's relative gradient error against float32."""
        ...

    @property
    def changed(self) -> Sequence[str]:
        """Parameters or buffers the forward and backward changed (must be none)."""
        ...

    @property
    def not_compared(self) -> Sequence[str]:
        """Trainable parameters the sample gave no gradient (not compared: the check is partial)."""
        ...


@dataclass(frozen=True)
class GradCheck:
    """One arm's step-1 gradients against its reference arm's."""

    arm: str
    reference: str
    passed: bool
    reason: str
    failures: tuple[str, ...] = ()
    max_error: float = 0.0


@dataclass(frozen=True)
class ArmVerdict:
    """One bench arm under both rules (``grads_ok`` is ``None`` when gradients were not checked)."""

    arm: str
    tokens_per_s_vs_eager: float
    max_loss_gap_vs_eager: float
    loss_ok: bool
    grads_ok: bool | None
    reason: str

    @property
    def passed(self) -> bool:
        """Within the loss tolerance and not failing the gradient rule."""
        return self.loss_ok and self.grads_ok is not False


@dataclass(frozen=True)
class Recommendation:
    """The arm to train with, why, the config lines that select it, and every arm's verdict."""

    arm: str
    reason: str
    tokens_per_s_vs_eager: float
    loss_tolerance: float
    grads_checked: bool
    verdicts: tuple[ArmVerdict, ...]
    config_lines: tuple[str, ...] = field(default=())
    equivalent_lines: tuple[str, ...] = field(default=())
    kept_lines: tuple[str, ...] = field(default=())  # how the config trains, which every arm ran with

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``bench.json``'s ``recommendation``)."""
        return {"arm": self.arm, "reason": self.reason, "tokens_per_s_vs_eager": self.tokens_per_s_vs_eager,
                "loss_tolerance": self.loss_tolerance, "grads_checked": self.grads_checked,
                "config_lines": list(self.config_lines), "equivalent_lines": list(self.equivalent_lines),
                "kept_lines": list(self.kept_lines), "verdicts": {v.arm: {**asdict(v), "passed": v.passed} for v in self.verdicts}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recommendation:
        """The inverse of :meth:`to_dict` (a ``bench.json``'s ``recommendation``)."""
        verdicts = tuple(ArmVerdict(**{k: v[k] for k in ArmVerdict.__dataclass_fields__})
                         for v in data["verdicts"].values())
        return cls(data["arm"], data["reason"], data["tokens_per_s_vs_eager"], data["loss_tolerance"],
                   data["grads_checked"], verdicts, tuple(data["config_lines"]), tuple(data["equivalent_lines"]),
                   tuple(data.get("kept_lines", ())))

    def lines(self) -> list[str]:
        """What ``ligerkit bench`` prints last: the arm, its speed, why, and the lines that select it."""
        out = [f"Recommendation: {self.arm} ({self.tokens_per_s_vs_eager:.2f}x eager tokens/s)", f"  {self.reason}"]
        if not self.grads_checked:
            out.append("  Gradients were not checked (--no-grads): only the loss rule was applied.")
        out += ["  Select it in a recipe config (each dotted key nested in the YAML) with:",
                *(f"    {line}" for line in self.config_lines),
                "  or with the equivalent explicit lines:", *(f"    {line}" for line in self.equivalent_lines),
                f"  (on the command line: --set train.arm={self.arm})"]
        if self.kept_lines:
            out += ["  Every arm trained as the config does; keep these lines:",
                    *(f"    {line}" for line in self.kept_lines)]
        return out

    def markdown(self) -> str:
        """The recommendation and a table of every arm's verdict (``bench.md``)."""
        rows = ["| arm | tokens/s vs eager | max loss gap vs eager | loss | step-1 gradients | verdict |",
                "| --- | ---: | ---: | --- | --- | --- |"]
        for v in self.verdicts:
            grads = "not checked" if v.grads_ok is None else "pass" if v.grads_ok else "FAIL"
            rows.append(f"| {v.arm} | {v.tokens_per_s_vs_eager:.2f}x | {v.max_loss_gap_vs_eager:.1e} | "
                        f"{'pass' if v.loss_ok else 'FAIL'} | {grads} | {v.reason} |")
        head = [f"**Recommendation: {self.arm}** ({self.tokens_per_s_vs_eager:.2f}x eager tokens/s). {self.reason}"]
        if not self.grads_checked:
            head.append("Gradients were not checked (--no-grads): only the loss rule was applied.")
        select = (f"Select it in a recipe config with {' '.join(f'`{line}`' for line in self.config_lines)} "
                  f"(`--set train.arm={self.arm}`), or with the equivalent explicit lines "
                  f"{', '.join(f'`{line}`' for line in self.equivalent_lines)}.")
        if self.kept_lines:
            select += (" Every arm trained as the config does; keep "
                       + ", ".join(f"`{line}`" for line in self.kept_lines) + ".")
        return "\n\n".join([*head, select, "\n".join(rows)])


def training_lines(train: TrainConfig) -> tuple[str, ...]:
    """The config lines that set how a config trains beyond its arm (LoRA, activation checkpointing, the
    gated-activation and norm-output recomputes):
    every bench arm ran with them, so the recommendation holds only with them kept."""
    lines = []
    if train.lora is not None:
        lora = train.lora
        targets = lora.target_modules if isinstance(lora.target_modules, str) else "[" + ", ".join(
            lora.target_modules) + "]"
        lines.append(f"train.lora: {{rank: {lora.rank}, alpha: {lora.alpha:g}, dropout: {lora.dropout:g}, "
                     f"target_modules: {targets}}}")
    if train.activation_checkpointing:
        lines.append(f"train.activation_checkpointing: {str(train.activation_checkpointing).lower()}")  # or offload
    if train.memory.recompute_glu_product:
        lines.append("train.memory.recompute_glu_product: true")
    if train.memory.recompute_norm_output:
        lines.append("train.memory.recompute_norm_output: true")
    return tuple(lines)


def reference_of(arm: str) -> str:
    """The arm whose gradient error bounds ``arm``'s: ``compile`` for compiled arms, else ``eager``."""
    return COMPILED_REFERENCE if is_compiled(arm) and arm != COMPILED_REFERENCE else REFERENCE_ARM


def gradient_arms(arms: Sequence[str]) -> list[str]:
    """The arms whose gradients the rule needs: ``arms`` and their references (references first)."""
    refs = [REFERENCE_ARM, *([COMPILED_REFERENCE] if any(is_compiled(a) for a in arms) else [])]
    return [*refs, *dict.fromkeys(a for a in arms if a not in refs)]


def check_gradients(grads: Mapping[str, GradErrors], tolerance: GradTolerance | None = None,
                    references: Mapping[str, str] | None = None) -> dict[str, GradCheck]:
    """Judge every arm of ``grads`` against its reference: :func:`reference_of` for the bench's arms, or
    ``references`` (arm to reference, any names, e.g. the context sweep's ``ARM+VARIANT``; an arm its own
    reference is judged as one); ``grads`` may hold ``float32`` (ignored) and must hold every reference."""
    tolerance = tolerance or GradTolerance()
    refs = dict(references) if references is not None else {a: reference_of(a) for a in grads if a in ARMS}
    depth = lambda arm: 0 if refs[arm] in (arm, None) or refs[arm] not in refs else 1 + depth(refs[arm])  # noqa: E731
    checks: dict[str, GradCheck] = {}
    for arm in sorted(refs, key=depth):  # references before the arms they bound
        reference = refs[arm]
        if arm not in grads:
            raise ValueError(f"no gradients of {arm!r} to judge")
        if reference not in grads:
            raise ValueError(f"the gradients of {arm!r} need those of its reference arm {reference!r}")
        checks[arm] = _check_one(arm, grads[arm], reference, grads[reference], tolerance, checks.get(reference))
    return {a: checks[a] for a in grads if a in checks}


def _check_one(arm: str, result: GradErrors, reference: str, ref: GradErrors, tolerance: GradTolerance,
               ref_check: GradCheck | None) -> GradCheck:
    """One arm's verdict: every tensor within ``tolerance.bound(reference's error)``, nothing changed."""
    errors = dict(result.errors)
    top = max(errors.values(), default=0.0)
    if arm == reference:
        # the reference of itself: its error is what rounding costs, by definition within bounds
        finite = all(math.isfinite(e) for e in errors.values())
        return GradCheck(arm, reference, finite and not result.changed,
                         "the reference" if finite and not result.changed else _changed_or_nan(result, errors), (), top)
    if result.changed:
        return GradCheck(arm, reference, False, _changed_or_nan(result, errors), tuple(result.changed), top)
    failures = sorted((name for name, e in errors.items()
                       if not (math.isfinite(e) and e <= tolerance.bound(ref.errors.get(name, math.nan)))),
                      key=lambda n: -_ratio(errors[n], tolerance.bound(ref.errors.get(n, math.nan))))
    missing = sorted(set(ref.errors) - set(errors))
    if failures or missing:
        worst = failures[0] if failures else missing[0]
        bound = tolerance.bound(ref.errors.get(worst, math.nan))
        detail = (f"{worst}: {errors[worst]:.3g} > {bound:.3g}" if worst in errors else f"{worst} has no gradient")
        return GradCheck(arm, reference, False, f"{len(failures) + len(missing)} of {len(ref.errors)} gradients over "
                         f"{tolerance.factor:g} x {reference} + {tolerance.slack:g} (worst {detail})",
                         tuple(failures + missing), top)
    if ref_check is not None and not ref_check.passed:
        return GradCheck(arm, reference, False, f"its reference arm {reference} failed ({ref_check.reason})", (), top)
    unseen = list(getattr(result, "not_compared", ()))
    if unseen:
        return GradCheck(arm, reference, False, f"PARTIAL: {len(unseen)} trainable parameter tensors got no gradient "
                         f"from the sample and were not compared (first: {unseen[0]})", tuple(unseen), top)
    return GradCheck(arm, reference, True, f"every gradient within {tolerance.factor:g} x {reference} + "
                     f"{tolerance.slack:g}", (), top)


def _changed_or_nan(result: GradErrors, errors: Mapping[str, float]) -> str:
    if result.changed:
        return f"the forward and backward changed {len(result.changed)} weights or buffers (first: {result.changed[0]})"
    bad = [n for n, e in errors.items() if not math.isfinite(e)]
    return f"{len(bad)} gradients are not finite (first: {bad[0]})"


def _ratio(error: float, bound: float) -> float:
    return error / bound if math.isfinite(error) and math.isfinite(bound) and bound > 0 else math.inf


def recommend(tokens_per_s: Mapping[str, float], loss_gaps: Mapping[str, float], loss_tolerance: float,
              grads: Mapping[str, GradCheck] | None,
              float32_gaps: Mapping[str, float] | None = None) -> Recommendation:
    """The fastest arm of ``tokens_per_s`` within both rules (ties: the first given), else ``eager``.

    ``tokens_per_s`` holds each arm's speed, absolute or already relative to eager (the bench passes
    the median of its per-round ratios, so eager's is 1.0); the ratios reported divide by eager's.

    ``loss_gaps`` holds each arm's largest per-step absolute loss gap against eager; ``grads`` each
    arm's :class:`GradCheck`, or ``None`` when gradients were not checked (then only the loss rule
    applies, and the recommendation says so). An arm missing from ``grads`` fails the gradient rule.
    ``float32_gaps`` (``--loss-reference float32``: each arm's and eager's largest gap to a float32
    run) also passes the loss rule for an arm no further from float32 than eager is, plus the tolerance
    (:mod:`ligerkit.proof.loss_reference`).
    """
    if REFERENCE_ARM not in tokens_per_s:
        raise ValueError(f"a recommendation needs the {REFERENCE_ARM!r} arm (the reference)")
    if not (math.isfinite(loss_tolerance) and loss_tolerance >= 0):
        raise ValueError(f"the loss tolerance must be a finite number >= 0, got {loss_tolerance}")
    base = tokens_per_s[REFERENCE_ARM]
    verdicts = tuple(_verdict(arm, speed / base, loss_gaps[arm], loss_tolerance, grads, float32_gaps)
                     for arm, speed in tokens_per_s.items())
    checked = grads is not None
    rules = (f"per-step loss within {loss_tolerance:g} of eager's"
             + (" (or no further from a float32 run's than eager's, plus that)" if float32_gaps else "")
             + (" and step-1 gradients within tolerance" if checked else ""))
    eager = next(v for v in verdicts if v.arm == REFERENCE_ARM)
    passing = [v for v in verdicts if v.passed]
    if not any(v.arm != REFERENCE_ARM for v in passing):
        best = eager
        reason = f"No arm other than eager has {rules}; eager, the reference, is the fallback."
        if not eager.passed:
            reason += f" (eager itself: {eager.reason}.)"
    else:
        best = max(passing, key=lambda v: v.tokens_per_s_vs_eager)  # max keeps the first of equals
        reason = f"The fastest of the {len(passing)} arms (of {len(verdicts)}) with {rules}."
    return Recommendation(best.arm, reason, best.tokens_per_s_vs_eager, loss_tolerance, checked, verdicts,
                          (f"train.arm: {best.arm}",), config_lines(best.arm))


def _verdict(arm: str, ratio: float, gap: float, loss_tolerance: float, grads: Mapping[str, GradCheck] | None,
             float32_gaps: Mapping[str, float] | None = None) -> ArmVerdict:
    """One arm under the loss rule and (when checked) the gradient rule, with the reason in words."""
    loss_ok = math.isfinite(gap) and gap <= loss_tolerance
    check = grads.get(arm) if grads is not None else None
    grads_ok = None if grads is None else check is not None and check.passed
    reasons = [] if loss_ok else [f"max loss gap {gap:.2g} > {loss_tolerance:g}"]
    if not loss_ok and float32_gaps:  # no further from float32 than eager is: the gap to eager is eager's drift
        own, eager = float32_gaps.get(arm, math.inf), float32_gaps.get(REFERENCE_ARM, math.inf)
        loss_ok = math.isfinite(own) and math.isfinite(eager) and own <= eager + loss_tolerance
        reasons = [f"max loss gap {gap:.2g} to eager, but {own:.2g} to float32 against eager's {eager:.2g}"
                   if loss_ok else f"{reasons[0]}, and {own:.2g} to float32 against eager's {eager:.2g}"]
    if grads_ok is False:
        reasons.append(f"gradients: {check.reason}" if check is not None else "gradients were not taken")
    if not reasons:
        reasons.append("within tolerance" + (f" (gradients: {check.reason})" if check is not None else ""))
    return ArmVerdict(arm, ratio, gap, loss_ok, grads_ok, "; ".join(reasons))
