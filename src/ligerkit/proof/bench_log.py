"""``ligerkit bench --resume``: each finished run of a bench, kept as it ends, so a bench stopped part way
(a job's time limit, a lost machine) continues where it stopped instead of starting over.

``bench_runs.jsonl`` in the bench's ``--out`` folder starts with the bench's identity (the config file's
bytes, the ``--set`` lines, the arms, steps, warm-up, rounds, GPUs per arm, loss reference, the
machine: torch and the device's name, the installed torch, transformers and liger-kernel versions, and
a hash of ligerkit's own source: a default changed between the two invocations is a difference, and a
hash of the recipe's own Python files: its engine, model and data code, which lie outside the package);
every later line is one finished arm run of one round (its
summary, or why it did not fit) or the float32 loss reference. A resume reads the runs back only when
the identity is the same, key for key, and otherwise refuses, naming what differs: runs measured under
another config or on another machine are never mixed into one table. The file holds numbers only:
nothing in it is run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ligerkit.errors import LigerKitError, RecipeError
from ligerkit.probe.verdict_cache import code_version, source_digest, versions
from ligerkit.train.config.loading import raw_config
from ligerkit.train.recipe.loading import recipe_root
from ligerkit.whole_files import write_whole

LOG_NAME = "bench_runs.jsonl"


def bench_identity(config: Path, overrides: Sequence[str], arms: Sequence[str], steps: int, warmup: int,
                   repeats: int, nproc: int, loss_reference: str, machine: Mapping[str, str]) -> dict[str, Any]:
    """What makes two bench invocations the same measurement (the first line of the log)."""
    # the file's name and bytes, not its path: a resume may run from another folder or a fresh checkout
    return {"config": Path(config).name, "config_sha256": hashlib.sha256(Path(config).read_bytes()).hexdigest(),
            "overrides": list(overrides), "arms": list(arms), "steps": steps, "warmup": warmup, "repeats": repeats,
            "nproc": nproc, "loss_reference": loss_reference, "machine": dict(machine),
            "versions": versions(), "ligerkit_code": code_version(), "recipe_code": recipe_code(config, overrides)}


def recipe_code(config: Path, overrides: Sequence[str] = ()) -> str | None:
    """A hash of the Python files of the recipe ``config`` trains (every ``*.py`` of its folder but those
    under ``tests/``, hidden folders such as ``.venv`` and installed packages), by their paths inside the
    folder; ``None`` when the config names no recipe folder."""
    try:
        recipe = raw_config(config, list(overrides)).get("recipe")
        root = recipe_root(config, recipe if isinstance(recipe, str) else None)
    except RecipeError:
        return None
    def own(path: Path) -> bool:  # tests, caches, virtual environments and installed packages are not its code
        folders = path.relative_to(root).parts[:-1]
        return not (_SKIPPED & set(folders) or any(part.startswith(".") for part in folders))

    return source_digest(root, [path for path in sorted(root.rglob("*.py")) if own(path)])


_SKIPPED = {"tests", "__pycache__", "site-packages", "dist-packages", "node_modules"}


class BenchLog:
    """The runs of one bench, appended as each ends (``record``); ``done`` holds those read back."""

    def __init__(self, out: Path, identity: Mapping[str, Any], resume: bool):
        self.path = Path(out) / LOG_NAME
        self.done: dict[tuple[int, str], dict[str, Any]] = {}
        rows: list[dict[str, Any]] = [{"identity": dict(identity)}]
        if resume:
            self.done = _read(self.path, identity)
            rows += [{"round": r, "arm": a, **outcome} for (r, a), outcome in self.done.items()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # written whole, then renamed: a line cut off by the stop is gone before anything is appended
        write_whole(self.path, "".join(json.dumps(row) + "\n" for row in rows), durable=True)

    def record(self, round_: int, arm: str, outcome: Mapping[str, Any]) -> None:
        """Keep one finished run (``{"summary": ...}`` or ``{"did_not_fit": ...}``; the float32 reference
        is ``arm="float32"``), flushed to disk before the bench goes on."""
        self.done[(round_, arm)] = dict(outcome)
        _append(self.path, [{"round": round_, "arm": arm, **outcome}])


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def check_resumable(out: Path, identity: Mapping[str, Any]) -> None:
    """Refuse ``--resume`` before anything runs (the GPU check included) when ``out`` holds no bench log
    to continue (none, one that does not start with a bench's identity, a line that is not a run) or one
    of another identity; ``identity``'s ``machine``, known only after the GPU check, is compared later."""
    path = Path(out) / LOG_NAME
    _runs(path, _rows(path), identity, skip=("machine",))


def _read(path: Path, identity: Mapping[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    """The runs of ``path`` after checking its identity against ``identity``."""
    return _runs(path, _rows(path), identity)


def _same_identity(path: Path, before: Mapping[str, Any], identity: Mapping[str, Any],
                   skip: Sequence[str] = ()) -> None:
    changed = sorted(k for k in {*before, *identity} if k not in skip and before.get(k) != identity.get(k))
    if changed:
        raise LigerKitError(f"--resume: {path} was measured with other {', '.join(changed)} ("
                            + "; ".join(f"{k}: {before.get(k)!r} then, {identity.get(k)!r} now" for k in changed)
                            + "); rerun with the same command, or without --resume to start over")


def _rows(path: Path) -> list[Any]:
    """The whole lines of ``path``, the first a bench's identity."""
    if not path.is_file():
        raise LigerKitError(f"--resume: {path} does not exist; run the bench without --resume first (its --out "
                            "folder keeps each finished run there)")
    lines = path.read_text().splitlines()
    try:
        rows = [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError:
        # a run cut off while its line was written: the lines before it are whole
        rows = []
        for line in lines:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    if not rows or not isinstance(rows[0], dict) or not isinstance(rows[0].get("identity"), dict):
        raise LigerKitError(f"--resume: {path} does not start with a bench's identity; run without --resume")
    return rows


def _runs(path: Path, rows: list[Any], identity: Mapping[str, Any],
          skip: Sequence[str] = ()) -> dict[tuple[int, str], dict[str, Any]]:
    """The runs after the identity line (the same as ``identity`` but for the keys in ``skip``), each
    checked to be one."""
    _same_identity(path, rows[0]["identity"], identity, skip)
    done = {}
    for row in rows[1:]:
        outcome = {k: v for k, v in row.items() if k not in ("round", "arm")} if isinstance(row, dict) else {}
        whole = (isinstance(outcome.get("summary"), dict) and {"losses", "tokens_per_s"} <= set(outcome["summary"])
                 or isinstance(outcome.get("did_not_fit"), str) or isinstance(outcome.get("reference"), dict))
        if not (isinstance(row, dict) and isinstance(row.get("round"), int) and isinstance(row.get("arm"), str)
                and whole):
            raise LigerKitError(f"--resume: {path} holds a line that is not a bench run ({json.dumps(row)[:120]}); "
                                "run without --resume to start over")
        done[(row["round"], row["arm"])] = outcome
    return done
