"""Does the model still build with a matched replacement? Checked on the meta device, per symbol.

A probe builds the source and the replacement with the same constructor call it infers (a size,
or the config). The model may construct the source otherwise: ``XLayerNorm(dim, eps=..., 
data_format="channels_first")``, ``XRMSNorm(dim, with_scale=False)``. A replacement that does not take
those arguments computes the same math but breaks the model's construction, so each matched class is
swapped alone (through the kit, probes off) and the config's model is built on the meta device; the
first construction error leaves the symbol off, with the error as the reason.
"""

from __future__ import annotations

import types
from typing import Any

from ligerkit.errors import LigerKitError, ModelBuildError
from ligerkit.hf import build_meta_model
from ligerkit.kit.core import LigerKernelKit
from ligerkit.kit.custom import LigerPatch


def construction_problem(module: types.ModuleType, symbol: str, replacement: object, config: Any) -> str | None:
    """Why ``config``'s model does not build with ``module.symbol`` swapped for ``replacement``, or
    ``None`` (it builds, or there is no transformers config to build from; the caller checks that the
    unpatched model builds)."""
    from transformers import PretrainedConfig

    if not isinstance(config, PretrainedConfig) or not isinstance(getattr(module, symbol, None), type):
        return None
    kit = LigerKernelKit()
    try:
        with kit.applied(model_family=module.__name__, probe=False,
                         custom_patches={"construction": LigerPatch(module.__name__, symbol, replacement)}):
            build_meta_model(config)
    except ModelBuildError as exc:
        cause = exc.__cause__ or exc
        return f"{type(cause).__name__}: {cause}"
    except LigerKitError:  # a refusal of the swap itself is not about construction
        return None
    return None
