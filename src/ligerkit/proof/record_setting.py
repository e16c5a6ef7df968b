"""The setting a record's measurements were taken in, and whether another run's is the same.

A record that a sweep resumes across commands and sessions (``benchmarks/context_sweep_gpu.py``) is only
worth its ratios while every line in it was measured alike: on one card, one stack, one trained config,
one allocator configuration. :func:`sweep_setting` says what that is for this process;
:func:`setting_conflict` says how a record's settings differ from it, so that a run can refuse to add to
a record made elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ligerkit.environment import installed
from ligerkit.train.config.loading import load_recipe_config

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
"""The environment variable that configures PyTorch's CUDA allocator (expandable segments, ...): it
decides where a long sequence runs out of memory, so a record's trials share it."""


def sweep_setting(config: str | Path, extra: Sequence[str], steps: int, device: str, device_gib: float,
                  versions: dict[str, str | None] | None = None, alloc_conf: str | None = None) -> dict[str, Any]:
    """What every trial of one record shares, so that their lengths and times compare side by side.

    The config the trials train (``config`` with the user's ``extra`` ``--set`` lines, validated, as a
    digest: the same config reached by other lines or another path is the same), the steps a trial runs,
    the card (``device``, its name, and ``device_gib``, its memory), the versions of the stack
    (:func:`ligerkit.environment.installed` unless given) and the CUDA allocator's configuration
    (:data:`ALLOC_CONF` of this process's environment unless given). A config that does not load is the
    :class:`~ligerkit.errors.ConfigError` that says why.
    """
    trained = load_recipe_config(config, list(extra)).model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(trained, sort_keys=True, default=str).encode()).hexdigest()[:16]
    stack = installed() if versions is None else versions
    return {"config_sha256": digest, "steps": steps, "device": device, "device_gib": round(device_gib),
            **{name: stack.get(name) for name in ("torch", "transformers", "liger-kernel", "peft")},
            "alloc_conf": os.environ.get(ALLOC_CONF, "") if alloc_conf is None else alloc_conf}


def setting_conflict(settings: Sequence[dict[str, Any] | None], setting: dict[str, Any]) -> str | None:
    """``None`` when every recorded setting in ``settings`` (``None``: a trial from before records kept
    one, taken as it is) equals ``setting``; else what differs, key by key, as "KEY: THERE there, HERE
    here"."""
    for recorded in settings:
        if recorded is None or recorded == setting:
            continue
        keys = [*setting, *(key for key in recorded if key not in setting)]
        return "; ".join(f"{key}: {recorded.get(key)!r} there, {setting.get(key)!r} here"
                         for key in keys if recorded.get(key) != setting.get(key))
    return None


def recorded_settings(trials: Sequence[Any]) -> list[dict[str, Any]]:
    """The distinct settings ``trials`` (each with a ``setting``, as the context sweep's ``Trial``) were
    measured in (:func:`sweep_setting`), in the record's order; trials from before records kept one are
    left out."""
    found: list[dict[str, Any]] = []
    for trial in trials:
        if trial.setting is not None and trial.setting not in found:
            found.append(trial.setting)
    return found
