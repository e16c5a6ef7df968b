"""The kit's record of every binding it changed, with the original object, for exact revert.

Several kits may patch one binding (two recipes in one process, a test beside a recipe). Every
change is therefore also a *layer* on a process-wide stack per binding: reverting a kit removes
its layers wherever they sit. A layer on top puts its original back; a layer under another one
hands its original to the layer above, so the binding itself stays as the newer kit left it. Any
order of reverts ends with the true original bound.

Interrupts (``KeyboardInterrupt`` included) cannot split a swap from its record: an entry is written
*before* its binding changes (:meth:`Ledger.rebind`), and a revert takes an entry off the ledger only
*after* its binding is back, so whatever point an interrupt hits, the entries still on the ledger
cover every binding still changed, and calling ``revert()`` again finishes the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ligerkit.errors import ConflictingPatchError, RevertError
from ligerkit.kit.report import Swap
from ligerkit.kit.snapshot import Change, current, owner_label, restore
from ligerkit.naming import qualified_name


@dataclass(eq=False)
class Entry:
    """One change the kit made: where, what was there, what it put there.

    ``original`` is what a revert puts back; it moves down when an older kit's layer under this one
    is reverted first. ``source`` is what the swap replaced as the model sees it (the scan looks for
    leftovers of it); it differs from ``original`` only for a swap shared with another kit.
    """

    owner: object
    attr: object
    original: object
    replacement: object
    swap: Swap = field(compare=False)
    source: object = None
    helper: str | None = None  # the Liger helper that made it (official route), else None

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = self.original

    @property
    def key(self) -> tuple[int, object]:
        """The binding this entry changed."""
        return id(self.owner), self.attr


# Every live entry of every kit, per binding, oldest at the bottom.
_LAYERS: dict[tuple[int, object], list[Entry]] = {}


def layers(owner: object, attr: object) -> list[Entry]:
    """The live entries of every kit on ``owner.attr``, oldest first (a copy)."""
    return list(_LAYERS.get((id(owner), attr), ()))


def live_layers() -> list[Entry]:
    """Every live entry of every kit in the process."""
    return [e for stack in _LAYERS.values() for e in stack]


class Ledger:
    """Every change made through one kit, oldest first."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def active(self, owner: object, attr: object) -> Entry | None:
        """The newest entry for ``owner.attr``, if the kit patched it."""
        for entry in reversed(self.entries):
            if entry.owner is owner and entry.attr == attr:
                return entry
        return None

    def made_elsewhere(self, owner: object, attr: object, replacement: object) -> Entry | None:
        """The newest live entry of *another* kit that swapped ``owner.attr`` to ``replacement``
        (a swap this kit can hold too, with :meth:`join`), if any."""
        mine = {id(e) for e in self.entries}
        return next((e for e in reversed(layers(owner, attr)) if id(e) not in mine and e.replacement is replacement), None)

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

    def rebind(self, change: Change, name: str, scope: str, helper: str | None = None) -> Swap:
        """Make ``change`` (its owner holds ``change.before`` now) as one step with its record.

        The entry is written first: an interrupt before the binding changes leaves an entry whose
        binding still holds its original, which a revert simply drops.
        """
        swap = self.record(change, name, scope, helper)
        restore(change.owner, change.attr, change.after)
        return swap

    def record(self, change: Change, name: str, scope: str, helper: str | None = None) -> Swap:
        """Add a change (made by ``helper``, if a Liger helper; made already, or next by the caller)
        and return its :class:`Swap`. A change made before its record is exposed to an interrupt in
        between: prefer :meth:`rebind`, or undo from a snapshot on ``BaseException``."""
        module, attr = owner_label(change.owner, change.attr)
        swap = Swap(
            module=module,
            attr=attr,
            original=qualified_name(change.before),
            replacement=qualified_name(change.after),
            name=name,
            scope=scope,
        )
        entry = Entry(change.owner, change.attr, change.before, change.after, swap, helper=helper)
        self.entries.append(entry)
        _LAYERS.setdefault(entry.key, []).append(entry)
        return swap

    def join(self, other: Entry, name: str) -> Swap:
        """Hold a swap another kit already made (the binding holds the replacement this kit wants).

        This kit's layer sits on top with the replacement as its own original, so whichever kit
        reverts last puts the true original back.
        """
        swap = replace(other.swap, name=name, shared=True)
        entry = Entry(other.owner, other.attr, other.replacement, other.replacement, swap, other.source, other.helper)
        self.entries.append(entry)
        _LAYERS.setdefault(entry.key, []).append(entry)
        return swap

    def originals(self) -> list[object]:
        """Every original object the kit replaced (those still swapped out)."""
        return [e.source for e in self.entries]

    def revert(self, keep: int = 0, done: list[Entry] | None = None) -> list[Entry]:
        """Remove this kit's layers, newest first, down to the first ``keep`` entries.

        Returns the entries reverted, also appended to ``done`` one by one (so a caller keeps them
        when an interrupt stops the loop). An entry leaves the ledger only once its layer is off, so
        an interrupted revert is finished by calling it again. Raises :class:`RevertError` (after
        reverting everything it could) when a binding holds neither this kit's replacement nor its
        original, i.e. code outside any kit patched it afterwards; those entries stay, so a later
        ``revert`` finishes the job once that other patch is undone.
        """
        done = [] if done is None else done
        start = len(done)
        conflicts: list[str] = []
        for index in range(len(self.entries) - 1, keep - 1, -1):
            entry = self.entries[index]
            if _remove_layer(entry):
                done.append(entry)
                del self.entries[index]
            else:
                now = current(entry.owner, entry.attr)
                conflicts.append(f"{entry.swap.module}.{entry.swap.attr} (now {qualified_name(now)})")
        if conflicts:
            raise RevertError(
                "These bindings were changed by other code after the kit patched them and were left "
                f"as they are: {', '.join(conflicts)}. Undo that other patch, then call revert() again."
            )
        return done[start:]


def _remove_layer(entry: Entry) -> bool:
    """Take ``entry``'s layer off its binding; ``False`` when foreign code holds the binding.

    Safe to repeat after an interrupt at any line: a layer already off (or never on, for an entry
    recorded just before its stack) is done, and a binding already back at the original is left.
    """
    stack = _LAYERS.get(entry.key)
    index = next((i for i, e in enumerate(stack) if e is entry), None) if stack else None
    if index is not None:
        if index < len(stack) - 1:  # a newer kit's layer sits on top: hand it our original
            stack[index + 1].original = entry.original
        else:
            now = current(entry.owner, entry.attr)
            if now is entry.replacement:
                restore(entry.owner, entry.attr, entry.original)
            elif now is not entry.original:  # neither ours nor the original: someone else's patch
                return False
        del stack[index]
    if stack is not None and not stack:
        _LAYERS.pop(entry.key, None)
    return True
