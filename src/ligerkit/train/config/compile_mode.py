"""``train.compile``: one key with named values selects compile mode (the earlier booleans still read).

- ``off``: no ``torch.compile``.
- ``ops``: ``torch.compile`` per decoder layer; with Liger on, Liger's kernels run as ligerkit's
  compile-mode operators (``ligerkit.compile``: opaque to the compiler, no graph breaks, exact).
- ``trace``: ``torch.compile`` traces into Liger's own autograd functions instead. On an H200 that
  overwrote norm weights next to Liger's MLP during backward (docs/benchmarks.md, "Compile over
  Liger"), so it is never a default: naming it is the opt-in. With Liger off there is nothing to trace
  into and it would run as ``ops``, so the config is refused (:data:`TRACE_NEEDS_LIGER`).

Earlier configs, and the ``config.yaml`` of earlier run folders, say it with three booleans:
``train.compile: true | false``, ``train.liger_compile_ops`` (default true) and
``train.compile_over_liger_kernels`` (default false). :func:`map_old_keys` reads them into the named
value, so such a config loads, and an earlier run folder resumes, as before.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

CompileMode = Literal["off", "ops", "trace"]
COMPILED: tuple[str, ...] = ("ops", "trace")
"""The values that compile the decoder layers."""
OLD_KEYS = ("liger_compile_ops", "compile_over_liger_kernels")
TRACE_NEEDS_LIGER = (
    "train.compile: trace traces torch.compile into Liger's own functions, and Liger is off "
    "(model.liger_kernel.enabled: false), so it would run exactly as train.compile: ops; set train.compile: "
    "ops, or turn Liger on"
)

_REFUSED = (
    "train.compile with Liger on and train.liger_compile_ops=false lets torch.compile trace into Liger's "
    "autograd functions, which on an H200 overwrote norm weights next to Liger's MLP during backward "
    "(docs/benchmarks.md, compile drift). Use train.compile: ops (Liger's kernels as compile-mode operators, "
    "what train.liger_compile_ops=true said), or train.compile: trace to accept that path (what "
    "train.compile_over_liger_kernels=true said); set only train.compile"
)


def compile_value(value: Any) -> Any:
    """``train.compile``'s named value for an earlier boolean (``true`` -> ``ops``, ``false`` -> ``off``);
    anything else unchanged (the schema judges it)."""
    if isinstance(value, bool):
        return "ops" if value else "off"
    return value


def _flag(train: dict[str, Any], key: str) -> bool | None:
    value = train.pop(key, None)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"train.{key} (an earlier key, now a value of train.compile) must be true or false, "
                         f"got {value!r}")
    return value


def _liger_enabled(data: dict[str, Any]) -> Any:
    """A raw config's ``model.liger_kernel.enabled`` as written (``None`` where it is not given)."""
    model = data.get("model")
    liger = model.get("liger_kernel") if isinstance(model, dict) else None
    return liger.get("enabled") if isinstance(liger, dict) else None


def map_old_keys(data: Any) -> Any:
    """A raw recipe config with ``train.compile``'s booleans (and the two keys beside it) read into
    the named value (a copy; ``data`` itself when there is nothing to map)."""
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or not (isinstance(train.get("compile"), bool) or set(OLD_KEYS) & set(train)):
        return data
    data = copy.deepcopy(data)
    train = data["train"]
    value = compile_value(train.get("compile", "off"))
    ops, over = _flag(train, "liger_compile_ops"), _flag(train, "compile_over_liger_kernels")
    if value == "ops" and ops is False:  # the earlier way to compile over Liger's own functions
        enabled = _liger_enabled(data)
        if over is not True and enabled is True:
            raise ValueError(_REFUSED)
        value = "ops" if enabled is not True else "trace"  # with Liger off there is nothing to trace into
    elif value == "trace" and ops is True:
        raise ValueError("train.compile: trace and train.liger_compile_ops=true disagree; set only train.compile")
    train["compile"] = value
    return data


def recorded_trace_as_ops(data: Any) -> Any:
    """A run folder's recorded config with ``train.compile: trace`` and Liger off read as ``ops`` (a copy),
    which it ran exactly as: such folders were written before :data:`TRACE_NEEDS_LIGER` refused that
    pair, and still resume. ``data`` itself when there is nothing to read."""
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or train.get("compile") != "trace" or _liger_enabled(data) is True:
        return data
    data = copy.deepcopy(data)
    data["train"]["compile"] = "ops"
    return data


def same_value(path: list[str], given: Any, wanted: Any) -> bool:
    """Whether a config's value at ``path`` is what an arm's line sets (``train.compile``: earlier booleans
    compare as their named values)."""
    if path == ["train", "compile"]:
        return compile_value(given) == compile_value(wanted)
    return bool(given == wanted)
