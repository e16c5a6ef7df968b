"""A family's own image processor, found from its config and modeling module, and what it makes of
random images (pixels with the grids, sizes and masks the model takes)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from ligerkit.hf import quiet_transformers
from ligerkit.probe.input_parts import vision_node


def processor_classes(config: Any, model: nn.Module) -> list[type]:
    """The family's image processor classes: transformers' own mapping for the config's model type,
    else the ``image_processing_*`` modules beside the modeling module; for a family derived from others
    without a processor of its own, those of the families it derives from (:func:`parent_families`)."""
    import importlib

    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    family = type(model).__module__.rsplit(".", 1)[0]
    short = family.rsplit(".", 1)[-1]
    found: list[type] = []
    for model_type in [getattr(config, "model_type", ""), short, *parent_families(type(model).__module__)]:
        names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type, {})
        for name in (names.values() if isinstance(names, dict) else [names] if isinstance(names, str) else names or ()):
            try:
                found.append(getattr(transformers, name))
            except Exception:  # a backend (torchvision) this machine lacks
                continue
        root = f"{family.rsplit('.', 1)[0]}.{model_type}"
        for module_name in (f"{root}.image_processing_{model_type}", f"{root}.image_processing_pil_{model_type}"):
            try:
                processing = importlib.import_module(module_name)
            except Exception:
                continue
            found += [v for v in vars(processing).values() if isinstance(v, type) and v.__module__ == module_name
                      and "ImageProcessor" in v.__name__ and not v.__name__.endswith("Kwargs")]
        if found:
            break
    return list(dict.fromkeys(found))


def parent_families(module_name: str) -> list[str]:
    """The families a generated modeling module derives from, as its ``modular_*`` source beside it imports
    them (``from ..qwen3_vl.modeling_qwen3_vl import ...``): those whose configurations it builds on first, in
    import order, then those it only borrows code from (transformers 5.25's qwen3_vl_moe takes its output
    classes from aria); read as text, never imported."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        return []
    here = Path(spec.origin).parent
    source = here / f"modular_{here.name}.py"
    try:
        text = source.read_text()
    except OSError:
        return []
    imports = re.findall(r"^from \.\.(\w+)\.(\w+)", text, re.M)
    configs = [family for family, module in imports if module.startswith("configuration_")]
    return list(dict.fromkeys(m for m in [*configs, *(family for family, _ in imports)] if m != here.name))


def processed_images(config: Any, model: nn.Module, size: int, batch: int, accepted: set[str],
                      g: torch.Generator) -> dict[str, Any] | None:
    """What the family's own image processor makes of ``batch`` random images ``size`` pixels wide:
    pixels with the grids, sizes and masks the model takes."""
    import numpy as np

    image = (torch.rand(size, size, 3, generator=g) * 255).to(torch.uint8).numpy()
    vision = vision_node(config) or config
    for cls in processor_classes(config, model):
        try:
            with quiet_transformers(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                processor = cls()
                _match_processor(processor, vision)
                out = dict(processor([np.asarray(image)] * batch, return_tensors="pt"))
        except Exception:  # noqa: BLE001 - a processor that does not take these images (or returns no mapping)
            continue
        kept = {k: v for k, v in out.items() if k in accepted and isinstance(v, torch.Tensor)}
        if "pixel_values" in kept:
            kept["pixel_values"] = kept["pixel_values"].float()
            return kept
    return None


def _match_processor(processor: Any, vision: Any) -> None:
    """Set the processor's int settings (patch size, merge size) to the vision config's, matched by
    name (``merge_size`` takes ``spatial_merge_size``)."""
    for name, value in list(vars(processor).items()):
        if not isinstance(value, int) or isinstance(value, bool) or name.startswith("_"):
            continue
        for attr, own in vars(vision).items():
            if (attr == name or attr.endswith(f"_{name}")) and isinstance(own, int) and not isinstance(own, bool):
                setattr(processor, name, own)
                break
