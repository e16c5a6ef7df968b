"""The versions this release is tested with, and what this environment cannot prove.

:data:`TESTED` is the one list of the stacks the whole suite passed on. ``ligerkit --version`` and
``ligerkit env`` print it; the report's environment gaps, :func:`environment_summary` (which error
messages quote) and the once-per-process :class:`UntestedVersionsWarning` compare the installed
versions with it; ``.ci/run`` runs the suite on its newest and its oldest transformers
(:func:`ci_transformers`); and tests hold pyproject's ranges and the README's "Tested versions" to it.
A stack outside it is warned about, never refused.

Liger's kernels are Triton kernels for CUDA GPUs and Ascend NPUs. Patching and building models
works anywhere; numerics and speed can only be checked where the kernels run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import warnings
from dataclasses import dataclass

# The one sentence every refusal to run Liger here starts with (train, the API's first forward).
NEEDS_ACCELERATOR = "Liger's kernels need a CUDA GPU or an Ascend NPU"

PACKAGES = ("torch", "transformers", "liger-kernel", "peft", "trl")
"""The packages a tested stack names, in the order every listing shows them."""

CPU_CI = "CPU CI"


@dataclass(frozen=True)
class Stack:
    """One stack the whole suite passed on: where, each package's version (``None``: not recorded), and
    the Liger helpers known to fail on it, with why."""

    where: str
    versions: tuple[tuple[str, str | None], ...]
    failing_helpers: tuple[str, ...] = ()
    why: str = ""

    def version(self, package: str) -> str | None:
        """The tested version of ``package`` (``None`` when not recorded)."""
        return dict(self.versions)[package]

    def matches(self, installed: dict[str, str | None]) -> bool:
        """Whether every installed package of :data:`PACKAGES` is at this stack's version (a package not
        installed, or not recorded here, is not compared)."""
        return all(found is None or self.version(p) in (None, found) for p, found in installed.items())

    def line(self) -> str:
        """``CPU CI: torch 2.13.0, transformers 5.25.0, ...`` (and the helpers that fail there)."""
        text = f"{self.where}: " + ", ".join(f"{p} {v or '(not recorded)'}" for p, v in self.versions)
        if self.failing_helpers:
            text += f"; Liger's {', '.join(short(h) for h in self.failing_helpers)} helpers fail there ({self.why})"
        return text


def short(helper: str) -> str:
    """``apply_liger_kernel_to_qwen3_vl`` -> ``qwen3_vl``: a helper named by its family."""
    return helper.removeprefix("apply_liger_kernel_to_")


def _stack(where: str, torch: str, transformers: str, liger_kernel: str, peft: str | None, trl: str,
           failing_helpers: tuple[str, ...] = (), why: str = "") -> Stack:
    return Stack(where, tuple(zip(PACKAGES, (torch, transformers, liger_kernel, peft, trl))), failing_helpers, why)


VL_OUTPUTS_RENAMED = ("apply_liger_kernel_to_glm4v_moe", "apply_liger_kernel_to_qwen2_5_vl",
                      "apply_liger_kernel_to_qwen2_vl", "apply_liger_kernel_to_qwen3_vl")

# The stacks this release was tested on, newest transformers first: CPU CI runs the whole suite on the
# first two (.ci/run), the H200 device machine ran the GPU tests (tests/gpu) on the third with the
# image's own PEFT.
TESTED: tuple[Stack, ...] = (
    _stack(CPU_CI, "2.13.0", "5.25.0", "0.8.5", "0.21.2", "1.16.0", VL_OUTPUTS_RENAMED,
           "transformers 5.23 renamed the VL output classes liger-kernel 0.8.5 imports"),
    _stack(CPU_CI, "2.13.0", "5.22.2", "0.8.5", "0.21.2", "1.16.0"),
    _stack("H200 (CUDA 13)", "2.11.0", "5.22.2", "0.8.5", None, "1.16.0"),
)


class UntestedVersionsWarning(UserWarning):
    """The installed stack is none of :data:`TESTED` (ligerkit carries on: a warning, not a refusal)."""


def accelerator() -> str | None:
    """``cuda`` or ``npu`` when Liger's kernels can run here, else ``None``."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return None


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or ``None``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> dict[str, str | None]:
    """The installed version of each of :data:`PACKAGES` (a local build tag such as ``+cpu`` dropped); read
    once per process (every report asks, and reading package metadata takes milliseconds a package)."""
    return dict(_installed())


@functools.cache
def _installed() -> tuple[tuple[str, str | None], ...]:
    return tuple((p, v.split("+")[0] if (v := installed_version(p)) else None) for p in PACKAGES)


def tested_versions(package: str) -> tuple[str, ...]:
    """The versions of ``package`` in :data:`TESTED`, newest first, each once."""
    found = [v for stack in TESTED if (v := stack.version(package)) is not None]
    return tuple(sorted(set(found), key=_release, reverse=True))


def ci_transformers() -> tuple[str, str]:
    """The newest and the oldest transformers CPU CI runs the suite on (``.ci/run``)."""
    found = sorted({s.version("transformers") for s in TESTED if s.where == CPU_CI}, key=_release)
    return found[-1], found[0]


def _release(version: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in (version or "0").split(".") if part.isdigit())


def tested_stack(versions: dict[str, str | None] | None = None) -> Stack | None:
    """The first row of :data:`TESTED` the installed versions (or ``versions``) match, or ``None``."""
    versions = installed() if versions is None else versions
    return next((stack for stack in TESTED if stack.matches(versions)), None)


def untested(versions: dict[str, str | None] | None = None) -> str | None:
    """What is outside the tested stacks (``None`` when the installed versions match one of them):
    the packages at a version no stack has, else the combination."""
    versions = installed() if versions is None else versions
    if tested_stack(versions) is not None:
        return None
    outside = [f"{p} {v}" for p, v in versions.items() if v is not None and v not in tested_versions(p)]
    if outside:
        return f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside the tested versions"
    return "this combination (" + ", ".join(f"{p} {v}" for p, v in versions.items() if v) + ") is not a tested stack"


def tested_lines() -> list[str]:
    """Every tested stack, one line each (``ligerkit --version``, ``ligerkit env``, the messages)."""
    return [stack.line() for stack in TESTED]


def environment_gaps() -> tuple[str, ...]:
    """Every reason a report here cannot count as a full proof (the environment gaps)."""
    gaps = []
    if accelerator() is None:
        gaps.append(
            "no CUDA GPU or NPU here: swaps and the model scan were checked, Liger's numerics were not; "
            "run `ligerkit smoke RECIPE` (gradients per parameter and the loss curve, Liger off vs on) on a GPU machine"
        )
    outside = untested()
    if outside is not None:
        gaps.append(f"{outside}; `ligerkit env` lists the tested stacks")
    return tuple(gaps)


def environment_summary() -> str:
    """The installed versions and how they stand against the tested stacks, in one line (error messages
    quote it): the tested stack they are, with the Liger helpers known to fail there, or what is outside."""
    versions = installed()
    have = ", ".join(f"{p} {v}" for p, v in versions.items() if v)
    stack = tested_stack(versions)
    if stack is None:
        tested = "; ".join(f"{p} {', '.join(tested_versions(p))}" for p in PACKAGES)
        return f"{have}: {untested(versions)} (tested: {tested}); `ligerkit env` lists every tested stack"
    text = f"{have}: a tested stack ({stack.where})"
    if stack.failing_helpers:
        text += f", where Liger's {', '.join(map(short, stack.failing_helpers))} helpers fail: " + known_failure(
            stack.failing_helpers[0], stack)
    return text


def known_failure(helper: str, stack: Stack | None = None) -> str | None:
    """Why Liger's family helper ``helper`` (its name, dotted or not) is known to fail on the installed stack
    (or ``stack``), and where it works; ``None`` when :data:`TESTED` knows of no such failure."""
    stack = tested_stack() if stack is None else stack
    name = helper.rsplit(".", 1)[-1]
    if stack is None or name not in stack.failing_helpers:
        return None
    works = next((s for s in TESTED if name not in s.failing_helpers and s.where == stack.where), None)
    where = (f"; Liger's helpers work with transformers {works.version('transformers')} "
             f"(pip install transformers=={works.version('transformers')})") if works is not None else ""
    return f"{stack.why}{where}"


_warned = False


def warn_if_untested() -> None:
    """Warn once per process (:class:`UntestedVersionsWarning`) when the installed stack is none of
    :data:`TESTED`: called where ligerkit first applies kernels (``LigerKernelKit.apply``)."""
    global _warned
    if _warned:
        return
    _warned = True
    outside = untested()
    if outside is not None:
        warnings.warn(f"ligerkit is untested here: {outside}. It carries on; where it fails, install a tested "
                      f"stack (`ligerkit env` compares each version). Tested: {'; '.join(tested_lines())}",
                      UntestedVersionsWarning, stacklevel=3)
