"""The trainer's set-up of a recipe's model: the order is the runner's, the steps are the recipe's hooks.

:func:`set_up_model` is what the :class:`~ligerkit.train.Trainer`, ``ligerkit check``, the recipes'
asserts and the gradient proofs call, in this order, always:

1. refuse Liger on a machine without an accelerator (:class:`~ligerkit.errors.LigerNeedsAcceleratorError`),
   before anything is built;
2. the recipe's footprint check (``engine.check_footprint``);
3. seed torch with ``seed``;
4. the recipe's ``prepare_model`` (its own ``liger_kit.apply``, then ``build_model``); with LoRA or
   activation checkpointing, the in-place checks of that apply run their whole model in the same form
   (:func:`training_form`);
5. the key/value cache off, LoRA adapters (``train.lora``; their starting values drawn from a generator
   seeded with ``seed``, so what drew random numbers since step 3 does not change them);
6. the scan (Liger on), which sees the adapted model;
7. activation checkpointing per layer (``train.activation_checkpointing``); with ``offload`` the
   layers' kept inputs go to host memory up to ``train.memory.offload_budget_gib``
   (:class:`~ligerkit.train.memory.offload.HostOffload`, left as ``engine.offload``), refused before
   anything is built on anything but one CUDA GPU.

Steps 4 to 7 are the kit's one apply-build-scan path (:func:`ligerkit.kit.apply_build_scan`): if any of
them raises, every swap the set-up applied is reverted. The built model and its scan are left on the
engine (``engine.model``, ``engine.unwrapped_model``, ``engine.scan``), where the trainer and the
recipes' asserts read them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import torch
from torch import nn

from ligerkit.compile.table import for_width
from ligerkit.environment import NEEDS_ACCELERATOR
from ligerkit.errors import ConfigError, LigerNeedsAcceleratorError
from ligerkit.hf import hidden_width
from ligerkit.kit.build import Step, apply_build_scan
from ligerkit.train.recipe.adapters import add_lora, linear_names, perturb_zero_adapters
from ligerkit.train.models import disable_kv_cache
from ligerkit.train.recipe.footprint import offload_budget
from ligerkit.train.memory.checkpointing import recompute_layers
from ligerkit.train.memory.offload import HostOffload

from ligerkit.train.recipe.engine import RecipeEngine

if TYPE_CHECKING:
    from ligerkit.probe.training_form import TrainingForm

def set_up_model(engine: RecipeEngine, device: torch.device) -> nn.Module:
    """Set ``engine``'s model up on ``device`` in the trainer's order (see the module docstring).

    Returns the built model, also left as ``engine.model``; with Liger on, its scan is ``engine.scan``.
    Raises :class:`~ligerkit.errors.LigerNeedsAcceleratorError` for Liger on a CPU (nothing built), the
    footprint check's error before anything is allocated, and whatever a recipe hook or the scan raises
    (the swaps of this set-up reverted, ``engine.model`` and ``engine.scan`` left as they were).
    """
    if engine.liger_enabled and device.type == "cpu":
        raise LigerNeedsAcceleratorError(
            f"model.liger_kernel.enabled is true, but {NEEDS_ACCELERATOR} "
            "and this machine has neither; nothing was built. To train here without Liger, add "
            "--set model.liger_kernel.enabled=false (or use `ligerkit check` to plan on the meta device)."
        )
    t = engine.config.train
    if t.activation_checkpointing == "offload":
        _check_offload(device)
    engine.check_footprint(device)
    torch.manual_seed(engine.config.seed)
    before_scan: list[Step] = [disable_kv_cache]  # a training step never reads a key/value cache
    if t.lora is not None:  # before the scan, so the scan and its guard see the adapted model
        lora = t.lora
        before_scan.append(lambda model: add_lora(model, lora, seed=engine.config.seed))
    after_scan: list[Step] = []
    offload = HostOffload(budget=offload_budget(t.memory.offload_budget_gib)) \
        if t.activation_checkpointing == "offload" else None
    if t.activation_checkpointing:
        after_scan.append(lambda model: recompute_layers(model, engine.fsdp_units(model), offload))
    if engine.liger_enabled and engine.config.model.liger_kernel.tiled_mlp:
        after_scan.append(lambda model: _check_tiled(engine))
    # the kit's in-place verdicts see the model as it trains; compile mode reads its table at its width
    with kit_checks_in_form(engine), for_width(_width(engine) if engine.compile_mode else None):
        model, scan = apply_build_scan(engine.liger_kit, lambda: engine.prepare_model(device),
                                       before_scan=before_scan, after_scan=after_scan, scan=engine.liger_enabled)
    if engine.liger_enabled:
        engine.scan = scan
    engine.model, engine.offload = model, offload
    return model


def _check_tiled(engine: RecipeEngine) -> None:
    """``model.liger_kernel.tiled_mlp`` made some official route's MLP tiled (a recipe that applies only a
    custom map names its own classes): else a :class:`ConfigError`, the set-up's swaps reverted."""
    if not any(note.startswith("tiled MLP: ") for app in engine.liger_kit.report.applications for note in app.notes):
        raise ConfigError("model.liger_kernel.tiled_mlp is true, but this recipe applied no official route (its custom "
                          "map names its own classes: map the MLP to LigerTiledSwiGLUMLP there); set it to false")


def _check_offload(device: torch.device) -> None:
    """``train.activation_checkpointing: offload`` needs one CUDA GPU: on a CPU the host is the device (it
    would copy and save nothing), and elsewhere or under several ranks it has not been measured. A plan on
    the meta device (``ligerkit check``) passes."""
    several = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    if device.type == "meta" or (device.type == "cuda" and not several):  # a plan (``ligerkit check``), or one GPU
        return
    if device.type == "cpu":
        where = "a CPU, where host memory is the device's own and offloading saves nothing"
    elif device.type != "cuda":
        where = f"a {device.type} device, where it has not been measured"
    else:
        where = "a run of several ranks, where it has not been measured"
    raise ConfigError(f"train.activation_checkpointing: offload keeps layer inputs in host memory for one CUDA GPU, "
                      f"and this is {where}; nothing was built. Set train.activation_checkpointing: true (the same "
                      "loss and gradients, the inputs kept on the device).")


def kit_checks_in_form(engine: RecipeEngine) -> AbstractContextManager[object]:
    """A block in which the kit's in-place checks see the model in :func:`training_form`: with Liger on
    only (only then does the kit compute verdicts, and only then are the probes imported)."""
    if not engine.liger_enabled:
        return nullcontext()
    from ligerkit.probe.training_form import checked_in_form

    return checked_in_form(training_form(engine))


def training_form(engine: RecipeEngine) -> TrainingForm | None:
    """The form ``engine``'s model trains in, for the kit's in-place checks (``None``: as built).

    With ``train.lora`` the checks' whole model gets the same adapters on the linear layers it has of the
    targets (none where it has none: a vision encoder's module under adapters named for the language
    model), their ``B`` factors made non-zero so every adapter has a gradient to compare (PEFT starts
    ``B`` at zero); with ``train.activation_checkpointing`` its layers are recomputed (the classes
    :func:`_recomputed_units` finds). A step that does not fit the checks' model leaves the verdict
    unproven, never safe.
    """
    t = engine.config.train
    if t.lora is None and not t.activation_checkpointing:
        return None
    lora, parts = t.lora, []
    if lora is not None:
        targets = lora.target_modules if isinstance(lora.target_modules, str) else ",".join(lora.target_modules)
        parts.append(f"LoRA r={lora.rank} alpha={lora.alpha:g} dropout={lora.dropout:g} on {targets}")
    if t.activation_checkpointing:
        parts.append("activation checkpointing per layer")

    def adapt(model: nn.Module) -> None:
        if lora is not None:
            present = set(linear_names(model))  # a part of a composite model may hold none of the targets
            named = lora if lora.target_modules == "all-linear" else lora.model_copy(
                update={"target_modules": tuple(n for n in lora.target_modules if n in present)})
            if named.target_modules:
                add_lora(model, named)
                perturb_zero_adapters(model)
        if t.activation_checkpointing:
            recompute_layers(model, _recomputed_units(engine, model, built_units))

    built_units: list[set[str]] = []  # the units of the model the engine builds, found once, if needed
    from ligerkit.probe.training_form import TrainingForm

    return TrainingForm("; ".join(parts), adapt)


def _recomputed_units(engine: RecipeEngine, model: nn.Module, built_units: list[set[str]]) -> set[str]:
    """The layer classes to recompute in a check's whole ``model``: the recipe's FSDP units for it, else
    its own ``_no_split_modules``, else the units of the model the engine builds (a composite recipe's
    vision encoder module declares none of its own, but the composite model recomputes its layers).
    That model is built once, on the meta device, with the random generators left as they were. When
    ``model`` holds none of them, the set has none of its classes and the check's form step raises:
    whether the part is recomputed (inside a layer) or not (beside them) is unknown, so unproven."""
    def present(units: set[str]) -> bool:
        return any(type(m).__name__ in units for m in model.modules())

    try:  # the recipe's hook is written for its own model, not necessarily for the check's
        units = set(engine.fsdp_units(model))
    except Exception:
        units = set()
    if not present(units):
        units = set(getattr(model, "_no_split_modules", None) or ())
    if not present(units):
        if not built_units:
            try:
                with torch.random.fork_rng(devices=[]):
                    built_units.append(set(engine.fsdp_units(engine.build_model(torch.device("meta")))))
            except Exception:  # a build the meta device cannot do: the check's form step says so
                built_units.append(set())
        units = built_units[0]
    return units


def _width(engine: RecipeEngine) -> int | None:
    """The hidden size of the model ``engine`` builds, from its config (``None`` when it has none)."""
    try:
        return hidden_width(engine.model_config())
    except Exception:  # the set-up names a bad config itself, in the build
        return None
