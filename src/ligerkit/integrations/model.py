"""Load a model for any trainer: apply the kit, build, scan (``ligerkit.kit.apply_build_scan``), and keep
the kit with the model.

    model = load_model("path/to/checkpoint")          # official route from config.json's model_type
    model.ligerkit.report, model.ligerkit.scan         # what was swapped, what the model holds
    ...train with HF Trainer, TRL, Accelerate or a plain loop...
    model.ligerkit.kit.revert()                        # when the model is no longer used

The kit stays applied until it is reverted by hand: nothing here (and nothing in the kit) reverts
on garbage collection, because a model keeps the Liger classes it was built with and would run a
mix of Liger modules and original functions after a revert.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ligerkit.compile.table import for_width
from ligerkit.errors import InvalidOptionError, ModelBuildError
from ligerkit.hf import build_model, hidden_width, load_config, model_class_for
from ligerkit.kit import LigerKernelKit, LigerKernelReport, ScanResult, apply_build_scan
from ligerkit.kit.core import scanned_by
from ligerkit.kit.custom import CustomPatches
from ligerkit.kit.fallback import FallbackBuilder
from ligerkit.kit.official import Modules
from ligerkit.naming import LOSS_MODULES

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class LigerKitHandle:
    """What ``model.ligerkit`` holds: the kit that built the model, its report and the scan.

    Copies of the model (``copy.deepcopy``) share the handle; a pickled model carries none (the kit's
    swaps live in this process only).
    """

    kit: LigerKernelKit
    report: LigerKernelReport
    scan: ScanResult

    def __deepcopy__(self, memo: dict[int, Any]) -> LigerKitHandle:
        return self

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_no_handle, ())

    def __str__(self) -> str:
        return f"{self.report}\n{self.scan}"


def _no_handle() -> None:
    return None


def kit_of(model: Any) -> LigerKitHandle | None:
    """The handle ``load_model`` attached, else the kit whose ``kit.scan`` scanned the model, looking
    through DDP/FSDP/compile/PEFT wrappers; else ``None``."""
    seen: set[int] = set()
    while model is not None and id(model) not in seen:
        seen.add(id(model))
        handle = vars(model).get("ligerkit") if hasattr(model, "__dict__") else None
        if isinstance(handle, LigerKitHandle):
            return handle
        scanned = scanned_by(model) if isinstance(model, nn.Module) else None
        if scanned is not None:
            return LigerKitHandle(scanned[0], scanned[0].report, scanned[1])
        inner = None
        for attr in ("module", "_orig_mod", "base_model", "model"):
            candidate = getattr(model, attr, None)
            if isinstance(candidate, nn.Module) and candidate is not model:
                inner = candidate
                break
        model = inner
    return None


def attach(model: nn.Module, kit: LigerKernelKit, scan: ScanResult) -> LigerKitHandle:
    """Put ``kit``, its report and ``scan`` on ``model`` as ``model.ligerkit`` and return the handle."""
    handle = LigerKitHandle(kit, kit.report, scan)
    object.__setattr__(model, "ligerkit", handle)  # a plain attribute, never a submodule or buffer
    return handle


def load_model(
    model_name_or_path: str | os.PathLike[str] | None = None,
    *,
    config: Any = None,
    model_class: type | None = None,
    kit: LigerKernelKit | None = None,
    model_family: str | None = None,
    modules: Modules = "auto",
    excluded_modules: tuple[str, ...] = LOSS_MODULES,
    custom_patches: CustomPatches | None = None,
    weights: bool | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    compile: bool = False,
    fallback: FallbackBuilder | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Apply Liger, build the model, scan it, and return it with ``model.ligerkit`` attached.

    Args:
        model_name_or_path: a local checkpoint or config folder (never downloaded).
        config: a transformers config to build from instead of (or with) the folder's.
        model_class: the class to build (default: the causal-LM class for the config, else the
            image-text-to-text class, else the base model).
        kit: an existing kit to apply on (a composite model applies twice); a new one by default.
        model_family, modules, excluded_modules, custom_patches, fallback: as :meth:`LigerKernelKit.apply`
            (the family defaults to the config's ``model_type``; ``fallback=ligerkit.suggest.proven_map``
            applies ligerkit's proven map when the family's Liger helper fails).
        weights: load the folder's weights (default: when the folder holds them) or build from the
            config with random initialization.
        dtype, device: where the model lives; ``model_kwargs`` go to ``from_pretrained``.
        compile: you will ``torch.compile`` the model (or its layers): Liger's kernels then run as
            ``ligerkit.compile`` operators (see :meth:`LigerKernelKit.apply`).

    Everything this call applied is reverted if building or scanning fails (the kit's one
    apply-build-scan path, :func:`~ligerkit.kit.apply_build_scan`).
    """
    path = Path(model_name_or_path) if model_name_or_path is not None else None
    if path is not None and not path.is_dir():
        raise InvalidOptionError(f"model_name_or_path {str(path)!r} is not a local folder; ligerkit never downloads: "
                                 "point it at a folder with config.json (and weights), or pass config=")
    if config is None and path is None:
        raise InvalidOptionError("load_model needs model_name_or_path= (a local folder) or config=")
    if custom_patches is not None and modules != "auto":
        raise InvalidOptionError("modules= selects Liger's helper modules on the official route; with custom_patches= "
                                 "the map is the selection: drop modules=, or apply the official route first on "
                                 "the same kit (kit=) and load with custom_patches= second")
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise InvalidOptionError(f"dtype {dtype!r} is not a torch dtype; use e.g. torch.bfloat16 or 'bfloat16'")
        dtype = getattr(torch, dtype)
    config = config if config is not None else load_config(path)
    has_weights = path is not None and any((path / name).is_file() for name in WEIGHT_FILES)
    if weights and not has_weights:
        raise InvalidOptionError(f"weights=True, but {path} holds none of {', '.join(WEIGHT_FILES)}")
    load_weights = has_weights if weights is None else weights
    if model_kwargs and not load_weights:
        raise InvalidOptionError(f"{', '.join(sorted(model_kwargs))} go to from_pretrained, but this build starts "
                                 "from the config without weights; drop them or load a checkpoint with weights")
    kit = kit if kit is not None else LigerKernelKit()

    def apply_and_build() -> nn.Module:
        if custom_patches is not None:
            kit.apply(model_family=model_family or config.model_type, custom_patches=custom_patches,
                      excluded_modules=excluded_modules, config=config, compile=compile)
        else:
            kit.apply(model_family=model_family or config.model_type, modules=modules,
                      excluded_modules=excluded_modules, compile=compile, fallback=fallback)
        return _build(model_class or model_class_for(config), config, path if load_weights else None,
                      dtype, model_kwargs)

    moved = () if device is None else (lambda model: model.to(device),)  # nn.Module.to moves in place
    with for_width(hidden_width(config)):  # compile mode: the Inductor table's row for this width
        model, scan = apply_build_scan(kit, apply_and_build, before_scan=moved)
    assert scan is not None
    attach(model, kit, scan)
    return model


def _build(cls: type, config: Any, path: Path | None, dtype: Any, model_kwargs: dict[str, Any]) -> nn.Module:
    try:
        return build_model(config, cls, path=path, dtype=dtype, from_pretrained=model_kwargs)
    except Exception as exc:
        raise ModelBuildError(f"could not build {cls.__name__} ({type(exc).__name__}: {exc}); the kit's swaps of this "
                              "call were reverted") from exc
