"""Reading a model's family from a local checkpoint or config, never from a hub."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ligerkit.errors import FamilyResolutionError


def load_config(model_name_or_path: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """Load the transformers config at a local path (or already in the local cache), offline."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            str(model_name_or_path), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as exc:
        raise FamilyResolutionError(
            f"Could not read a model config at {str(model_name_or_path)!r} ({type(exc).__name__}: "
            f"{exc}). ligerkit never downloads: point model_name_or_path at a local directory with a "
            "config.json, or pass model_family= explicitly."
        ) from exc


def family_of(model_name_or_path: str | os.PathLike[str], trust_remote_code: bool = False) -> str:
    """The ``model_type`` of the model at ``model_name_or_path``.

    A local ``config.json`` is read as JSON first (no code runs); only a path that is not a local
    directory goes through ``AutoConfig`` with ``local_files_only=True``.
    """
    path = Path(model_name_or_path)
    config_file = path / "config.json" if path.is_dir() else path
    if config_file.is_file():
        try:
            model_type = json.loads(config_file.read_text()).get("model_type")
        except (OSError, ValueError) as exc:
            raise FamilyResolutionError(f"{config_file} is not a readable JSON config: {exc}") from exc
        if not model_type:
            raise FamilyResolutionError(
                f"{config_file} has no 'model_type'; pass model_family= explicitly."
            )
        return str(model_type)
    return str(load_config(model_name_or_path, trust_remote_code).model_type)


def text_config(config: Any) -> Any:
    """The language model's part of a config: transformers' ``get_text_config()``, a ``text`` field
    (composite configs), or the config itself."""
    getter = getattr(config, "get_text_config", None)
    if callable(getter):
        return getter()
    return getattr(config, "text", config)
