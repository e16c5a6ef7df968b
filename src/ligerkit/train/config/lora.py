"""``train.lora``: the LoRA section of a recipe config (its keys, ranges and meaning)."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, field_validator

from ligerkit.train.config.strict import Float, Int, Strict


ALL_LINEAR = "all-linear"
"""``target_modules``' value for every linear layer but the output head."""


class LoraConfig(Strict):
    """``train.lora``: train low-rank adapters (PEFT's LoRA, the ``lora`` extra) instead of every weight.

    The adapters are injected into the built model in place (after the kit's swaps, before the scan),
    every other weight is frozen, and checkpoints hold the adapters with a hash of the frozen weights
    they were trained on (a resume or ``--init-from`` on another base is refused).
    """

    rank: Int = Field(16, gt=0, le=65536, description="the adapters' rank r")
    alpha: Float = Field(32.0, gt=0, description="LoRA's alpha: the update is scaled by alpha / rank")
    dropout: Float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    target_modules: Literal["all-linear"] | tuple[str, ...] = Field(
        "all-linear", description="names of the linear layers that get adapters (the last part of their module "
        "path, e.g. [q_proj, v_proj]), or all-linear: every linear layer but the output head"
    )

    @field_validator("target_modules", mode="before")
    @classmethod
    def _list_or_all_linear(cls, value: Any) -> Any:
        if isinstance(value, str) and value != ALL_LINEAR:
            if difflib.get_close_matches(value.lower(), [ALL_LINEAR], n=1, cutoff=0.75):
                raise ValueError(f"got {value!r}; did you mean {ALL_LINEAR} (every linear layer but the output head)?")
            raise ValueError(f"got the single name {value!r}; give a list, e.g. [{value}], or {ALL_LINEAR} for every "
                             "linear layer but the output head")
        if isinstance(value, (list, tuple)) and ALL_LINEAR in value:
            raise ValueError(f"{ALL_LINEAR} stands on its own, not inside a list: write target_modules: {ALL_LINEAR}, "
                             "or list layer names such as [q_proj, v_proj]")
        return value

    @field_validator("target_modules")
    @classmethod
    def _some_targets(cls, value: Any) -> Any:
        if isinstance(value, tuple) and (not value or any(not name.strip() for name in value)):
            raise ValueError("give at least one linear layer name (e.g. [q_proj, v_proj]) or all-linear")
        return value
