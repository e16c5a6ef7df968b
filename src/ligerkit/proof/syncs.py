"""Counting host-device synchronizations: where a training step makes the host wait for the GPU.

A synchronization (``.item()``, ``float(tensor)``, ``.cpu()``, a size read from a tensor, a boolean
test of one) stops the host from queueing work ahead of the GPU, and under FSDP it stops the
prefetch of the next all-gather from overlapping compute. CUDA's sync debug mode
(``torch.cuda.set_sync_debug_mode("warn")``) turns each one into a warning raised in the Python frame
that caused it; :class:`SyncCounter` records those warnings, step by step, with the place in the
code each came from. Explicit ``torch.cuda.synchronize()`` calls (a timer's) are not counted by CUDA's
debug mode, and neither are collectives (its documented limits).

    with SyncCounter() as syncs:
        for batch in loader:
            train_step(batch)
            syncs.step()
    syncs.per_step, syncs.sources()
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

SYNC_MESSAGE = "called a synchronizing CUDA operation"


def _cuda_mode(mode: str) -> None:
    import torch

    torch.cuda.set_sync_debug_mode(mode)


class SyncCounter:
    """Counts the synchronizations CUDA's sync debug mode reports, per step, with their sources.

    Args:
        set_mode: sets the debug mode (``"warn"`` on entry, ``"default"`` on exit); CUDA's by default.
            Tests pass their own to drive the counter without a GPU.
    """

    def __init__(self, set_mode: Callable[[str], None] = _cuda_mode):
        self._set_mode = set_mode
        self._caught: warnings.catch_warnings[Any] | None = None
        self._records: list[warnings.WarningMessage] = []
        self._seen = 0
        self.per_step: list[int] = []
        self._sources: list[Counter[str]] = []

    def __enter__(self) -> SyncCounter:
        self._caught = warnings.catch_warnings(record=True)
        self._records = self._caught.__enter__()
        warnings.simplefilter("always")
        self._set_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._set_mode("default")
        finally:
            if self._caught is not None:
                self._caught.__exit__(*exc)
                self._caught = None

    def _new(self) -> list[warnings.WarningMessage]:
        fresh = self._records[self._seen:]
        self._seen = len(self._records)
        return [w for w in fresh if SYNC_MESSAGE in str(w.message)]

    def step(self) -> int:
        """Close the current step: the number of synchronizations since the previous call."""
        fresh = self._new()
        self.per_step.append(len(fresh))
        self._sources.append(Counter(f"{w.filename}:{w.lineno}" for w in fresh))
        return len(fresh)

    def discard(self) -> None:
        """Forget what happened since the last step (e.g. a warm-up that is not measured)."""
        self._new()

    def sources(self, skip: int = 0) -> dict[str, float]:
        """Synchronizations per step by ``file:line`` of the Python frame that made them, over every
        step after the first ``skip``, most frequent first."""
        steps = self._sources[skip:]
        total: Counter[str] = Counter()
        for counts in steps:
            total.update(counts)
        return {where: n / max(len(steps), 1) for where, n in total.most_common()}
