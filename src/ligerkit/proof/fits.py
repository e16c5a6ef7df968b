"""What counts as "does not fit": the allocator's out-of-memory error, or the footprint check's refusal.

A run that does not fit is a result (the bench and the context sweep record it), never a crash; a run
that fails for any other reason is a bug, and stays an error.
"""

from __future__ import annotations

from ligerkit.errors import LigerKitError

OUT_OF_MEMORY_MARKS = ("out of memory", "outofmemoryerror")
"""Lower-case text whose presence in a failed run's error output means the allocator ran out."""

REFUSED_MARKS = ("this config needs at least",)
"""Lower-case text of the footprint check's refusal (``ligerkit.train.recipe.footprint``): too big before any
allocation."""


def does_not_fit(error_text: str) -> str | None:
    """Why a failed run did not fit (``"out of memory"``, ``"refused by the footprint check"``), or
    ``None`` when it failed for another reason (a bug, which a sweep must not record as a size)."""
    low = error_text.lower()
    if any(mark in low for mark in OUT_OF_MEMORY_MARKS):
        return "out of memory"
    if any(mark in low for mark in REFUSED_MARKS):
        return "refused by the footprint check"
    return None


def out_of_memory_error(exc: BaseException) -> BaseException | None:
    """``exc`` or the error it wraps (``__cause__`` / ``__context__``, as torch.compile re-raises) when
    it is a CUDA out-of-memory error, else ``None``."""
    import torch

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, torch.OutOfMemoryError) or "CUDA out of memory" in str(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def unfit_reason(arm: str, round_: int, exc: Exception, reference: str = "eager") -> str:
    """Why a bench arm's run did not fit in round ``round_`` (0-based): a result. Any other failure is
    re-raised; so is the reference arm not fitting, as a :class:`LigerKitError` saying what to change
    (every ratio is against it)."""
    why = does_not_fit(str(exc))
    if why is None:
        raise exc
    if arm == reference:
        raise LigerKitError(f"{reference}, which every ratio is against, does not fit ({why}); every arm must train "
                            "the same way, so set train.activation_checkpointing=true (or a shorter data.seq_len or a "
                            "smaller train.micro_batch_size) for all of them with --set") from exc
    return f"{why} (round {round_ + 1})"
