"""``train.compile``: one key with named values selects compile mode.

- ``off``: no ``torch.compile``.
- ``ops``: ``torch.compile`` per decoder layer; with Liger on, Liger's kernels run as ligerkit's
  compile-mode operators (``ligerkit.compile``: opaque to the compiler, no graph breaks, exact).
- ``trace``: ``torch.compile`` traces into Liger's own autograd functions instead. On an H200 that
  overwrote norm weights next to Liger's MLP during backward (docs/benchmarks.md, "Compile over
  Liger"), so it is never a default: naming it is the opt-in. With Liger off there is nothing to trace
  into and it would run as ``ops``, so the config is refused (:data:`TRACE_NEEDS_LIGER`).

Run folders of earlier releases recorded it as booleans; ``ligerkit.train.config.recorded`` reads them.
"""

from __future__ import annotations

from typing import Any, Literal

CompileMode = Literal["off", "ops", "trace"]
COMPILED: tuple[str, ...] = ("ops", "trace")
"""The values that compile the decoder layers."""
TRACE_NEEDS_LIGER = (
    "train.compile: trace traces torch.compile into Liger's own functions, and Liger is off "
    "(model.liger_kernel.enabled: false), so it would run exactly as train.compile: ops; set train.compile: "
    "ops, or turn Liger on"
)


def compile_value(value: Any) -> Any:
    """``train.compile`` as written: YAML reads a bare ``off`` as false, which is the value ``off``;
    anything else unchanged (the schema judges it: ``true`` names no mode)."""
    return "off" if value is False else value
