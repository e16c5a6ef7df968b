"""The form a model trains in, for the in-place checks: adapters, recomputed layers.

The in-place check (:mod:`ligerkit.probe.aliasing`) asks whether another consumer shares what a
replacement writes. That depends on the model *as it trains*: LoRA adds a consumer beside every
adapted linear layer (the adapter reads the same input), and activation checkpointing runs each layer's
forward a second time inside the backward. So when the trainer sets a model up with either, it runs the
kit's apply inside :func:`checked_in_form`, and every in-place check of that apply changes its whole
model the same way (:attr:`TrainingForm.adapt`) before comparing gradients. The form's ``key`` is part
of the verdict cache's key and of the verdict's reason, so a verdict says the form it was found in and
is never reused for another.

The probe layer knows nothing of LoRA: the trainer passes the steps (``ligerkit.train.recipe.setup``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class TrainingForm:
    """How the trainer changes a built model before it trains, as steps the in-place checks repeat.

    ``key`` says what the form is, in words that change whenever the steps would (e.g. ``"LoRA r=16
    alpha=32 dropout=0 on all-linear; activation checkpointing per layer"``); ``adapt`` applies the steps, in
    place, to a model of the same module the check built.
    """

    key: str
    adapt: Callable[[nn.Module], None]


_FORM: ContextVar[TrainingForm | None] = ContextVar("ligerkit_training_form", default=None)


@contextmanager
def checked_in_form(form: TrainingForm | None) -> Iterator[None]:
    """In the block, every in-place check runs its whole model in ``form`` (``None``: as built)."""
    token = _FORM.set(form)
    try:
        yield
    finally:
        _FORM.reset(token)


def current_form() -> TrainingForm | None:
    """The form set by the innermost :func:`checked_in_form`, or ``None``."""
    return _FORM.get()


def form_note() -> str | None:
    """The line an ``apply`` report notes when its in-place checks ran in a training form, else ``None``."""
    form = current_form()
    return None if form is None else f"in-place writes checked in the whole model as it trains: {form.key}"
