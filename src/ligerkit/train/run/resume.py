"""A resume continues the same run or refuses: the config it trains with, one process at a time, room to go.

A run records what it trains with in ``run.json`` (``format`` and the resolved config) when it starts;
``config.yaml`` beside it is the same config for a person to read. ``--resume`` then checks, before
anything is built or written:

- **the config**: the config it would train with now (the run's ``config.yaml``, another file, or
  ``--set`` overrides) must equal the recorded one, key by key, after both went through the current
  schema (so old key names map to current ones and folders written before a rename still resume),
  except for the keys in :data:`SAFE_TO_CHANGE`, which do not change what training computes. Any
  other difference is a :class:`ResumeConfigError` listing each key with both values and the command
  that starts a new run from the checkpoint's weights instead (``--init-from``);
- **room to go**: a run that finished without any checkpoint is refused here; one that finished
  (``status.py``: whatever its newest checkpoint), or whose newest intact checkpoint already holds every
  one of ``train.steps`` steps, once that checkpoint is found (:func:`check_room`); either before any of
  its files is touched (raise ``train.steps`` to train longer);
- **one process per run folder** (:func:`lock`): an advisory lock on ``RUN/.lock`` that the operating
  system releases when the process ends, however it ends; a second ``--resume`` of a live run is refused.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

import ligerkit.train.distributed as D
from ligerkit.errors import CheckpointError, LigerKitError, ResumeConfigError
from ligerkit.train.config.origin import given_by
from ligerkit.train.config.run_files import CONFIG_FILE, METRICS_FILE, RUN_RECORD
from ligerkit.train.run.checkpoint import complete, load_weights, step_of, weights_source
from ligerkit.train.run.folder import WRITTEN_AT_START, RunDirError, open_run_dir
from ligerkit.train.run import status
from ligerkit.train.run.manifest import META
from ligerkit.whole_files import write_whole

log = logging.getLogger("ligerkit.train")

RECORD = RUN_RECORD
LOCK_FILE = ".lock"
FORMAT = 2
"""Run folder format: 1 = ``config.yaml`` only (before run.json existed), 2 = ``run.json`` as well."""

SAFE_TO_CHANGE: dict[str, str] = {
    "train.steps": "train longer (or stop sooner) than first planned",
    "train.run.stop_after_steps": "when this process stops",
    "train.run.checkpoint_every": "how often checkpoints are saved",
    "train.run.keep_checkpoints": "how many checkpoints are kept",
    "train.run.log_every": "how often a step is logged",
    "train.run.progress": "the progress bar",
    "train.run.summary_warmup_steps": "which steps the speed summary leaves out",
    "train.run.peak_tflops": "the peak used for MFU",
    "train.run.runs_dir": "where new run folders go (a resumed run stays in its folder)",
    "train.activation_checkpointing": "whether layers are recomputed in backward (and their kept inputs offloaded "
                                      "to host memory): the same loss and gradients, less memory (a run out of "
                                      "memory resumes with it on)",
    "train.memory.offload_budget_gib": "how much of the layers' kept inputs waits in host memory, the rest on the "
                                       "device: the same loss and gradients bit for bit",
    "train.memory.recompute_glu_product": "whether Liger's gated-activation products are recomputed in backward: the same "
                                   "loss and gradients bit for bit, less memory",
    "train.memory.recompute_norm_output": "whether Liger's RMSNorm outputs are recomputed in backward: the same loss and "
                                   "gradients bit for bit (checked on the first forward), less memory",
}
"""Keys a resume may change, with why they do not change what training computes."""


def record(run: Path, config: dict[str, Any]) -> None:
    """Write ``run.json`` (the format and the resolved ``config``), whole or not at all."""
    write_whole(run / RECORD, json.dumps({"format": FORMAT, "config": config}, indent=2, allow_nan=False) + "\n")


def recorded(run: Path) -> dict[str, Any]:
    """The config ``run`` trained with: ``run.json``'s, or (format 1 folders) ``config.yaml``'s."""
    file = run / RECORD
    if not file.is_file():
        try:
            data = yaml.safe_load((run / CONFIG_FILE).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise RunDirError(f"{run / 'config.yaml'} cannot be read ({exc}); restore it from a copy, or start a "
                              "new run") from None
        if not isinstance(data, dict):
            raise RunDirError(f"{run / 'config.yaml'} does not hold a config; restore it, or start a new run")
        return data
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{file} cannot be read ({exc}); restore it from a copy, or start a new run") from None
    if not (isinstance(data, dict) and isinstance(data.get("config"), dict) and type(data.get("format")) is int):
        raise RunDirError(f"{file} is not a run record (format and config); restore it, or start a new run")
    if data["format"] > FORMAT:
        raise RunDirError(f"{run} was written by a newer ligerkit (run folder format {data['format']}, this one "
                          f"reads up to {FORMAT}); resume it with that version")
    return data["config"]


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, recorded value, value now)`` for every key whose value differs, safe keys left out."""
    old, new = flat(before), flat(now)
    keys = sorted(set(old) | set(new))
    return [(k, old.get(k), new.get(k)) for k in keys
            if k not in SAFE_TO_CHANGE and _norm(k, old.get(k)) != _norm(k, new.get(k))]


def _norm(key: str, value: Any) -> Any:
    if key == "recipe" and isinstance(value, str):  # the recipe folder, however it was spelled
        return str(Path(value).resolve())
    return list(value) if isinstance(value, tuple) else value


def check_config(run: Path, now: dict[str, Any], overrides: Sequence[str] = ()) -> None:
    """Refuse (``ResumeConfigError``) a resume of ``run`` whose resolved config ``now`` differs from the
    one it recorded in a key outside :data:`SAFE_TO_CHANGE` (both read through the current schema); a key
    one of the ``--set`` lines ``overrides`` gave is named with that line."""
    from ligerkit.train.config import RecipeConfig, recorded_config

    init = f"ligerkit train CONFIG --init-from {run}"
    try:
        before = RecipeConfig.model_validate(recorded_config(recorded(run), str(run))).model_dump(mode="json")
    except Exception as exc:  # noqa: BLE001 (pydantic's ValidationError, or a type error in old data)
        raise ResumeConfigError(f"the config {run} trained with no longer validates ({exc}); start a new run from "
                                f"its weights: {init}") from None
    out = now["train"]["run"].get("output_dir")
    if out is not None and Path(out).resolve() == run.resolve():  # names the resumed folder itself
        run_keys = {**now["train"]["run"], "output_dir": before["train"]["run"].get("output_dir")}
        now = {**now, "train": {**now["train"], "run": run_keys}}
    diffs = differences(before, now)
    if not diffs:
        return
    lines = "\n".join(f"  {k}: {_show(a)} in the run, {_show(b)} now"
                      + (f" (from --set {given_by(k, overrides)})" if given_by(k, overrides) else "") for k, a, b in diffs)
    instead = (f"or start a new run from its newest checkpoint's weights: {init}" if _same_trainable(before, now) else
               "or start a new run without --init-from: a checkpoint holds the weights its run trained (the adapters "
               "of a train.lora run, every weight otherwise), which another train.lora setting (on or off, another "
               "rank or other target_modules) cannot load")
    raise ResumeConfigError(
        f"--resume {run} would train another run than the one in that folder; these keys differ from what it "
        f"trained with:\n{lines}\nResume without changing them (keys a resume may change: "
        f"{', '.join(SAFE_TO_CHANGE)}), {instead}")


def _same_trainable(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether the two configs train the same set of weights (``--init-from`` can carry them over): LoRA in
    both with the same rank and targets, or in neither."""
    old, new = before["train"].get("lora"), now["train"].get("lora")
    if old is None or new is None:
        return old is None and new is None
    return all(_norm(key, old.get(key)) == _norm(key, new.get(key)) for key in ("rank", "target_modules"))


def init_weights(found: Path, model: Any, env: Any, frozen: str | None = None) -> None:
    """``--init-from``: load the model weights of ``found`` (the checkpoint :func:`open_run` checked, every file
    against its manifest: not read twice) into ``model``; optimizer and data start fresh. ``frozen`` is the
    hash of the model's frozen weights, which the checkpoint's must equal."""
    try:
        step = load_weights(found, model, frozen)
    except CheckpointError as exc:
        if exc.file is not None and exc.file.name == META:  # the frozen-weights check: not a question of shapes
            raise CheckpointError(f"--init-from {exc}", exc.file) from exc
        raise CheckpointError(f"--init-from {found}: {exc} (is it a checkpoint of this config's model? Its shapes "
                              "must match)", exc.file) from exc
    if env.main:
        log.info("initialized the model from %s (saved after step %d); optimizer and data start fresh", found, step)


def _show(value: Any) -> str:
    text = json.dumps(value) if value is not None else "unset"
    return text if len(text) <= 80 else text[:77] + "..."


def check_finished_without_checkpoints(run: Path) -> None:
    """Refuse, before anything is built, a resume of a run that finished without saving a checkpoint."""
    if not complete(run) and (run / "summary.json").is_file():
        raise RunDirError(f"{run} finished and saved no checkpoint (train.run.checkpoint_every was unset), so there is "
                          "nothing to continue from; start a new run (set train.run.checkpoint_every to be able to "
                          "resume one)")


def check_room(run: Path, checkpoint: Path, steps: int) -> None:
    """Refuse a resume to ``steps`` steps that has no step left to train: of a run that finished
    (``status.check_unfinished``: whatever its newest checkpoint), or from ``checkpoint`` (the newest intact one)."""
    status.check_unfinished(run, steps, flat(recorded(run)).get("train.steps"))
    done = step_of(checkpoint) or 0
    if done >= steps:
        raise RunDirError(f"{run} has trained all {done} of its steps (checkpoint {checkpoint.name}); nothing was "
                          f"changed. To train further, resume with --set train.steps=N for some N > {done}")


START_FILES = frozenset({LOCK_FILE, RECORD, *WRITTEN_AT_START})
"""What a new run writes before its first step (``run_dir.write_start``, :func:`record`, its lock)."""


def discard_unstarted(run: Path, existed: Path | None = None) -> bool:
    """Remove a new run's folder refused before its first step: it holds nothing but the files a run
    writes at its start (:data:`START_FILES`, ``metrics.jsonl`` still empty), all derived from its
    config; ``True`` when removed. A folder with any other file, or a metrics row, is left as it is.
    The folders above it that opening the run made (those below ``existed``, the deepest that was
    there before) go too, each only while it is empty."""
    try:
        names = {p.name for p in run.iterdir()}
        if names - START_FILES or (METRICS_FILE in names and (run / METRICS_FILE).stat().st_size):
            return False
        for name in sorted(names - {LOCK_FILE}) + [LOCK_FILE]:  # the lock last
            (run / name).unlink(missing_ok=True)
        run.rmdir()
    except OSError:
        return False
    made = run.absolute().parent
    while existed is not None and made != existed.absolute() and existed.absolute() in made.parents:
        try:
            made.rmdir()  # only an empty folder: another run's files stop it
        except OSError:
            break
        made = made.parent
    return True


def deepest_existing(path: Path) -> Path:
    """The deepest of ``path`` and its parents that exists now (what a run's folder is made below)."""
    return next((p for p in (path, *path.absolute().parents) if p.exists()), Path("/"))


def lock(run: Path, claim: bool = True) -> IO[str]:
    """Hold ``run``'s lock for as long as the returned file stays open (the OS drops it when the process
    ends); :class:`RunDirError` when another process holds it. The lock file names the holder's process
    (:func:`claim_lock`; with ``claim`` false, not yet: a resume that its checks refuse touches no file)."""
    handle = open(run / LOCK_FILE, "a+")  # noqa: SIM115 (held open on purpose)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise RunDirError(f"{run} is in use by another process (pid {holder}); wait for it to end (Ctrl-C stops it "
                          "after a checkpoint), then resume") from None
    if claim:
        claim_lock(handle)
    return handle


def claim_lock(handle: IO[str]) -> None:
    """Write this process's id into the lock file ``handle`` holds (what a second process's refusal names)."""
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()


def open_run(output_dir: str | None, runs_dir: str, name: str, resume: str | None, env: D.DistEnv,
             resolved: Callable[[], dict[str, Any]], overrides: Sequence[str] = (),
             init_from: str | None = None) -> tuple[Path, IO[str] | None, Path | None]:
    """Rank 0 opens the run folder (a new one, or ``resume`` after :func:`check_config`,
    :func:`check_finished_without_checkpoints` and ``status.check_unfinished``) and locks it; every rank
    gets the path, or raises rank 0's refusal (no rank waits for a folder that will never come). An
    ``init_from`` that names no usable checkpoint is refused before any folder is made. Returns the path,
    the lock and the checkpoint ``init_from`` names, checked (for :func:`init_weights`; ``None`` without)."""
    source = weights_source(Path(init_from), env) if init_from is not None else None  # every rank: they agree
    outcome: tuple[str, str] | None = None
    handle = None
    if env.main:
        try:
            path = open_run_dir(output_dir, runs_dir, name, resume)
            handle = lock(path, claim=False)  # before any check: two resumes of one folder cannot both pass
            if resume is not None:
                now = resolved()
                check_config(path, now, overrides)
                check_finished_without_checkpoints(path)
                status.check_unfinished(path, now["train"]["steps"], flat(recorded(path)).get("train.steps"))
            claim_lock(handle)
            outcome = ("ok", str(path))
        except LigerKitError as exc:
            if handle is not None:
                handle.close()
            if env.distributed:
                D.from_main((type(exc).__name__, str(exc)), env)
            raise
    shared = D.from_main(outcome, env)
    if not isinstance(shared, tuple) or shared[0] != "ok":
        raise RunDirError(f"rank 0 could not open the run folder: {shared[1] if shared else 'unknown'}")
    return Path(shared[1]), handle, source
