"""A recipe's gradient check in a process of its own, so the process that asked keeps none of its memory.

``smoke`` checks the step-1 gradients, then trains each arm in a process of its own on the same card. Run
in the asking process, the check's three models leave cached blocks and cuBLAS workspaces behind, and a
workspace keeps the whole segment it was cut from: on an 80 GB card the first arm ran out of memory beside
what the asking process still held. In a process of its own, all of it leaves the card with the process.

The request and the answer are JSON files in a temporary folder of this process's own; the answer is read
as data (no pickle, nothing run). A ligerkit error in the check comes back as the same class with the same
message; any other failure as a :class:`~ligerkit.errors.LigerKitError` naming it, with the end of the
process's output.

    python -m ligerkit.proof.grads_apart REQUEST.json ANSWER.json   # what the asking process runs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ligerkit import errors
from ligerkit.errors import LigerKitError
from ligerkit.probe.tolerance import GradTolerance
from ligerkit.proof.grads import Coverage, GradParity, TensorError
from ligerkit.proof.recipe_grads import LIGER_ON, recipe_grad_parity
from ligerkit.proof.routes import Routing
from ligerkit.whole_files import write_whole


def recipe_grad_parity_apart(config: str | Path, overrides: list[str], device: torch.device,
                             tolerance: GradTolerance | None = None,
                             patched_overrides: tuple[str, ...] = LIGER_ON) -> GradParity:
    """:func:`ligerkit.proof.recipe_grads.recipe_grad_parity` with the same arguments, run in a fresh Python
    process with this one's CPU threads; returns its result, equal field for field. Raises what the check
    raised (a ligerkit error as its own class), or :class:`LigerKitError` when the process failed otherwise."""
    request = {"config": str(config), "overrides": list(overrides), "device": str(device),
               "tolerance": None if tolerance is None else asdict(tolerance),
               "patched_overrides": list(patched_overrides), "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory(prefix="ligerkit-grads-") as folder:
        asked, answer = Path(folder, "request.json"), Path(folder, "answer.json")
        asked.write_text(json.dumps(request))
        cmd = [sys.executable, "-m", __name__, str(asked), str(answer)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        said = answer.read_text() if answer.is_file() else None
    tail = (proc.stderr or proc.stdout)[-4000:]
    if said is None:
        raise LigerKitError(f"the step-1 gradient check's process ({' '.join(cmd)}) ended with code "
                            f"{proc.returncode} and no answer:\n{tail}")
    data = json.loads(said)
    if "error" in data:
        raise _error(data["error"], tail)
    return parity_from_record(data["parity"])


def parity_record(parity: GradParity) -> dict[str, Any]:
    """Every field of ``parity`` as JSON-ready data (:func:`parity_from_record` reads it back)."""
    return asdict(parity)


def parity_from_record(data: dict[str, Any]) -> GradParity:
    """The :class:`GradParity` :func:`parity_record` wrote."""
    cov, routing = data["coverage"], data["routing"]
    return GradParity([TensorError(**t) for t in data["tensors"]], dict(data["losses"]),
                      GradTolerance(**data["tolerance"]),
                      None if cov is None else Coverage(**{**cov, "not_compared": tuple(cov["not_compared"])}),
                      None if routing is None else Routing(**routing), tuple(data["resampled"]))


def _error(said: dict[str, Any], tail: str) -> LigerKitError:
    """The error the check's process reported, as this process raises it."""
    cls = getattr(errors, said["type"], None) if said.get("ligerkit") else None
    if not (isinstance(cls, type) and issubclass(cls, LigerKitError)):
        hint = (" The check holds a float32 copy of the model and its gradients beside one in the training dtype, "
                "on one sample: give it a shorter sequence (--set data.seq_len=N)."
                if "OutOfMemory" in said["type"] else "")
        return LigerKitError(f"the step-1 gradient check failed in its process: {said['type']}: "
                             f"{said['message']}.{hint}\n{tail}")
    exc = cls.__new__(cls)  # the class without its constructor: the message is already made
    Exception.__init__(exc, said["message"])
    for name, value in said.get("attributes", {}).items():  # such as an exit code
        setattr(exc, name, value)
    return exc


def main(argv: list[str]) -> int:
    """The check's process: read the request, run the check, write the answer (the result or the error)."""
    asked, answer = Path(argv[0]), Path(argv[1])
    request = json.loads(asked.read_text())
    tolerance = None if request["tolerance"] is None else GradTolerance(**request["tolerance"])
    torch.set_num_threads(request["threads"])  # the asking process's CPU threads: its sums, in its order
    try:
        parity = recipe_grad_parity(request["config"], request["overrides"], torch.device(request["device"]),
                                    tolerance, tuple(request["patched_overrides"]))
    except Exception as exc:
        write_whole(answer, json.dumps({"error": {
            "type": type(exc).__name__, "message": str(exc), "ligerkit": isinstance(exc, LigerKitError),
            "attributes": {k: v for k, v in vars(exc).items() if _plain(v)}}}))
        raise
    write_whole(answer, json.dumps({"parity": parity_record(parity)}))
    return 0


def _plain(value: Any) -> bool:
    """Whether JSON keeps ``value`` as it is (numbers, text, and lists and maps of them)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return isinstance(value, list) and all(_plain(v) for v in value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
