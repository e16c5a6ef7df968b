"""Every random stream of a process, saved as plain JSON so that restoring it runs nothing.

``rng_rank<r>.json`` holds torch's CPU generator state and each CUDA device's (bytes, base64) and
Python's ``random`` state (numbers). Run folders written before this format hold ``rng_rank<r>.pt``, a
``torch.save``d dict of the same three; it is read with ``torch.load(weights_only=True)``, which allows
exactly tensors, numbers and containers, so an old run resumes and a crafted file is refused.
Whatever is read is checked before anything is restored.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import torch

from ligerkit.errors import CheckpointFileError

FORMAT = 1


def file_name(rank: int, legacy: bool = False) -> str:
    """The random-stream file of ``rank`` (``legacy``: the ``.pt`` of run folders written before JSON)."""
    return f"rng_rank{rank}.pt" if legacy else f"rng_rank{rank}.json"


def rng_state() -> dict[str, Any]:
    """Every random stream this process uses."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured (or :func:`read_rng` read)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _text(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode("ascii")


def _bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8).clone()


def write_rng(path: Path) -> None:
    """Write this process's random streams to ``path`` as JSON."""
    state = rng_state()
    version, internal, gauss = state["python"]
    data = {"format": FORMAT, "torch": _text(state["torch"]), "python": [version, list(internal), gauss]}
    if "cuda" in state:
        data["cuda"] = [_text(t) for t in state["cuda"]]
    path.write_text(json.dumps(data))


def _parsed(path: Path) -> dict[str, Any]:
    if path.suffix == ".pt":
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # UnpicklingError for a refused name; anything for damaged bytes
            raise CheckpointFileError(path, f"is not plain data ({type(exc).__name__}: {exc})") from exc
    data = json.loads(path.read_text())
    version, internal, gauss = data["python"]
    state = {"torch": _bytes(data["torch"]), "python": (version, tuple(internal), gauss)}
    if "cuda" in data:
        state["cuda"] = [_bytes(t) for t in data["cuda"]]
    return state


def _check(state: Any) -> None:
    if not isinstance(state, dict) or not {"torch", "python"} <= state.keys():
        raise ValueError("not a dict with 'torch' and 'python' streams")
    tensors = [state["torch"], *state.get("cuda", [])]
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1 for t in tensors):
        raise ValueError("a generator state is not a byte tensor")
    if state["torch"].numel() != torch.get_rng_state().numel():
        raise ValueError(f"torch's state has {state['torch'].numel()} bytes, not {torch.get_rng_state().numel()}")
    random.Random().setstate(state["python"])  # Python's own check, on a throwaway generator


def read_rng(path: Path) -> dict[str, Any]:
    """The random streams in ``path`` (``.json``, or a legacy ``.pt``), checked; :class:`CheckpointFileError`
    when the file is missing, damaged or not plain data."""
    if not path.is_file():
        raise CheckpointFileError(path, "is missing")
    try:
        state = _parsed(path)
        _check(state)
    except CheckpointFileError:
        raise
    except Exception as exc:  # a damaged file fails somewhere in parsing or checking
        raise CheckpointFileError(path, f"is not a random-stream state ({type(exc).__name__}: {exc})") from exc
    return state
