"""What counts as "does not fit": the allocator's out-of-memory error, or the footprint check's refusal.

A run that does not fit is a result (the bench and the context sweep record it), never a crash; a run
that fails for any other reason is a bug, and stays an error.
"""

from __future__ import annotations

import re

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


_SIZE = r"([0-9.]+) (bytes|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "TiB": 2**10}
_ALLOCATOR_FIELDS = {
    "tried_gib": r"Tried to allocate " + _SIZE,
    "capacity_gib": r"has a total capacity of " + _SIZE,
    "free_gib": r" of which " + _SIZE + r" is free",
    "in_use_gib": r"this process has " + _SIZE + r" memory in use",
    "allocated_gib": r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch",
    "reserved_unallocated_gib": r"and " + _SIZE + r" is reserved by PyTorch but unallocated",
}


def allocator_state(error_text: str) -> dict[str, float] | None:
    """What PyTorch's caching allocator said when it ran out, in GiB, read from its out-of-memory message
    (the last one in ``error_text``): the request it could not meet (``tried_gib``), the card's capacity and
    free memory, this process's use, what live tensors held (``allocated_gib``) and what it had reserved
    without handing out (``reserved_unallocated_gib``: fragmentation when large). Only the fields the message
    gives; ``None`` when it gives none (another failure, or the footprint check's refusal)."""
    start = error_text.rfind("Tried to allocate")
    if start < 0:
        return None
    text = " ".join(error_text[start:].split())
    found = {}
    for field, pattern in _ALLOCATOR_FIELDS.items():
        match = re.search(pattern, text)
        if match:
            found[field] = float(match.group(1)) * _UNITS[match.group(2)]
    return found or None


def describe_allocator(state: dict[str, float] | None) -> str:
    """``state`` (:func:`allocator_state`) in words, or ``""`` without one."""
    if not state:
        return ""
    words = []
    if "tried_gib" in state:
        words.append(f"asked for {state['tried_gib']:.2f} GiB" + (
            f" with {state['free_gib']:.2f} GiB free" if "free_gib" in state else ""))
    if "allocated_gib" in state:
        words.append(f"{state['allocated_gib']:.1f} GiB held by tensors")
    if "reserved_unallocated_gib" in state:
        words.append(f"{state['reserved_unallocated_gib']:.2f} GiB reserved but not handed out")
    return "; ".join(words)


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
    """Why a bench arm's run did not fit in round ``round_`` (0-based), with the allocator's account when it
    ran out of memory (:func:`describe_allocator`): a result. Any other failure is re-raised; so is the
    reference arm not fitting, as a :class:`LigerKitError` saying what to change (every ratio is against it)."""
    why = does_not_fit(str(exc))
    if why is None:
        raise exc
    if arm == reference:
        raise LigerKitError(f"{reference}, which every ratio is against, does not fit ({why}); every arm must train "
                            "the same way, so set train.activation_checkpointing=true (or a shorter data.seq_len or a "
                            "smaller train.micro_batch_size) for all of them with --set") from exc
    said = describe_allocator(allocator_state(str(exc)))
    return f"{why} (round {round_ + 1}{'; ' + said if said else ''})"
