"""Gradient parity for a recipe config and for a ``custom_patches`` map, in one process.

``recipe_grad_parity`` sets the recipe's own model up three times as the trainer does (float32 with
Liger off, the training dtype with Liger off, the training dtype with Liger on: ``set_up_model``, where
the engine applies the kit and builds, then the model is scanned), takes the standard token loss of
the recipe's first sample, and reverts the kit after the patched arm. ``map_grad_parity`` does the
same for a modeling module and a map, on a small model of the module (``ligerkit suggest --gpu``).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ligerkit.train.models import resolve_dtype
from ligerkit.train.recipe.loading import load_engine
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.kit.build import apply_build_scan
from ligerkit.kit.core import LigerKernelKit
from ligerkit.kit.custom import CustomPatches, LigerPatch
from ligerkit.proof.arm_grads import recipe_loss
from ligerkit.proof.grads import GradParity, GradTolerance, grad_parity
from ligerkit.probe.aliasing import checked_on
from ligerkit.probe.catalog import by_name
from ligerkit.errors import ModelBuildError
from ligerkit.probe.runnable import Runnable, Unrunnable, build_model_class, runnable_model
from ligerkit.suggest import Suggestion

LIGER_ON = ("model.liger_kernel.enabled=true",)


def recipe_grad_parity(config: str | Path, overrides: list[str], device: torch.device,
                       tolerance: GradTolerance | None = None,
                       patched_overrides: tuple[str, ...] = LIGER_ON) -> GradParity:
    """Per-tensor gradients of the recipe with Liger on vs off, both against float32 (see ``grads``).

    ``patched_overrides`` select the patched arm (Liger on); the same function proves a loss path
    (``train.loss.path=fused`` in the patched arm only), and a CPU test passes Liger-off overrides to
    check the mechanics where Liger's kernels cannot run. Each arm takes its own configured loss.
    """
    off = [*overrides, "model.liger_kernel.enabled=false"]
    engines = {"float32": load_engine(config, [*off, "model.dtype=float32"]), "eager": load_engine(config, off),
               "patched": load_engine(config, [*overrides, *patched_overrides])}
    dtype = resolve_dtype(engines["eager"].config.model.dtype, device)
    arms: dict[int, str] = {}  # id(model) -> the arm that built it (float32 is also run again, for routing)
    order = iter(("float32", "eager"))

    def build() -> nn.Module:
        arm = next(order, "patched")
        model = set_up_model(engines[arm], device)
        arms[id(model)] = arm
        return model

    def loss(model: nn.Module) -> torch.Tensor:
        return recipe_loss(engines[arms[id(model)]], device, 0, 1)(model)  # the arm's own loss, first sample

    @contextmanager
    def patched() -> Iterator[None]:
        try:
            yield
        finally:
            engines["patched"].liger_kit.revert()

    return grad_parity(build, loss, patched, dtype, tolerance)


def map_grad_parity(module: types.ModuleType, config: Any, custom_patches: CustomPatches, device: torch.device,
                    tolerance: GradTolerance | None = None, probe: bool = True) -> GradParity:
    """Per-tensor gradients of ``module``'s whole model with ``custom_patches`` applied vs not.

    The model is the module's top class (``runnable``: causal LM, conditional generation, ...) from a
    consistently shrunk config, built directly on ``device`` for each arm; the loss is a fixed random
    projection of its output. The kit's in-place checks run on ``device`` too (a model too large for
    the CPU is checked there). ``probe=False`` applies a map the kit would refuse, to show what the
    check then finds. The result's coverage names the model and the tensors compared.
    """
    with checked_on(device.type):
        return _map_grad_parity(module, config, custom_patches, device, tolerance, probe)


def _map_grad_parity(module: types.ModuleType, config: Any, custom_patches: CustomPatches, device: torch.device,
                     tolerance: GradTolerance | None, probe: bool) -> GradParity:
    classes = tuple(obj for obj in _originals(module, custom_patches) if isinstance(obj, type))

    def watch(model: nn.Module) -> Any:
        uses = not classes or any(isinstance(m, classes) for m in model.modules())
        return nullcontext(lambda: uses)

    found = runnable_model(module, config, watch, device=device.type)
    model_class, built_from = type(found.model), found.config
    model_name = model_class.__name__
    args, kwargs = _on(device, found.args, found.kwargs)
    del found  # each arm builds its own model
    kit = LigerKernelKit()

    def construct() -> nn.Module:
        # the class as the module binds it now: the map may patch the model class itself
        cls = getattr(module, model_name, None) or model_class
        try:
            return build_model_class(cls, built_from, device=device.type)
        except Unrunnable as exc:
            if not kit.active:
                raise
            raise ModelBuildError(f"the map breaks the construction of {model_name}, which builds without it: {exc}. "
                                  "A replacement does not take the arguments the model passes to the symbol it "
                                  "replaces; leave that key off (`ligerkit suggest` leaves such symbols off).") from exc

    def build() -> nn.Module:  # the patched arm's map is applied by ``patched`` around it
        return apply_build_scan(kit, construct, scan=kit.active).model.to(device)

    def loss(model: nn.Module) -> torch.Tensor:
        dtype = next(model.parameters()).dtype  # float inputs (hidden states, pixels) follow the arm's dtype
        return Runnable(model, *_on(device, args, kwargs, dtype)).loss()

    @contextmanager
    def patched() -> Iterator[None]:
        with kit.applied(model_family=module.__name__, custom_patches=custom_patches, config=config, probe=probe):
            yield

    return grad_parity(build, loss, patched, torch.bfloat16, tolerance)


def ablate_map(module: types.ModuleType, config: Any, custom_patches: CustomPatches, device: torch.device,
               tolerance: GradTolerance | None = None) -> dict[str, GradParity]:
    """Each key of a map proven alone on the same whole model (which swap moves a failing gradient)."""
    return {key: map_grad_parity(module, config, {key: value}, device, tolerance)
            for key, value in custom_patches.items()}


def suggested_patches(suggestion: Suggestion) -> dict[str, list[LigerPatch]]:
    """The ``custom_patches`` map a suggestion prints, as objects."""
    return {key: [LigerPatch(suggestion.module, c.symbol, by_name(c.replacement).obj) for c in items]
            for key, items in suggestion.groups().items() if all(c.replacement for c in items)}


def _originals(module: types.ModuleType, custom_patches: CustomPatches) -> list[object]:
    """The objects the map's patches on ``module`` replace (``None`` for a patch elsewhere)."""
    found: list[object] = []
    for value in custom_patches.values():
        for patch in value if isinstance(value, (list, tuple)) else [value]:
            owner: object = module if patch.module == module.__name__ else None
            for part in patch.attr.split(".") if owner is not None else ():
                owner = getattr(owner, part, None)
            found.append(owner)
    return found


def _on(device: torch.device, args: tuple[Any, ...], kwargs: dict[str, Any],
        dtype: torch.dtype | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` on ``device`` (tensors inside tuples and lists too), floating ones in ``dtype``."""
    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            cast = dtype if dtype is not None and value.is_floating_point() else None
            return value.to(device, cast) if cast is not None else value.to(device)
        if isinstance(value, (tuple, list)):
            return type(value)(move(v) for v in value)
        return value

    return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}
