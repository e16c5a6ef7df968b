"""The guard ``scan`` leaves on a model: at its first forward, is it still what was scanned?

Between ``kit.scan(model)`` and the first training step, other code can change what the model
computes: Hugging Face Trainer with ``use_liger_kernel=True`` runs Liger's helper again on the model
inside ``train()`` (binding Liger's fused-linear-cross-entropy forward, the loss kernel the kit
keeps off); a second ``apply_liger_kernel_to_*`` call rebinds classes; someone reverts the kit while
the model lives. The guard is a forward pre-hook that checks once, at the first forward, then
removes itself. It refuses what changes the kit's swaps or turns Liger's kernels on behind its back
(:class:`ForeignPatchError`, :class:`RevertedKitError`) and transformers' hub kernels turned on after the
scan (:class:`HubKernelsError`), and records other wrappers (an accelerate
autocast wrapper, TRL's own LM head) in the scan instead. A forward that would reach one of Liger's
kernels with the model on the CPU is refused with :class:`LigerNeedsAcceleratorError` (Triton's own
error there says nothing about why); the check repeats until a forward passes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ligerkit.environment import NEEDS_ACCELERATOR
from ligerkit.errors import ForeignPatchError, LigerNeedsAcceleratorError, RevertedKitError
from ligerkit.kit.scan import ScanResult, refuse_hub_kernels
from ligerkit.kit.snapshot import Snapshot, current, owner_label
from ligerkit.naming import qualified_name

if TYPE_CHECKING:
    from ligerkit.kit.ledger import Entry, Ledger

_LOSS_FORWARD_HINT = (
    "Set use_liger_kernel=False (TrainingArguments, or TRL's config): the kit already applied Liger's kernels, "
    "and use_liger_kernel=True patches the model again inside train(), its loss forward included (the recipe "
    "owns its loss normalization; ligerkit.loss has a token-normalized fused loss if you want one)."
)
_HELPER_HINT = (
    "Remove the Liger helper call that ran after kit.scan() (apply_liger_kernel_to_*(model=...), "
    "use_liger_kernel=True in Trainer or TRL, _apply_liger_kernel_to_instance): the kit already applied what "
    "the recipe asked for."
)


def unwrapped(obj: object) -> Iterator[object]:
    """``obj`` and what it wraps: bound methods, partials and ``functools.wraps`` chains."""
    seen: set[int] = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        yield obj
        obj = (getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None)
               or getattr(obj, "func", None))


def defined_at(obj: object) -> str:
    """Where a callable's code really lives (``functools.wraps`` copies the wrapped one's name)."""
    func = getattr(obj, "__func__", obj)
    code = getattr(func, "__code__", None)
    if code is None:
        return qualified_name(obj)
    where = _short_path(code.co_filename)
    wrapped = getattr(func, "__wrapped__", None)
    return f"{code.co_qualname} ({where}:{code.co_firstlineno})" + (
        f", which wraps {qualified_name(wrapped)}" if wrapped is not None else "")


def _short_path(filename: str) -> str:
    """A source file as a reader finds it: inside site-packages, else relative to the working directory."""
    path = filename.replace("\\", "/")
    if "site-packages/" in path:
        return path.rsplit("site-packages/", 1)[1]
    here = os.getcwd().replace("\\", "/").rstrip("/") + "/"
    return path[len(here):] if path.startswith(here) else path


def is_liger(obj: object) -> bool:
    """Whether ``obj`` (or anything it wraps) is defined in liger_kernel."""
    for item in unwrapped(obj):
        module = getattr(item, "__module__", None) or ""
        if isinstance(module, str) and module.startswith("liger_kernel"):
            return True
    return False


def liger_instances(model: nn.Module) -> set[tuple[str, int]]:
    """``(path, id(class))`` of every submodule whose class is one of Liger's."""
    return {(path, id(type(m))) for path, m in model.named_modules() if type(m).__module__.startswith("liger_kernel")}


class FirstForwardGuard:
    """A forward pre-hook: the first forward checks the model against what ``scan`` saw."""

    def __init__(self, ledger: Ledger, entries: list[Entry], watched: Snapshot, model: nn.Module,
                 scan: ScanResult):
        self.ledger = ledger
        self.entries = list(entries)
        self.watched = watched
        self.scan = scan
        self.instances = liger_instances(model)
        self.handle: Any = None
        self.done = False

    def install(self, model: nn.Module) -> None:
        """Register on ``model``; the first forward runs :meth:`check`."""
        self.handle = model.register_forward_pre_hook(self)

    def remove(self) -> None:
        """Take the hook off the model."""
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    @torch.compiler.disable
    def __call__(self, model: nn.Module, args: Any) -> None:
        """The forward pre-hook: check once, then step aside."""
        if self.done:
            return
        self.check(model)
        self.done = True
        self.remove()

    def reverted(self) -> list[Entry]:
        """Scanned swaps this kit no longer holds."""
        live = {id(e) for e in self.ledger.entries}
        return [e for e in self.entries if id(e) not in live]

    def check(self, model: nn.Module) -> None:
        """Raise :class:`RevertedKitError`, :class:`HubKernelsError` or :class:`ForeignPatchError`; record
        other wrappers."""
        gone = self.reverted()
        if gone:
            raise reverted_error(gone)
        refuse_hub_kernels(model, "at its first forward")
        problems: list[str] = []
        for entry in self.entries:
            now = current(entry.owner, entry.attr)
            if now is not entry.replacement:
                module, attr = owner_label(entry.owner, entry.attr)
                problems.append(f"{module}.{attr}, swapped by the kit to {entry.swap.replacement}, now holds "
                                f"{qualified_name(now)}")
        hint = ""
        for change in self.watched.changes():
            if isinstance(change.attr, str) and change.attr.startswith("_"):
                continue  # transformers caches private class attributes while it builds models
            module, attr = owner_label(change.owner, change.attr)
            if is_liger(change.after):
                problems.append(f"{module}.{attr} was rebound to {qualified_name(change.after)}")
                hint = hint or _HELPER_HINT
            else:
                self._wrapper(f"{module}.{attr} rebound to {qualified_name(change.after)}")
        for path, module in model.named_modules():
            for attr, value in list(vars(module).items()):
                if attr.startswith("_") or not callable(value) or isinstance(value, nn.Module):
                    continue
                where = f"{path or 'model'}.{attr}"
                if is_liger(value):
                    problems.append(f"{where} is bound to {qualified_name(value)} on the instance")
                    hint = hint or (_LOSS_FORWARD_HINT if attr == "forward" and not path else _HELPER_HINT)
                elif attr == "forward":
                    self._wrapper(f"{where} wrapped by {defined_at(value)}")
        added = sorted(path or "model" for path, cls in liger_instances(model) - self.instances)
        if added:
            problems.append(f"Liger modules the kit did not build appeared at {', '.join(added[:5])}")
            hint = hint or _HELPER_HINT
        if problems:
            raise ForeignPatchError(  # the fix first: the details can be long
                (hint or "Undo that patch, or apply the kit again before building the model.")
                + " What changed between kit.scan() and the model's first forward: " + "; ".join(problems[:6])
                + (" ..." if len(problems) > 6 else "") + "."
            )
        self.check_device(model)

    def _wrapper(self, line: str) -> None:
        if line not in self.scan.wrappers:  # a refused forward checks again
            self.scan.wrappers.append(line)

    def check_device(self, model: nn.Module) -> None:
        """Refuse a forward on the CPU that would reach a Liger kernel this kit swapped in."""
        tensor = next(model.parameters(), None)
        if tensor is None:
            tensor = next(model.buffers(), None)
        if tensor is None or tensor.device.type != "cpu":
            return
        held = {type(m) for m in model.modules()}
        reached = sorted({e.swap.replacement for e in self.entries if is_liger(e.replacement)
                          and (not isinstance(e.replacement, type) or e.replacement in held)})
        if reached:
            raise LigerNeedsAcceleratorError(
                f"{NEEDS_ACCELERATOR}, and this model's forward runs on the CPU, where its Liger swaps "
                f"({', '.join(reached[:4])}{' ...' if len(reached) > 4 else ''}) would fail inside Triton. Move "
                "the model and its inputs to the GPU (model.to('cuda')); to run on the CPU, build the model without "
                "the kit (revert it first, or never apply it)."
            )


def reverted_error(gone: list[Entry]) -> RevertedKitError:
    """The error for a model whose kit no longer holds the swaps it was built with."""
    shown = ", ".join(f"{e.swap.module}.{e.swap.attr}" for e in gone[:5]) + (" ..." if len(gone) > 5 else "")
    return RevertedKitError(
        f"This model was built under a kit that has since been reverted ({shown} are back to the originals), "
        "so it mixes the Liger modules it was built with and original functions. Keep the kit applied for "
        "as long as the model trains (revert() when you are done, not before; leaving `with kit.applied()` "
        "reverts), or rebuild the model after applying again."
    )


class _Disabled:
    """What a guard becomes when a model is pickled: a hook that checks nothing."""

    def __call__(self, *args: Any) -> None:
        return None


def _disabled() -> _Disabled:
    return _Disabled()


FirstForwardGuard.__reduce__ = lambda self: (_disabled, ())  # type: ignore[method-assign,assignment]
FirstForwardGuard.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]
