"""``torch.compile`` per decoder layer: the one place the trainer and the proofs compile a model."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def compile_layers(model: nn.Module, units: Iterable[str], fullgraph: bool = False) -> list[str]:
    """Compile, in place, every submodule whose class name is in ``units`` (the FSDP units: decoder and
    encoder layers), or the whole model when none is found; returns the compiled module paths.

    ``fullgraph=True`` makes a graph break an error instead of a silent split (what the compile-mode
    Liger operators promise, :mod:`ligerkit.compile.ops`).

    A layer recomputed in backward (``train.activation_checkpointing``) is traced with its checkpoint, and
    Python side effects of its forward are not replayed in the recompute, as torchtitan's and
    Accelerate's per-block compile set it: transformers' attention under the ``kernels`` package (a
    dependency from transformers 5.25 on) sets and resets a context variable in every forward, which
    dynamo refuses inside a checkpoint otherwise; it changes nothing the recompute computes.
    """
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    names = set(units)
    compiled = [name for name, m in model.named_modules() if type(m).__name__ in names]
    for name in compiled:
        model.get_submodule(name).compile(fullgraph=fullgraph)
    if not compiled:
        model.compile(fullgraph=fullgraph)
        compiled = ["<model>"]
    return compiled


def reset_compiled() -> None:
    """Forget every compiled graph (between arms of one process, so no arm reuses another's code)."""
    torch._dynamo.reset()
