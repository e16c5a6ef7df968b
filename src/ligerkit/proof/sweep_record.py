"""Reading a context sweep's record: its trials, and the gradient checks and breakdowns kept beside them.

A sweep (``benchmarks/context_sweep_gpu.py``) resumes one record across commands: ``OUT`` (one trial a
line), ``OUT.grads.json`` (every step-1 gradient check run for it), ``OUT.breakdown.json`` (where each
arm's memory goes at its longest length) and ``OUT.part.json`` (trials in parts whose other steps wait for
a later command). Each reader here takes a file an earlier run of the sweep wrote,
or refuses it by name (:class:`LigerKitError`) before any trial runs: a file of something else is never
read as figures, and never added to.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ligerkit.errors import LigerKitError
from ligerkit.proof.context_sweep import Trial


_CHECK_FIELDS: dict[str, type | tuple[type, ...]] = {
    "arm": str, "reference": str, "passed": bool, "reason": str, "failures": list, "max_error": (int, float)}
"""Each arm's :class:`~ligerkit.proof.recommend.GradCheck` in a kept gradient check, as ``asdict`` wrote it."""


def read_trials(path: Path) -> list[Trial]:
    """The trials of the record at ``path``, in order (``[]`` when there is none yet); a line that is not a
    trial of this sweep is a :class:`LigerKitError` naming it."""
    trials = []
    for number, line in enumerate(path.read_text().splitlines() if path.exists() else [], 1):
        if not line.strip():
            continue
        try:
            trials.append(Trial(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise LigerKitError(f"{path}, line {number}, is not a trial of this sweep ({exc}); give --out a new "
                                "file, or the record an earlier run of this sweep wrote") from None
    return trials


def read_grad_checks(path: Path) -> list[dict[str, Any]]:
    """The gradient checks kept at ``path``, oldest first (``[]`` when there is none): each a JSON object with
    its ``seq_len``, ``reference`` and each arm's check (``arms``); a file of one check, as the sweep wrote
    before it kept them all, is one."""
    kept = _kept(path, "gradient checks", _checks,
                 {"seq_len": _a_length, "reference": lambda v: isinstance(v, str), "arms": _arm_checks})
    return _checks(kept) if kept else []


def read_breakdowns(path: Path) -> dict[str, dict[str, Any]]:
    """The memory breakdowns kept at ``path`` by arm (``{}`` when there is none), each with its ``seq_len``."""
    return _kept(path, "breakdowns", lambda kept: list(kept.values()), {"seq_len": _a_length})


def read_parts(path: Path) -> list[dict[str, Any]]:
    """The trials in parts whose first step is done and whose other steps wait (``--split``), kept at ``path``
    (``[]`` when there is none): each with its ``arm``, ``seq_len``, the ``run_dir`` holding step 1's
    checkpoint, that process's ``seconds``, the step's ``step_s`` and ``peak_mem_gib``, and its ``setting``."""
    kept = _kept(path, "trials in parts", lambda kept: kept.get("parts"), {
        "arm": lambda v: isinstance(v, str), "seq_len": _a_length, "run_dir": lambda v: isinstance(v, str),
        "seconds": _non_negative, "step_s": _non_negative, "setting": lambda v: v is None or isinstance(v, dict),
        "peak_mem_gib": lambda v: v is None or _non_negative(v)})
    return kept["parts"] if kept else []


def _non_negative(value: Any) -> bool:
    return type(value) in (int, float) and value >= 0


def _checks(kept: dict[str, Any]) -> Any:
    return kept.get("checks", [kept])


def _kept(path: Path, what: str, rows: Callable[[dict], Any], fields: dict[str, Callable[[Any], bool]]
          ) -> dict[str, Any]:
    """The JSON object at ``path`` (``{}`` when there is no file), whose ``rows`` are objects with ``fields``
    (each with a test of its value); anything else is a :class:`LigerKitError`."""
    if not path.exists():
        return {}
    try:
        kept = json.loads(path.read_text())
        found = rows(kept) if isinstance(kept, dict) else None
        if not isinstance(found, list) or not all(
                isinstance(row, dict) and all(key in row and ok(row[key]) for key, ok in fields.items())
                for row in found):
            raise ValueError(f"not a JSON object of entries with {', '.join(sorted(fields))}, each of its kind")
    except (ValueError, UnicodeDecodeError) as exc:
        raise LigerKitError(f"{path} is not the {what} an earlier run of this sweep wrote ({exc}); move it "
                            "aside, or give --out a new file") from None
    return kept


def _a_length(value: Any) -> bool:
    return type(value) is int and value > 0


def _arm_checks(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(check, dict) and all(isinstance(check.get(key), kind) for key, kind in _CHECK_FIELDS.items())
        for check in value.values())
