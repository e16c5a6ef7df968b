"""The kit's record of every binding it changed, with the original object, for exact revert."""

from __future__ import annotations

from dataclasses import dataclass

from ligerkit.errors import ConflictingPatchError, RevertError
from ligerkit.kit.report import Swap
from ligerkit.kit.snapshot import Change, current, owner_label, qualified_name, restore


@dataclass(frozen=True)
class Entry:
    """One change the kit made: where, what was there, what it put there."""

    owner: object
    attr: str
    original: object
    replacement: object
    swap: Swap


class Ledger:
    """Every change made through one kit, oldest first."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def active(self, owner: object, attr: str) -> Entry | None:
        """The newest entry for ``owner.attr``, if the kit patched it."""
        for entry in reversed(self.entries):
            if entry.owner is owner and entry.attr == attr:
                return entry
        return None

    def check_no_conflict(self, changes: list[Change]) -> None:
        """Raise if a change overwrote a binding this kit had already swapped to something else."""
        for change in changes:
            entry = self.active(change.owner, change.attr)
            if entry is not None and entry.replacement is not change.after:
                module, attr = owner_label(change.owner, change.attr)
                raise ConflictingPatchError(
                    f"{module}.{attr} was already patched by this kit with "
                    f"{qualified_name(entry.replacement)} (for {entry.swap.name!r}); a second apply "
                    f"would replace it with {qualified_name(change.after)}. Patch each symbol once: "
                    "drop one of the two entries, or revert() first."
                )

    def record(self, change: Change, name: str, scope: str) -> Swap:
        """Add a measured change and return its :class:`Swap` record."""
        module, attr = owner_label(change.owner, change.attr)
        swap = Swap(
            module=module,
            attr=attr,
            original=qualified_name(change.before),
            replacement=qualified_name(change.after),
            name=name,
            scope=scope,
        )
        self.entries.append(Entry(change.owner, change.attr, change.before, change.after, swap))
        return swap

    def originals(self) -> list[object]:
        """Every original object the kit replaced (those still swapped out)."""
        return [e.original for e in self.entries]

    def revert(self, keep: int = 0) -> None:
        """Restore originals by identity, newest first, down to the first ``keep`` entries.

        Raises :class:`RevertError` (after restoring everything it could) when some binding no
        longer holds the kit's replacement, i.e. other code patched it afterwards.
        """
        conflicts = []
        while len(self.entries) > keep:
            entry = self.entries.pop()
            now = current(entry.owner, entry.attr)
            if now is not entry.replacement:
                conflicts.append(f"{entry.swap.module}.{entry.swap.attr} (now {qualified_name(now)})")
                continue
            restore(entry.owner, entry.attr, entry.original)
        if conflicts:
            raise RevertError(
                "These bindings were changed by other code after the kit patched them and were left "
                f"as they are: {', '.join(conflicts)}. Revert that other patch first, then the kit."
            )
