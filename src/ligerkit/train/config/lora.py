"""``train.lora``: the LoRA section of a recipe config (its keys, ranges and meaning)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from ligerkit.train.config.strict import Float, Int, Strict


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

    @field_validator("target_modules")
    @classmethod
    def _some_targets(cls, value: Any) -> Any:
        if isinstance(value, tuple) and (not value or any(not name.strip() for name in value)):
            raise ValueError("give at least one linear layer name (e.g. [q_proj, v_proj]) or all-linear")
        return value
