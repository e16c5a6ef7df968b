"""Checkpoints: model and optimizer through PyTorch Distributed Checkpoint, and what else a step needs.

A checkpoint is ``checkpoints/step_NNNNNNN/`` in the run folder: the model's and the optimizer's
state (sharded under FSDP2, so every rank writes and reads its own shards in parallel, and a run may
resume on another number of ranks), one ``rng_rank<r>.json`` per rank (``rng.py``) and ``meta.json``:
the number of steps done (with the data a pure function of ``(seed, sample index)`` and the learning
rate a function of the step, that is the data position and the scheduler state) and the manifest,
every file's size and SHA-256 (``manifest.py``). It is written as ``step_NNNNNNN.partial`` and renamed
only when every rank has finished, so a save killed half-way is never taken for the latest one.

A checkpoint is data, not code: it is read only through restricted loaders (``safe_load.py``). Before
a resume every file of the newest one is checked (``meta.json`` names its folder's step, sizes and
hashes match, the metadata and every non-tensor entry read as plain data); a damaged one is skipped
for the previous intact one with a warning naming the file and why, and nothing is ever deleted on
the way. A checkpoint written before manifests (no ``format`` in ``meta.json``) is still read through
the same restricted loaders, with its sizes checked against its metadata.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ligerkit.train.run import manifest
from ligerkit.errors import CheckpointError, CheckpointFileError
from ligerkit.train.distributed import DistEnv
from ligerkit.train.run.rng import file_name, read_rng, set_rng_state, write_rng
from ligerkit.train.run.storage import storage_cause, storage_error
from ligerkit.train.config.run_files import CHECKPOINT_NAME, CHECKPOINTS_FOLDER, CONFIG_FILE

FORMAT = 2  # 1: before manifests (no "format" key)
log = logging.getLogger("ligerkit.train")


def _barrier(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.barrier()


def step_of(folder: Path) -> int | None:
    """The step a checkpoint folder's name says (``step_0000004`` -> 4); ``None`` for any other name."""
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def complete(run: Path) -> list[Path]:
    """The run's finished checkpoints, oldest first: every ``step_N`` folder (a save renames its
    ``.partial`` folder only when every rank is done). Whether one is intact is :func:`usable`'s question."""
    folder = run / CHECKPOINTS_FOLDER
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=lambda p: step_of(p) or 0)


def latest(run: Path) -> Path | None:
    """The newest finished checkpoint of a run, or ``None``."""
    found = complete(run)
    return found[-1] if found else None


def _options(loading: bool = False) -> Any:
    """What a checkpoint holds of the model: its trainable weights (frozen ones, a LoRA base for one, are
    rebuilt by the run and checked against ``frozen_sha256`` instead of being saved). Loading sets exactly
    the keys it read (DCP refuses a checkpoint that lacks one), so the frozen ones are not asked for."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=not loading)


def check_frozen(checkpoint: Path, meta: dict[str, Any], frozen: str | None) -> None:
    """Refuse a checkpoint whose frozen weights were not this model's: its ``frozen_sha256`` must equal
    ``frozen`` (:func:`ligerkit.train.recipe.adapters.frozen_fingerprint` of the model about to load it)."""
    saved = meta.get("frozen_sha256")
    if saved == frozen:
        return
    if saved is None:
        why = ("was saved by a run that trained every weight, and this model has frozen weights (train.lora?); "
               "start from it with the same train.lora setting it was trained with")
    elif frozen is None:
        why = ("holds only the trainable weights of a run with frozen ones (LoRA adapters?), and this model trains "
               "every weight; use the config it was trained with (its train.lora)")
    else:
        why = ("was trained on other frozen weights (another base model: its hash "
               f"{saved[:12]}..., this model's {frozen[:12]}...); adapters only fit the base they were trained "
               "on: build the same base (model.pretrained_path / model.config / seed)")
    raise CheckpointError(f"{checkpoint} {why}", checkpoint / manifest.META)


def save(run: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv,
         keep: int, frozen: str | None = None, rows: list[dict[str, Any]] | None = None) -> Path:
    """Write the checkpoint after ``step`` steps on every rank; keep the newest ``keep``; return its folder.
    ``frozen`` is the hash of the model's frozen weights (none saved), recorded as ``frozen_sha256``; ``rows``
    (rank 0) are the run's metrics rows of steps 1 to ``step``, kept in ``meta.json`` for a resume from it
    (``folder.saved_rows``). A disk that is full, read-only
    or unwritable is a :class:`StorageError` with the ``.partial`` folder removed (never taken for a checkpoint)."""
    try:
        return _save(run, step, model, optimizer, env, keep, frozen, rows)
    except BaseException as exc:  # torch's CheckpointException is a BaseException
        cause = storage_cause(exc)
        if cause is None:
            raise
        # its room is free again
        shutil.rmtree(run / CHECKPOINTS_FOLDER / f"step_{step:07d}.partial", ignore_errors=True)
        newest = latest(run)
        kept = f"the newest complete one is {newest.name}" if newest is not None else "no complete one is there yet"
        raise storage_error(cause, f"the checkpoint after step {step} (the half-written one was removed; {kept})",
                            run) from cause


def _save(run: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv,
          keep: int, frozen: str | None, rows: list[dict[str, Any]] | None) -> Path:
    import torch.distributed.checkpoint as dcp  # slow to import: only when a run saves
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from ligerkit.train.run import safe_load

    began = time.perf_counter()
    final = run / CHECKPOINTS_FOLDER / f"step_{step:07d}"
    partial = final.with_name(final.name + ".partial")
    if env.main:
        shutil.rmtree(partial, ignore_errors=True)  # a save that was killed before
        partial.mkdir(parents=True)
    _barrier(env)
    model_state, optim_state = get_state_dict(model, optimizer, options=_options())
    with safe_load.single_process_quiet():
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(partial))
    write_rng(partial / file_name(env.rank))
    _barrier(env)
    manifest.write_share(partial, env.rank, env.world_size)
    _barrier(env)
    if env.main:
        files = manifest.gather(partial, env.world_size)
        meta = {"format": FORMAT, "step": step, "world_size": env.world_size,
                "save_seconds": round(time.perf_counter() - began, 3), "files": files}
        if frozen is not None:
            meta["frozen_sha256"] = frozen
        if rows is not None:
            meta["metrics"] = rows
        (partial / manifest.META).write_text(json.dumps(meta, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        for old in complete(run)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(env)
    return final


def read_meta(checkpoint: Path) -> dict[str, Any]:
    """``meta.json`` of a checkpoint, checked: its step is its folder's, its world size a positive count.
    :class:`CheckpointFileError` otherwise."""
    path = checkpoint / manifest.META
    if not path.is_file():
        raise CheckpointFileError(path, "is missing (an emptied or damaged checkpoint)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointFileError(path, f"is not JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise CheckpointFileError(path, "is not a JSON object")
    step, world = meta.get("step"), meta.get("world_size")
    if type(step) is not int or step != step_of(checkpoint):
        raise CheckpointFileError(path, f"says step {step!r}, but its folder is {checkpoint.name}")
    if type(world) is not int or world < 1:
        raise CheckpointFileError(path, f"says world_size {world!r}")
    if meta.get("format", 1) not in (1, FORMAT):
        raise CheckpointFileError(path, f"has format {meta.get('format')!r}, newer than this ligerkit reads; upgrade")
    return meta


def _rng_file(checkpoint: Path, meta: dict[str, Any], env: DistEnv) -> Path | None:
    """This rank's random-stream file when the world size is the one that saved (else none is restored)."""
    if meta["world_size"] != env.world_size:
        return None
    if meta.get("format", 1) == FORMAT:
        return checkpoint / file_name(env.rank)
    legacy = checkpoint / file_name(env.rank, legacy=True)
    return legacy if legacy.is_file() else None


def _problem(checkpoint: Path, env: DistEnv) -> tuple[str, str] | None:
    """This rank's first finding in ``checkpoint`` as (file, reason), or ``None``."""
    from ligerkit.train.run import safe_load  # imports DCP, slow: only when resuming

    try:
        meta = read_meta(checkpoint)
        if meta.get("format", 1) == FORMAT:
            manifest.check(checkpoint, meta.get("files"), env.rank, env.world_size)
        safe_load.check_storage(checkpoint, safe_load.read_metadata(checkpoint / safe_load.METADATA))
        rng = _rng_file(checkpoint, meta, env)
        if rng is not None:
            read_rng(rng)
    except CheckpointFileError as exc:
        return str(exc.file), exc.reason
    except OSError as exc:  # a file that vanished or cannot be opened half-way through the checks
        return str(exc.filename or checkpoint), f"cannot be read ({exc.strerror or exc})"
    return None


def _agreed(problem: tuple[str, str] | None, env: DistEnv) -> list[tuple[str, str]]:
    """Every rank's finding, the same list on every rank (so every rank picks the same checkpoint)."""
    if not (env.distributed and dist.is_initialized()):
        return [problem] if problem else []
    everyone: list[tuple[str, str] | None] = [None] * env.world_size
    dist.all_gather_object(everyone, problem)
    return sorted({p for p in everyone if p})


def usable(run: Path, env: DistEnv) -> Path:
    """The newest checkpoint of ``run`` whose every file checks out (on every rank). A damaged newer one
    is skipped with a warning naming the file and why; none intact is a :class:`CheckpointError`."""
    found = complete(run)
    if not found:
        raise CheckpointError(f"{run} holds no complete checkpoint to resume from (checkpoints are written every "
                              "train.run.checkpoint_every steps and at a graceful stop); start a new run without --resume")
    skipped: list[tuple[str, str]] = []
    for candidate in reversed(found):
        problems = _agreed(_problem(candidate, env), env)
        if not problems:
            if env.main and read_meta(candidate).get("format", 1) != FORMAT:
                log.warning("%s was written before checkpoints carried a manifest: its files are read through the "
                            "restricted loaders, but their checksums cannot be checked", candidate)
            return candidate
        file, reason = problems[0]
        skipped.append((file, reason))
        if env.main:
            log.warning("checkpoint %s is damaged and skipped (%s: %s); trying the one before it (nothing is deleted)",
                        candidate.name, file, reason)
    raise CheckpointError(f"no intact checkpoint in {run / CHECKPOINTS_FOLDER}: "
                          + "; ".join(f"{f}: {r}" for f, r in skipped)
                          + ". Restore the named files from a copy and resume again, or start a new run without "
                          "--resume", Path(skipped[0][0]))


def load(checkpoint: Path, model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv,
         frozen: str | None = None) -> int:
    """Load a checkpoint into ``model`` and ``optimizer`` (resharded to this world size) through the
    restricted loaders; return the steps it holds. The random streams come back when the world size is
    the one that saved it; ``frozen`` must be the hash the checkpoint's frozen weights had
    (:func:`check_frozen`). Call :func:`usable` first: it checks every file, this only reads."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from ligerkit.train.run import safe_load  # imports DCP, slow: only when resuming

    meta = read_meta(checkpoint)
    check_frozen(checkpoint, meta, frozen)
    model_state, optim_state = get_state_dict(model, optimizer, options=_options())
    state = {"model": model_state, "optim": optim_state}
    safe_load.load_state(checkpoint, state)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=_options(loading=True))
    rng = _rng_file(checkpoint, meta, env)
    if rng is not None:
        set_rng_state(read_rng(rng))
    return int(meta["step"])


def weights_source(path: Path, env: DistEnv) -> Path:
    """The checkpoint ``--init-from PATH`` names: a run folder (its newest intact checkpoint) or one
    ``checkpoints/step_N`` folder (checked like a resume's); :class:`CheckpointError` otherwise."""
    if (path / CHECKPOINTS_FOLDER).is_dir() or (path / CONFIG_FILE).is_file():
        return usable(path, env)
    if step_of(path) is None or not path.is_dir():
        raise CheckpointError(f"--init-from {path}: give a run folder or one of its checkpoints/step_N folders")
    problems = _agreed(_problem(path, env), env)
    if problems:
        file, reason = problems[0]
        raise CheckpointError(f"--init-from {path}: {file} {reason}; give another checkpoint", Path(file))
    return path


def load_weights(checkpoint: Path, model: nn.Module, frozen: str | None = None) -> int:
    """Only the model's trainable weights of ``checkpoint``, through the restricted loaders (a new run
    starting from them: no optimizer state, no random streams, step 0; ``frozen`` as for :func:`load`);
    returns the step they were saved at."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from ligerkit.train.run import safe_load  # imports DCP, slow: only when asked

    meta = read_meta(checkpoint)
    check_frozen(checkpoint, meta, frozen)
    state = {"model": get_model_state_dict(model, options=_options())}
    safe_load.load_state(checkpoint, state)
    set_model_state_dict(model, state["model"], options=_options(loading=True))
    return int(meta["step"])
