"""Each step's micro-batches, the next step's made and queued to the device while the current step runs.

A training step ends with one read of its loss and gradient norm, a wait for the GPU (``update.py``).
Before that read the host has queued the whole step and sits idle; after it the GPU sits idle while
the host makes the next step's batches, pins them and queues their copies. :class:`StagedData` moves
that work into the wait: the trainer calls :meth:`StagedData.stage` for step ``n + 1`` after queueing
step ``n``'s update and before reading it, and step ``n + 1`` then starts with its batches already
on the device, behind step ``n``'s update on the same stream.

The data of a step is a function of the step alone (``Trainer.micro_batches``), so staging changes
when a batch is made, never which batch a step trains on. A failure while staging leaves nothing
staged and is not raised there: the step that needs the batches makes them itself and raises it, at
the step it belongs to, with the state the trainer keeps for a failing step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ligerkit.loss import valid_tokens
from ligerkit.train.recipe.engine import Batch
from ligerkit.train.step import device_batch


@dataclass(frozen=True)
class StepBatches:
    """One step's micro-batches: as made (on the host), and as the model gets them (on the device)."""

    step: int
    host: list[Batch]
    on_device: list[Batch]
    tokens: int
    """Valid (counted) tokens of the step's labels on this rank, counted on the host."""


class StagedData:
    """Gives each step its micro-batches, moved to ``device``; :meth:`stage` prepares one step ahead.

    Args:
        data: global step -> this rank's micro-batches on the host (deterministic in the step).
        device: where the model runs.
        drop_mask: ``train.drop_right_padding_mask`` (checked and applied as the batches move).
        steps: the run's last step + 1; nothing past it is staged.
    """

    def __init__(self, data: Callable[[int], list[Batch]], device: torch.device, drop_mask: bool, steps: int):
        self._data = data
        self._device = device
        self._drop_mask = drop_mask
        self._steps = steps
        self._staged: StepBatches | None = None

    def host(self, step: int) -> list[Batch]:
        """Step ``step``'s micro-batches on the host: the staged ones, or made now."""
        staged = self._staged
        return staged.host if staged is not None and staged.step == step else self._data(step)

    def take(self, step: int, host: list[Batch]) -> StepBatches:
        """Step ``step``'s batches on the device: the staged ones when they were staged from ``host``
        (the list :meth:`host` returned), else ``host`` moved now. Clears what was staged."""
        staged, self._staged = self._staged, None
        if staged is not None and staged.step == step and staged.host is host:
            return staged
        return self._move(step, host)

    def stage(self, step: int) -> None:
        """Make step ``step``'s batches and queue their copies to the device, without waiting for it
        (nothing at or past the run's last step). A failure stages nothing (the step raises it)."""
        self._staged = None
        if step >= self._steps:
            return
        try:
            self._staged = self._move(step, self._data(step))
        except Exception:  # noqa: BLE001 - raised again, where it belongs, by the step that makes them
            self._staged = None

    @property
    def staged_step(self) -> int | None:
        """The step whose batches are staged (``None`` when none is)."""
        return self._staged.step if self._staged is not None else None

    def _move(self, step: int, host: list[Batch]) -> StepBatches:
        tokens = sum(valid_tokens(b["labels"]) for b in host)  # on the host, before the batches move
        moved = [device_batch(b, self._device, self._drop_mask) for b in host]
        return StepBatches(step=step, host=host, on_device=moved, tokens=int(tokens))
