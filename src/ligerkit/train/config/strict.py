"""The building blocks of every config section: strict models, numbers that are never booleans."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, got true/false")
    return value


# Numbers from YAML or --set: never a boolean in disguise (true is 1 to Python), never inf or NaN.
Int = Annotated[int, BeforeValidator(_number)]
Float = Annotated[float, BeforeValidator(_number)]


class Strict(BaseModel):
    """A config section: unknown keys are errors, values frozen, no inf or NaN."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
