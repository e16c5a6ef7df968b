"""Step-1 gradients of any number of recipe arms against one float32 truth, in one process.

``recipe_grad_parity`` compares two arms (Liger off and on); finding where compiling over Liger's
swaps changes training needs more: eager and compiled, every swap on, and each swap alone. Here an
arm is a set of config overrides plus whether its decoder layers are compiled. Every arm is set up as
the trainer does (``set_up_model``: the kit applied, the model built and scanned), loaded with the float32
truth's weights, cast to the training dtype, run once forward and backward on the recipe's first
sample, and then undone: the kit reverted and every compiled graph forgotten.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.utils import counters

from ligerkit.loss import valid_tokens
from ligerkit.probe.tolerance import relative_error
from ligerkit.proof.arm_runs import give_back_cuda_cache
from ligerkit.proof.grads import gradients
from ligerkit.train.recipe.adapters import perturb_zero_adapters
from ligerkit.compile.layers import compile_layers, reset_compiled
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.models import resolve_dtype
from ligerkit.train.recipe.engine import RecipeEngine
from ligerkit.train.memory.saved_recompute import recomputed
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.train.step import device_batch

LIGER_OFF = ("model.liger_kernel.enabled=false",)


@dataclass(frozen=True)
class Arm:
    """Config overrides on top of the recipe's, and whether the arm's layers are compiled."""

    overrides: tuple[str, ...] = ()
    compiled: bool = False
    fullgraph: bool = False


@dataclass
class ArmGrads:
    """One arm's loss and each parameter's relative gradient error against float32."""

    name: str
    loss: float
    errors: dict[str, float] = field(default_factory=dict)
    swaps: int = 0
    graph_breaks: int = 0
    losses: list[float] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # trainable, but no gradient in the float32 run

    @property
    def max_error(self) -> float:
        """The largest relative error of any parameter tensor (inf when one is not finite)."""
        return max(self.errors.values(), default=0.0)

    @property
    def mean_error(self) -> float:
        """The mean relative error over the parameter tensors."""
        return sum(self.errors.values()) / max(len(self.errors), 1)

    def worst(self, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` tensors with the largest error."""
        return sorted(self.errors.items(), key=lambda kv: -kv[1] if math.isfinite(kv[1]) else -math.inf)[:n]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the per-tensor errors included)."""
        return {"name": self.name, "loss": self.loss, "max_error": self.max_error, "mean_error": self.mean_error,
                "worst": self.worst(), "swaps": self.swaps, "graph_breaks": self.graph_breaks, "losses": self.losses,
                "changed": self.changed, "not_compared": self.not_compared, "errors": self.errors}


def recipe_arm_grads(config: str | Path, overrides: Sequence[str], arms: Mapping[str, Arm],
                     device: torch.device, calls: int = 1) -> dict[str, ArmGrads]:
    """Every arm of ``arms`` against the float32, Liger-off, uncompiled model of the same recipe.

    Each arm runs ``calls`` forward and backward passes in a row on the recipe's first micro-batches
    (no optimizer step between them, as with gradient accumulation); ``losses`` holds each call's
    loss, ``errors`` compare the last call's gradients, and ``changed`` names every parameter or
    buffer the calls changed (none may change: a kernel writing into one corrupts the next call).
    The result holds ``"float32"`` (its errors are zero by definition) and one entry per arm, in order.
    """
    truth_engine = load_engine(config, [*overrides, *LIGER_OFF, "model.dtype=float32"])
    dtype = resolve_dtype(load_engine(config, [*overrides, *LIGER_OFF]).config.model.dtype, device)
    model = set_up_model(truth_engine, device).float()
    perturb_zero_adapters(model)  # LoRA's B starts at zero: every A gradient would be zero
    # kept on the host: at 4B parameters a float32 copy on the GPU is 16 GiB the arms need
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    size = truth_engine.config.train.micro_batch_size
    losses32 = [gradients(model, recipe_loss(truth_engine, device, i * size))[0] for i in range(calls - 1)]
    reached: set[str] = set()
    loss32, truth = gradients(model, recipe_loss(truth_engine, device, (calls - 1) * size), reached)
    missing = [k for k in truth if k not in reached]  # trainable, no gradient from the sample: not compared
    truth = {k: v for k, v in truth.items() if k in reached}
    # the engine keeps what it set up: at 8B the float32 copy holds 32 GiB an arm's build needs
    truth_engine.model = None
    del model
    if device.type == "cuda":
        give_back_cuda_cache()  # collected first: a model in a reference cycle would hold its memory
    out = {"float32": ArmGrads("float32", loss32, {k: 0.0 for k in truth}, losses=[*losses32, loss32],
                               not_compared=missing)}
    for name, arm in arms.items():
        engine = load_engine(config, [*overrides, *arm.overrides])
        try:
            model = set_up_model(engine, device)
            model.load_state_dict(state)
            model.to(dtype)
            if arm.compiled:
                compile_layers(model, engine.fsdp_units(model), fullgraph=arm.fullgraph)
            counters["graph_break"].clear()
            before = {k: v.detach().clone() for k, v in model.state_dict().items()}
            size = engine.config.train.micro_batch_size
            losses = [gradients(model, recipe_loss(engine, device, i * size))[0] for i in range(calls - 1)]
            value, grads = gradients(model, recipe_loss(engine, device, (calls - 1) * size))
            changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
            swaps = len(engine.liger_kit.report.patched) if engine.liger_kit.active else 0
            out[name] = ArmGrads(name, value, {k: relative_error(grads[k], truth[k]) for k in truth}, swaps,
                                 sum(counters["graph_break"].values()), [*losses, value], changed, missing)
            del before
            del model, grads
        finally:
            engine.model = None  # one model on the device at a time: the next arm's build needs its memory
            if engine.liger_kit.active:
                engine.liger_kit.revert()
            reset_compiled()
            if device.type == "cuda":
                give_back_cuda_cache()
    return out


def recipe_loss(engine: RecipeEngine, device: torch.device, start: int = 0,
                size: int | None = None) -> Callable[[torch.nn.Module], torch.Tensor]:
    """``loss(model)``: the engine's own configured loss on its samples ``start .. start + size`` (default
    ``train.micro_batch_size``), on ``device``, normalized by their valid tokens; with
    ``train.memory.recompute_glu_product`` or ``train.memory.recompute_norm_output`` (and Liger on) those outputs are
    recomputed, as in training, each checked bit for bit against the forward's."""
    size = engine.config.train.micro_batch_size if size is None else size
    table = engine.recompute_table

    def loss(model: torch.nn.Module) -> torch.Tensor:
        vocab = model.get_output_embeddings().weight.shape[0]
        batch = device_batch(engine.make_batch(start, size, vocab), device, engine.config.train.drop_right_padding_mask)
        with recomputed(table, verify=True) if table and torch.is_grad_enabled() else nullcontext():
            return engine.loss(engine, model, batch, 1.0 / max(valid_tokens(batch["labels"]), 1))
    return loss
