"""Every failure the kit can raise.

All errors derive from :class:`LigerKitError`, so a recipe can catch the whole family in one
``except``. Each subclass names one situation, and each message ends with what to do about it:
the kit never logs a problem and carries on. Every error class is defined here (a module that used to
define one re-exports it). ``YamlBoundError``, ``Unprobeable``, ``Uncacheable`` and ``Unrunnable`` are
internal signals, not errors: ligerkit catches each and turns it into a result or one of these errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path


class LigerKitError(Exception):
    """Base class of every error ligerkit raises on purpose."""


class StoppedEarly(LigerKitError):
    """A run stopped on purpose before its last step (a signal, a step limit) and can be resumed: the command
    line reports it as a stop, with its message (how to continue) and its own exit code, never as an error."""


class UnknownFamilyError(LigerKitError):
    """The family is not in Liger's registry (and no custom map was given). The message names
    ``ligerkit suggest`` (the tool for a family outside the registry) and, only where one is really
    close (a typo), the registry names it may have meant."""

    CLOSE = 0.8  # difflib ratio: 'qwen_3' -> qwen3, never 'diffllama' -> llama, mllama, llama4

    def __init__(self, family: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(family.lower(), known, n=3, cutoff=self.CLOSE)
        typo = f"Did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        super().__init__(
            f"{typo}For a model family outside Liger's registry, run `ligerkit suggest {_modeling_module(family)}` "
            f"(or the path of your own modeling file): it probes the module's norm, MLP and rotary symbols and "
            f"prints a matched custom_patches map to pass to kit.apply. Liger has no helper for model family "
            f"{family!r}; `ligerkit families` lists the {len(known)} families it has."
        )
        self.family = family
        self.close_matches = tuple(close)


def _modeling_module(family: str) -> str:
    """transformers' modeling module of ``family`` where it has one, else a placeholder to fill in."""
    import importlib.util

    name = family.replace("-", "_")
    dotted = f"transformers.models.{name}.modeling_{name}"
    try:
        return dotted if name.isidentifier() and importlib.util.find_spec(dotted) is not None else "MODELING_MODULE"
    except (ImportError, ValueError):
        return "MODELING_MODULE"


class FamilyResolutionError(LigerKitError):
    """The family could not be read from ``model_name_or_path``."""


class UnknownModuleError(LigerKitError):
    """A module name that no Liger helper knows (official route)."""

    def __init__(self, names: Iterable[str], known: Iterable[str]):
        names, known = sorted(names), sorted(known)
        hints = []
        for name in names:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        super().__init__(f"Unknown Liger module name(s): {', '.join(hints)}. Known names: {', '.join(known)}. "
                         "Fix the spelling in `modules`/`excluded_modules`; a name of your own only makes sense as "
                         "a custom_patches key.")


class UnsupportedModuleError(LigerKitError):
    """A module was enabled that the family's helper does not accept."""

    def __init__(self, family: str, names: Iterable[str], accepted: Iterable[str]):
        super().__init__(f"Liger's helper for {family!r} does not accept {', '.join(sorted(names))} "
                         f"(it accepts: {', '.join(sorted(accepted))}). Remove them from `modules`, or patch that "
                         "component yourself with custom_patches in a second apply() call.")


class ModuleConflictError(LigerKitError):
    """A module is both enabled and excluded."""

    def __init__(self, names: Iterable[str]):
        super().__init__(f"Module(s) {', '.join(sorted(names))} are both enabled and listed in excluded_modules; the "
                         "kit will not pick one for you. Either remove them from `modules`/custom_patches, or pass an "
                         "excluded_modules that leaves them out (loss kernels change how the loss is normalized: use "
                         "train.loss.path: fused, the fused loss).")


class LossKernelConflictError(LigerKitError):
    """cross_entropy and fused_linear_cross_entropy are both on (Liger refuses that combination)."""

    def __init__(self) -> None:
        super().__init__("cross_entropy and fused_linear_cross_entropy cannot both be on: Liger's helpers refuse it. "
                         "Turn one of them off in `modules`.")


class NoEffectError(LigerKitError):
    """An explicitly enabled module produced no swap."""

    def __init__(self, family: str, names: Iterable[str], route: str = "official"):
        names = ", ".join(sorted(names))
        if route == "official":
            text = (
                f"Liger's helper for {family!r} accepted {names} but swapped nothing for it, so "
                "enabling it would do nothing. Remove it from `modules` (or set it to false). If it "
                "was patched earlier by other code, revert that first."
            )
        else:
            text = (
                f"custom_patches {names} for {family!r}: setting the symbol did not change what the "
                "module binds (a property or a module-level __getattr__?). Point the LigerPatch at the "
                "module that really defines the symbol."
            )
        super().__init__(text)


class PatchImportError(LigerKitError):
    """A custom patch names a module that does not import."""


class MissingSymbolError(LigerKitError):
    """A custom patch names a symbol its module does not define."""


class KindMismatchError(LigerKitError):
    """A replacement is not of the same kind as the original (class for class, function for function)."""


class ConflictingPatchError(LigerKitError):
    """A symbol already patched by this kit would get a different replacement."""


class InvalidPatchError(LigerKitError):
    """A custom_patches map or a LigerPatch is malformed."""


class LateApplyError(LigerKitError):
    """The built model still contains instances of classes the kit replaced."""


class HubKernelsError(LigerKitError):
    """transformers' hub kernels (``use_kernels``) are on for a model the kit scans: outside its proof."""


class RevertError(LigerKitError):
    """A patched symbol was changed by someone else since the kit patched it."""


class ModelBuildError(LigerKitError):
    """`plan` could not build the family's model."""


class HelperFailedError(LigerKitError):
    """Liger's own family helper raised (often a transformers version it does not support)."""


class MissingExtraError(LigerKitError):
    """A config key needs an optional dependency that is not installed: ``extra`` names the package extra
    that brings it (``pip install -e '.[lora]'``), ``key`` the config key that needs it."""

    def __init__(self, message: str, extra: str, key: str):
        super().__init__(message)
        self.extra, self.key = extra, key


class InvalidOptionError(LigerKitError):
    """An option value is malformed (a ``modules`` value, a command-line option)."""


class ProbeMismatchError(LigerKitError):
    """A custom patch's replacement does not compute what the source symbol computes."""


class ReplacementMismatchError(ProbeMismatchError):
    """A custom patch's replacement computes what the source computes on the probe's inputs, but not on
    a call the model itself makes (another layout, an argument it passes, an attribute of the instance):
    the message names the call site and what differs."""


class InPlaceBackwardError(LigerKitError):
    """A replacement writes in place into a tensor another consumer in the model shares (Liger's default RMSNorm
    writes the input's gradient into the incoming one, the residual's too where the norm's output is added straight
    to it); the message names the out-of-place replacement with the same math, or says to leave the module off."""


class UnreachableSwapError(LigerKitError):
    """A swap cannot reach every use of the original (a table or alias filled at import holds it)."""


class UncataloguedReplacementError(LigerKitError):
    """A custom patch's replacement is not in ligerkit's catalog, so its math cannot be probed."""


class ForeignPatchError(LigerKitError):
    """Something outside the kit changed what the kit scanned (found at the model's first forward)."""


class RevertedKitError(LigerKitError):
    """A model built under a kit is used after that kit was reverted (a mix of Liger and originals)."""


class LigerNeedsAcceleratorError(LigerKitError):
    """Liger is enabled but its kernels cannot run here (no CUDA GPU or NPU, or a CPU device): a recipe
    with ``model.liger_kernel.enabled``, a CPU forward that reaches a Liger kernel, ``smoke``/``bench``."""


class TrainerConflictError(LigerKitError):
    """A trainer is set to apply Liger (or its own loss) over a model the kit already patched."""


class CompileModeError(LigerKitError):
    """Compile mode (``apply(..., compile=True)``) cannot route this Liger's kernels to ligerkit's
    operators (a name it rebinds is missing from the installed liger-kernel)."""


class SuggestError(LigerKitError):
    """The module or config for ``suggest`` cannot be loaded."""


class FusedLossRefusedError(LigerKitError):
    """The model transforms its logits in a way the fused loss cannot reproduce exactly."""


class ConfigError(LigerKitError):
    """A recipe config is invalid (unknown key, wrong type, inconsistent values, a missing file).
    ``problems`` holds each problem on its own (one, or every one a check found at once)."""

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message)
        self.problems = list(problems) or [message]


class RecipeError(LigerKitError):
    """A recipe folder is missing something or its engine cannot be loaded."""


class DataError(LigerKitError):
    """A dataset file or tokenizer cannot be used (missing, not text, no documents, wrong field)."""


class TokenizerError(DataError):
    """A tokenizer folder that holds no tokenizer (the message names the files it lacks), or one making no tokens."""


class StorageError(LigerKitError):
    """A write failed for want of room or permission (disk full, quota, read-only, no access); the message says what
    to free or where to write instead. ``__cause__`` is the ``OSError`` (its ``errno`` and ``filename``)."""


class TrainingStopped(StoppedEarly):
    """The run stopped before its last step (a signal, ``train.run.stop_after_steps``); it can be resumed."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class NonFiniteError(LigerKitError):
    """A loss or gradient norm was NaN or infinite; the run stopped before updating the weights."""


class RunDirError(LigerKitError):
    """A run folder cannot be used as asked (it holds another run, or is not a run to resume)."""


class ResumeConfigError(RunDirError):
    """``--resume`` with a config that would train another run than the one in the folder."""


class CheckpointError(LigerKitError):
    """No usable checkpoint where one was expected, or a checkpoint that cannot be read."""

    def __init__(self, message: str, file: Path | None = None):
        super().__init__(message)
        self.file = file


class CheckpointFileError(CheckpointError):
    """One file of a checkpoint is damaged, missing, or not plain data (a pickle that asks for code)."""

    def __init__(self, file: Path, reason: str):
        super().__init__(f"{file}: {reason}", file)
        self.file: Path = file
        self.reason = reason


class ArmFailedError(LigerKitError):
    """One arm's training process failed (``smoke``, ``bench``)."""


class PlotError(LigerKitError):
    """A result lacks what its plot draws."""
