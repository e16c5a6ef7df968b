"""Named training arms: the config lines that pick Liger's kernels, the loss path and torch.compile.

An arm is a set of ``--set`` override lines. ``ligerkit bench`` trains every arm it is given in its
own process and recommends one; a config selects one with ``train.arm: NAME``, which the config
loader (``ligerkit.train.config.loading``) expands into the arm's lines. The table lives here, in
the training layer, so the loader can read it; ``ligerkit.proof.bench`` re-exports it.
"""

from __future__ import annotations

REFERENCE_ARM = "eager"
"""The arm every other one is measured against (Liger off, standard loss, not compiled)."""

ARMS: dict[str, tuple[str, ...]] = {
    "eager": ("model.liger_kernel.enabled=false", "train.loss.path=standard", "train.compile=off"),
    "liger": ("model.liger_kernel.enabled=true", "train.loss.path=standard", "train.compile=off"),
    "liger_fused": ("model.liger_kernel.enabled=true", "train.loss.path=fused", "train.compile=off"),
    "compile": ("model.liger_kernel.enabled=false", "train.loss.path=standard", "train.compile=ops"),
    # Liger's swaps under torch.compile: with train.compile: ops the kernels run as ligerkit.compile
    # operators, so no opt-in line is needed
    "liger_compile": ("model.liger_kernel.enabled=true", "train.loss.path=standard", "train.compile=ops"),
    # torch.compile for the decoder layers, Liger's fused linear cross entropy for the part compile
    # cannot shrink (the full logits): the kernel swaps stay off
    "compile_fused": ("model.liger_kernel.enabled=false", "train.loss.path=fused", "train.compile=ops"),
    # everything at once: the swaps (as compile operators), the fused loss and torch.compile
    "liger_compile_fused": ("model.liger_kernel.enabled=true", "train.loss.path=fused", "train.compile=ops"),
}

DEFAULT_ARMS: tuple[str, ...] = ("eager", "liger", "liger_fused", "compile", "liger_compile", "compile_fused",
                                 "liger_compile_fused")
"""The arms ``ligerkit bench`` runs when ``--arms`` is not given (all of them)."""

DESCRIPTIONS: dict[str, str] = {
    "eager": "Liger off",
    "liger": "kernel swaps",
    "liger_fused": "swaps + fused loss",
    "compile": "torch.compile per decoder layer",
    "liger_compile": "swaps + compile",
    "compile_fused": "compile + fused loss, no swaps",
    "liger_compile_fused": "swaps + compile + fused loss",
}
"""A few words per arm, for help texts and reports."""


def is_compiled(arm: str) -> bool:
    """Whether the arm's decoder layers are compiled (``train.compile=ops`` or ``=trace`` among its lines)."""
    return any(line in ("train.compile=ops", "train.compile=trace") for line in arm_lines(arm))


def arm_lines(arm: str) -> tuple[str, ...]:
    """The arm's override lines (``KEY=VALUE``); an unknown name is a ``KeyError`` listing the arms."""
    try:
        return ARMS[arm]
    except KeyError:
        raise KeyError(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}") from None


def config_lines(arm: str) -> tuple[str, ...]:
    """The arm's lines as a config file writes them (``KEY: VALUE``, dotted keys)."""
    return tuple(": ".join(line.split("=", 1)) for line in arm_lines(arm))


def modules_line(keys: list[str] | tuple[str, ...], on: set[str] | frozenset[str]) -> str:
    """The override turning on exactly ``on`` among ``keys`` (``model.liger_kernel.modules={a: true, b: false}``):
    one swap alone, or a chosen few, for the measurements that take the swaps apart."""
    return "model.liger_kernel.modules={" + ", ".join(f"{k}: {str(k in on).lower()}" for k in keys) + "}"
