"""Recorded sweep of ``ligerkit suggest MODULE --json [--gpu]`` over every transformers family.

Not a CI test: a run over every ``transformers.models.X.modeling_Y`` module (found with pkgutil), one
subprocess per module (``python -m ligerkit suggest MODULE --json`` with ``--gpu``, else ``--no-gpu``),
each with its own timeout. Every module adds ONE JSON line to the output file (written with flush +
fsync, so a killed run loses at most the modules in flight): the module, its family, the exit code,
the seconds it took, the parsed JSON (or the stderr tail when it failed or printed no JSON), and the
module's top model classes (read here, for the in-place audit). A module that does not import is
recorded with why (``"skipped": "import"``) and not run.

Every line records the versions it ran with (``stack``: torch, transformers, liger-kernel); a file
holding lines of other versions is refused, before anything runs or is copied into it.

The sweep runs in parts and resumes: a module already in the output file is skipped, ``--deadline``
stops starting modules once that much wall time has passed (modules still running then get
``--grace`` more seconds; one killed by that limit is not recorded, so the next call runs it again),
``--limit`` stops after that many new modules, ``--only`` picks families or modules, ``--jobs`` runs
several subprocesses at once (each with its share of the cores as ``OMP_NUM_THREADS``, unless that is set).
Rerun the same command until it prints ``sweep complete``.

On the CPU (about 7 s a module, ~500 modules; a sweep of another checkout: ``PYTHONPATH=/that/src``,
the subprocesses inherit it; ``--dry-run`` lists the modules it would run)::

    python benchmarks/suggest_sweep.py --out sweep_cpu.jsonl --jobs 1
    python benchmarks/suggest_sweep.py --out sweep_cpu.jsonl --only qwen3,llama,olmo2
    python benchmarks/suggest_sweep.py --summary sweep_cpu.jsonl             # counts, in-place audit
    python benchmarks/suggest_sweep.py --summary sweep_cpu.jsonl --markdown  # the same, as tables for docs

On the GPU machine (10 minutes a command; ``$OUT`` is empty at each call and comes back, so pass the
previous call's file with ``--resume-from``: its lines are copied into ``--out`` first)::

    python3 benchmarks/suggest_sweep.py --gpu --out $OUT/sweep_gpu.jsonl --deadline 500
    python3 benchmarks/suggest_sweep.py --gpu --resume-from shared/sweep_gpu.jsonl --out $OUT/sweep_gpu.jsonl --deadline 500 --jobs 4
    python3 benchmarks/suggest_sweep.py --summary sweep_gpu.jsonl --markdown

The summary counts modules swept, modules with a map (at least one candidate with verdict
``match``), exit codes, outcomes, for ``--gpu`` runs the gradient verdicts (PASS / PARTIAL / FAIL, or
not run and why), and audits every matched candidate whose replacement writes in place (the catalog
entries with ``in_place``: ``LigerRMSNorm``, ``liger_rotary_pos_emb``, ``liger_multimodal_rotary_pos_emb``):
was its in-place write checked in the whole model, in a smaller model, or not at all? Two generations
of ``suggest`` JSON are read:

- new: each candidate has ``"in_place"`` (null, or ``{"writes", "verdict": safe|hazard|unproven,
  "model", "whole_model", "reason"}``); ``"gradients"`` has ``"verdict"`` (PASS / PARTIAL / FAIL) and
  ``"coverage"``; exit codes 0 PASS, 1 FAIL or error, 3 no GPU, 4 PARTIAL;
- old (ligerkit 9ddf404): no ``in_place`` field; the reason says ``its in-place write is safe here (in
  <Class>, ...)`` or ``its in-place write was not checked: ...``. The check ran in the whole model when
  ``<Class>`` is one of the module's top model classes (the highest ranked of *ForCausalLM >
  *ForConditionalGeneration > *LMHeadModel > *Model defined in the module; for *Model the shortest
  names), in a smaller model otherwise (a MoE block, a decoder layer, the base model under a causal LM).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pkgutil
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

Record = dict[str, Any]

STDERR_TAIL = 2000  # characters of stderr kept for a failed module
TOP_RANK = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")
WHOLE, SMALLER, NOT_CHECKED, HAZARD, UNKNOWN = "whole model", "smaller model", "not checked", "hazard", "unknown"
AUDIT_ORDER = (WHOLE, SMALLER, NOT_CHECKED, HAZARD, UNKNOWN)
EXIT_WORDS = {0: "0 (ok / PASS)", 1: "1 (FAIL or error)", 3: "3 (no GPU)", 4: "4 (PARTIAL)"}
_SAFE_OLD = re.compile(r"in-place write is safe here \(in (\w+)")
_NOT_CHECKED_OLD = "in-place write was not checked"
_ERROR_LINE = re.compile(r"^error: (\w+): ", re.MULTILINE)  # how the CLI prints a ligerkit error
_TRACEBACK_LAST = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt)):", re.MULTILINE)


# ---------------------------------------------------------------- modules


@dataclass(frozen=True)
class Target:
    """One modeling module to sweep."""

    module: str  # transformers.models.X.modeling_Y
    family: str  # X

    @property
    def short(self) -> str:
        """``modeling_Y``."""
        return self.module.rsplit(".", 1)[1]


def enumerate_modules() -> list[Target]:
    """Every ``transformers.models.X.modeling_Y`` module, without importing any of them."""
    spec = importlib.util.find_spec("transformers.models")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed")
    found = []
    for root in spec.submodule_search_locations:
        for package in pkgutil.iter_modules([root]):
            if not package.ispkg:
                continue
            for sub in pkgutil.iter_modules([os.path.join(root, package.name)]):
                if sub.name.startswith("modeling_") and not sub.ispkg:
                    found.append(Target(f"transformers.models.{package.name}.{sub.name}", package.name))
    return sorted(set(found), key=lambda t: t.module)


def select(targets: Iterable[Target], only: str | None) -> list[Target]:
    """The targets ``--only`` names: family names (``qwen3``), module names (full, ``modeling_qwen3`` or
    ``qwen3_moe`` for ``modeling_qwen3_moe``); all of them when ``only`` is empty. An unknown name is an error."""
    targets = list(targets)
    if not only:
        return targets
    if only.startswith("@"):  # a file of names, one a line or comma-separated
        only = Path(only[1:]).read_text().replace("\n", ",")
    names = [n.strip() for n in only.split(",") if n.strip()]
    chosen = [t for t in targets if any(_names(t, n) for n in names)]
    unknown = [n for n in names if not any(_names(t, n) for t in targets)]
    if unknown:
        raise SystemExit(f"--only: no transformers modeling module or family named {', '.join(unknown)}")
    return chosen


def _names(target: Target, name: str) -> bool:
    return name in (target.family, target.module, target.short, target.short.removeprefix("modeling_"))


def top_model_classes(module: Any) -> list[str]:
    """The module's top model classes: the highest ranked of *ForCausalLM > *ForConditionalGeneration >
    *LMHeadModel > *Model among the ``nn.Module`` classes it defines (for *Model, the shortest names:
    ``XModel`` over ``XTextModel``). Empty when it defines none."""
    from torch import nn

    names = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, nn.Module)
             and v.__module__ == module.__name__]
    return top_of(names)


def top_of(names: Iterable[str]) -> list[str]:
    """:func:`top_model_classes` over class names."""
    names = [n for n in names if not n.endswith(("PreTrainedModel", "PretrainedModel"))]
    for suffix in TOP_RANK:
        group = [n for n in names if n.endswith(suffix) and n != suffix]
        if suffix == "Model":
            group = [n for n in group if not n.endswith("LMHeadModel")]
            shortest = min((len(n) for n in group), default=0)
            group = [n for n in group if len(n) == shortest]
        if group:
            return sorted(group)
    return []


def import_module(target: Target) -> tuple[Any, str | None]:
    """Import a target here: the module, or ``None`` and why it does not import."""
    try:
        return importlib.import_module(target.module), None
    except BaseException as exc:  # noqa: BLE001 - any failure to import is recorded, never fatal
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, f"{type(exc).__name__}: {exc}"[:STDERR_TAIL]


# ---------------------------------------------------------------- the output file


def read_records(path: Path) -> list[Record]:
    """Every complete JSON line of ``path`` (a partial last line, from a killed run, is ignored)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "module" in record:
            records.append(record)
    return records


def latest(records: Iterable[Record]) -> dict[str, Record]:
    """The last record of each module, in first-seen order (a rerun replaces an earlier line)."""
    found: dict[str, Record] = {}
    for record in records:
        found.pop(record["module"], None)
        found[record["module"]] = record
    return found


def repair(path: Path) -> None:
    """Cut a partial last line (a run killed while writing) so that appended lines start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def append(handle: TextIO, record: Record) -> None:
    """Write one record as one line, flushed and fsynced."""
    handle.write(json.dumps(record, sort_keys=False) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


STACK_PACKAGES = ("torch", "transformers", "liger-kernel")
"""The packages whose versions decide a module's result: every line of one sweep file runs with the same."""


def stack_now() -> dict[str, str | None]:
    """The versions of :data:`STACK_PACKAGES` this interpreter imports (the suggest subprocesses inherit its
    path, so they run with the same)."""
    from ligerkit.environment import installed

    versions = installed()
    return {name: versions.get(name) for name in STACK_PACKAGES}


def check_stack(records: Iterable[Record], stack: dict[str, str | None], where: str | Path) -> None:
    """Refuse (``SystemExit``) a file whose lines ran with other versions than ``stack``: one file, one
    stack (``ligerkit.proof.record_setting.setting_conflict`` says what differs). Lines from before the
    sweep recorded its versions carry none and are taken as they are."""
    from ligerkit.proof.record_setting import setting_conflict

    for record in records:
        differs = setting_conflict([record.get("stack")], stack)
        if differs:
            raise SystemExit(f"{where} holds runs with other versions ({record['module']}: {differs}); its results "
                             "and this run's would not compare, so nothing was run or copied: use another file for "
                             "this sweep, or run it with the versions the file was made with")


def resume_from(source: Path, out: Path) -> int:
    """Copy the lines of ``source`` (an earlier call's output) for modules ``out`` lacks into ``out``;
    returns how many were copied. Either file holding runs with other versions than this interpreter's
    is refused before anything is copied (:func:`check_stack`)."""
    if not source.exists():
        raise SystemExit(f"--resume-from {source}: no such file")
    stack = stack_now()
    check_stack(read_records(source), stack, source)
    check_stack(read_records(out), stack, out)
    if out.exists() and source.resolve() == out.resolve():
        return 0
    repair(out)
    have = set(latest(read_records(out)))
    new = [r for r in latest(read_records(source)).values() if r["module"] not in have]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as handle:
        for record in new:
            append(handle, record)
    return len(new)


def done_modules(records: Iterable[Record], gpu: bool, retry_timeouts: bool = False,
                 stack: dict[str, str | None] | None = None) -> set[str]:
    """Modules whose latest record means "done" (a timeout too, unless ``retry_timeouts``). A file that
    holds runs of the other kind (``--gpu`` or not), or with other versions than ``stack`` (when given),
    is refused: one file, one kind of sweep, one stack."""
    records = list(records)
    if stack is not None:
        check_stack(records, stack, "the output file")
    done = set()
    for module, record in latest(records).items():
        if record.get("skipped") is None and bool(record.get("gpu")) != gpu:
            kind = "with --gpu" if record.get("gpu") else "without --gpu"
            raise SystemExit(f"the output file holds runs {kind} ({module}); use another file for this sweep")
        if retry_timeouts and record.get("timed_out"):
            continue
        done.add(module)
    return done


# ---------------------------------------------------------------- running one module


@dataclass(frozen=True)
class Options:
    """How each module is run."""

    gpu: bool = False
    timeout: float = 300.0
    python: str = sys.executable
    threads: int | None = None  # each subprocess's OMP_NUM_THREADS (None: the environment's, inherited)


def threads_per_job(jobs: int, environ: Mapping[str, str] = os.environ, cores: int | None = None) -> int | None:
    """Each subprocess's share of the cores when ``jobs`` run at once (torch takes every core's thread by
    default, so N subprocesses would contend for them), or ``None`` for one job or an ``OMP_NUM_THREADS``
    the caller set (theirs, inherited)."""
    if jobs <= 1 or environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (cores or os.cpu_count() or 1) // jobs)


def command(target: Target, options: Options) -> list[str]:
    """The suggest command line for one module."""
    return [options.python, "-m", "ligerkit", "suggest", target.module, "--json",
            "--gpu" if options.gpu else "--no-gpu"]


def run_module(target: Target, options: Options, hard_stop: float | None, tops: list[str]) -> Record | None:
    """Run suggest on one module in a subprocess (its own process group, killed whole on a timeout).

    Returns its record, or ``None`` when it was killed by ``hard_stop`` (the call's own time limit,
    a ``time.monotonic()`` value) before its own timeout: that module is left for the next call.
    """
    limit = options.timeout
    if hard_stop is not None:
        limit = min(limit, hard_stop - time.monotonic())
        if limit <= 0:
            return None
    start = time.monotonic()
    env = None if options.threads is None else {**os.environ, "OMP_NUM_THREADS": str(options.threads)}
    proc = subprocess.Popen(command(target, options), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    if timed_out and seconds < options.timeout - 1e-3:
        return None  # stopped by the call's deadline, not by the module's own timeout
    parsed = _parse_json(stdout)
    record: Record = {"module": target.module, "family": target.family, "gpu": options.gpu,
                      "exit_code": None if timed_out else proc.returncode, "timed_out": timed_out,
                      "seconds": round(seconds, 2), "json": parsed, "top_model_classes": tops}
    if timed_out or proc.returncode != 0 or parsed is None:
        record["stderr_tail"] = (stderr or "")[-STDERR_TAIL:]
        if parsed is None and stdout and stdout.strip():
            record["stdout_tail"] = stdout[-STDERR_TAIL:]
    record["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return record


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _parse_json(stdout: str | None) -> Any:
    """The JSON object suggest printed, or ``None``."""
    if not stdout or not stdout.strip():
        return None
    text = stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        begin = text.find("{")  # a stray line before the object
        if begin > 0:
            try:
                return json.loads(text[begin:])
            except json.JSONDecodeError:
                return None
        return None


def skipped_record(target: Target, why: str, seconds: float, gpu: bool) -> Record:
    """The record of a module that does not import."""
    return {"module": target.module, "family": target.family, "gpu": gpu, "skipped": "import", "error": why,
            "exit_code": None, "timed_out": False, "seconds": round(seconds, 2), "json": None,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# ---------------------------------------------------------------- the sweep


@dataclass
class SweepResult:
    """What one call of the sweep did."""

    ran: int = 0
    skipped_import: int = 0
    left: int = 0  # selected modules still without a record (deadline, limit, or killed at the deadline)
    stopped_by: str | None = None  # "deadline" | "limit" | None


def sweep(targets: Sequence[Target], out: Path, options: Options, *, jobs: int = 1, limit: int | None = None,
          deadline: float | None = None, grace: float = 60.0, retry_timeouts: bool = False,
          log: TextIO | None = None) -> SweepResult:
    """Run every target ``out`` lacks and append one line each (progress on ``log``, default stderr);
    see the module docstring."""
    log = sys.stderr if log is None else log
    begin = time.monotonic()
    hard_stop = begin + deadline + grace if deadline is not None else None
    out.parent.mkdir(parents=True, exist_ok=True)
    repair(out)
    stack = stack_now()
    done = done_modules(read_records(out), options.gpu, retry_timeouts, stack)
    todo = [t for t in targets if t.module not in done]
    result = SweepResult()
    print(f"sweep: {len(targets)} selected, {len(targets) - len(todo)} already in {out}, {len(todo)} to run"
          f" (jobs {jobs}" + (f" of {options.threads} thread(s) each" if options.threads else "")
          + f", timeout {options.timeout:g} s"
          + (f", deadline {deadline:g} s + grace {grace:g} s" if deadline is not None else "") + ")",
          file=log, flush=True)
    finished: set[str] = set()
    started = 0
    with out.open("a", encoding="utf-8") as handle, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        running: dict[Future[Record | None], Target] = {}

        def collect(block: bool) -> None:
            if not running:
                return
            ready, _ = wait(list(running), timeout=None if block else 0, return_when=FIRST_COMPLETED)
            for future in ready:
                target = running.pop(future)
                record = future.result()
                if record is None:
                    print(f"  {target.module}: stopped at the call's deadline; left for the next call",
                          file=log, flush=True)
                    continue
                append(handle, {**record, "stack": stack})
                finished.add(target.module)
                result.ran += 1
                print(f"  [{len(done) + len(finished)}/{len(targets)}] {_line(record)}", file=log, flush=True)

        for target in todo:
            if limit is not None and started >= limit:
                result.stopped_by = "limit"
                break
            if deadline is not None and time.monotonic() - begin >= deadline:
                result.stopped_by = "deadline"
                break
            while len(running) >= max(1, jobs):
                collect(block=True)
            if deadline is not None and time.monotonic() - begin >= deadline:
                result.stopped_by = "deadline"
                break
            t0 = time.monotonic()
            module, why = import_module(target)
            if module is None:
                append(handle, {**skipped_record(target, why or "?", time.monotonic() - t0, options.gpu), "stack": stack})
                finished.add(target.module)
                result.skipped_import += 1
                print(f"  {target.module}: does not import ({(why or '')[:120]})", file=log, flush=True)
                continue
            tops = top_model_classes(module)
            running[pool.submit(run_module, target, options, hard_stop, tops)] = target
            started += 1
        while running:
            collect(block=True)
    result.left = len([t for t in todo if t.module not in finished])
    if result.left:
        print(f"sweep: {result.ran} run, {result.skipped_import} did not import; {result.left} left"
              + (f" (stopped by the {result.stopped_by})" if result.stopped_by else "")
              + ": rerun the same command to continue", file=log, flush=True)
    else:
        print(f"sweep complete: {result.ran} run now, {result.skipped_import} did not import; "
              f"{len(targets)} selected modules in {out}", file=log, flush=True)
    return result


def _line(record: Record) -> str:
    data = record.get("json") or {}
    matched = sum(1 for c in data.get("candidates", []) if c.get("verdict") == "match")
    grads = gradient_verdict(record) if record.get("gpu") else None
    return (f"{record['module']}: exit {record.get('exit_code')}{' (timeout)' if record.get('timed_out') else ''}, "
            f"{record.get('seconds')} s, {matched} matched" + (f", gradients {grads}" if grads else "")
            + ("" if data else f", {outcome(record)}"))


# ---------------------------------------------------------------- classification


def in_place_replacements() -> frozenset[str]:
    """The catalog's replacements that write in place (read from ``ligerkit.probe.catalog.CATALOG``)."""
    from ligerkit.probe.catalog import CATALOG

    return frozenset(entry.name for entry in CATALOG if entry.in_place)


def error_kind(record: Record) -> str:
    """A short name for why a module produced no result: ``timeout``, ``import``, ``no GPU``, the ligerkit
    error type printed (``error: SuggestError``), or the exception a traceback ended with."""
    if record.get("skipped"):
        return f"{record['skipped']}: {str(record.get('error', '')).split(':', 1)[0]}"
    if record.get("timed_out"):
        return "timeout"
    if record.get("exit_code") == 3:
        return "no GPU"
    tail = str(record.get("stderr_tail") or "")
    found = _ERROR_LINE.findall(tail)
    if found:
        return f"error: {found[-1]}"
    found = _TRACEBACK_LAST.findall(tail)
    if found:
        return f"crash: {found[-1].rsplit('.', 1)[-1]}"
    return f"exit {record.get('exit_code')}"


def matched(record: Record) -> list[dict[str, Any]]:
    """The candidates of a record with verdict ``match``."""
    data = record.get("json") or {}
    return [c for c in data.get("candidates") or [] if c.get("verdict") == "match"]


def outcome(record: Record) -> str:
    """``map`` (>= 1 match), ``no match``, or :func:`error_kind`."""
    data = record.get("json")
    if isinstance(data, dict) and "candidates" in data:
        return "map" if matched(record) else "no match"
    return error_kind(record)


def gradient_verdict(record: Record) -> str:
    """PASS / PARTIAL / FAIL from a ``--gpu`` record (new: ``verdict``; old: ``passed``), or
    ``not run: <why>``."""
    data = record.get("json")
    grads = data.get("gradients") if isinstance(data, dict) else None
    if isinstance(grads, dict):
        if grads.get("verdict"):
            return str(grads["verdict"])
        if "passed" in grads:
            return "PASS" if grads["passed"] else "FAIL"
        return "unreadable"
    if isinstance(data, dict) and "candidates" in data and record.get("exit_code") == 0:
        return "not run: no gradients in the JSON"
    return f"not run: {error_kind(record)}"


@dataclass(frozen=True)
class Audit:
    """One matched candidate whose replacement writes in place, and where its in-place check ran."""

    module: str
    family: str
    symbol: str
    replacement: str
    category: str  # WHOLE | SMALLER | NOT_CHECKED | HAZARD | UNKNOWN
    model: str | None
    generation: str  # "new" (in_place field) | "old" (read from the reason)
    official: bool  # one of Liger's family helpers patches the module
    detail: str


def classify(candidate: dict[str, Any], tops: Sequence[str] | None) -> tuple[str, str | None, str, str]:
    """Where a matched in-place candidate's check ran: (category, model class, generation, detail).

    New JSON: its ``in_place`` (safe + whole_model: whole; safe otherwise: smaller; unproven or null:
    not checked; hazard: hazard). Old JSON: the reason's ``safe here (in <Class>...`` is whole when
    ``<Class>`` is one of ``tops`` (the module's top model classes), smaller otherwise; ``was not
    checked`` is not checked.
    """
    reason = str(candidate.get("reason") or "")
    if "in_place" in candidate:
        info = candidate.get("in_place")
        if not isinstance(info, dict):
            return NOT_CHECKED, None, "new", "in_place is null for an in-place replacement"
        model, verdict = info.get("model"), info.get("verdict")
        detail = str(info.get("reason") or reason)
        if verdict == "safe":
            return (WHOLE if info.get("whole_model") else SMALLER), model, "new", detail
        if verdict == "unproven":
            return NOT_CHECKED, model, "new", detail
        if verdict == "hazard":
            return HAZARD, model, "new", detail
        return UNKNOWN, model, "new", detail
    found = _SAFE_OLD.search(reason)
    if found:
        model = found.group(1)
        return (WHOLE if tops and model in tops else SMALLER), model, "old", reason
    if _NOT_CHECKED_OLD in reason:
        return NOT_CHECKED, None, "old", reason[reason.find(_NOT_CHECKED_OLD):]
    return UNKNOWN, None, "old", reason


def audit(records: Iterable[Record], in_place: frozenset[str] | None = None) -> list[Audit]:
    """Every matched candidate, over ``records``, whose replacement writes in place, classified."""
    in_place = in_place_replacements() if in_place is None else in_place
    found = []
    for record in records:
        data = record.get("json") or {}
        tops = record.get("top_model_classes")
        if tops is None:  # a line written without it: read the module here
            module, _ = import_module(Target(record["module"], record.get("family", "")))
            tops = top_model_classes(module) if module is not None else []
        for candidate in matched(record):
            if candidate.get("replacement") not in in_place:
                continue
            category, model, generation, detail = classify(candidate, tops)
            found.append(Audit(record["module"], record.get("family", ""), str(candidate.get("symbol")),
                               str(candidate.get("replacement")), category, model, generation,
                               bool(data.get("official_helper")), detail))
    return found


# ---------------------------------------------------------------- summary


@dataclass
class Summary:
    """The counts of a sweep file (the latest line of each module)."""

    path: str
    records: int = 0
    swept: int = 0  # ran suggest (not skipped at import)
    skipped_import: int = 0
    maps: int = 0
    maps_official: int = 0  # maps of modules one of Liger's helpers patches
    map_families: set[str] = field(default_factory=set)
    map_families_bare: set[str] = field(default_factory=set)  # families with a map of a module no helper patches
    gpu: bool = False
    exit_codes: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    gradients: Counter[str] = field(default_factory=Counter)
    coverage: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (module, verdict, coverage)
    audits: list[Audit] = field(default_factory=list)
    # the call-site proof: matches by the verdict of their replay on the whole model's calls, and every
    # (module, symbol, replacement, sites, argument) whose probe matched but whose calls differ
    call_site_verdicts: Counter[str] = field(default_factory=Counter)
    call_site_differences: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    generations: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def summarize(records: Iterable[Record], path: str = "", in_place: frozenset[str] | None = None) -> Summary:
    """Counts and the in-place audit of a sweep's records (the latest record of each module counts)."""
    last = list(latest(records).values())
    summary = Summary(path, records=len(last))
    for record in last:
        summary.seconds += float(record.get("seconds") or 0.0)
        if record.get("skipped"):
            summary.skipped_import += 1
            summary.outcomes[outcome(record)] += 1
            continue
        summary.swept += 1
        summary.gpu = summary.gpu or bool(record.get("gpu"))
        code = "timeout" if record.get("timed_out") else str(record.get("exit_code"))
        summary.exit_codes[code] += 1
        summary.outcomes[outcome(record)] += 1
        data = record.get("json") or {}
        if matched(record):
            summary.maps += 1
            summary.maps_official += bool(data.get("official_helper"))
            summary.map_families.add(str(record.get("family")))
            if not data.get("official_helper"):
                summary.map_families_bare.add(str(record.get("family")))
        for candidate in data.get("candidates") or []:
            summary.generations["new" if "in_place" in candidate else "old"] += 1
            if candidate.get("verdict") == "match":
                calls = candidate.get("call_sites")
                summary.call_site_verdicts[calls.get("verdict", "?") if isinstance(calls, dict) else "not recorded"] += 1
            for name, calls in (candidate.get("differs_at_call_sites") or {}).items():
                first = (calls.get("differences") or [{}])[0]
                summary.call_site_differences.append((record["module"], str(candidate.get("symbol")), name,
                                                      ", ".join(first.get("sites") or []), str(first.get("argument"))))
        if record.get("gpu"):
            verdict = gradient_verdict(record)
            summary.gradients[verdict] += 1
            grads = data.get("gradients")
            if isinstance(grads, dict) and isinstance(grads.get("coverage"), dict):
                summary.coverage.append((record["module"], verdict, grads["coverage"]))
    summary.audits = audit(last, in_place)
    return summary


def _rows_counts(counter: Counter[str], words: dict[Any, str] | None = None) -> list[tuple[str, int]]:
    return [((words or {}).get(_int(k), k), n) for k, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]


def _int(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        return value


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], markdown: bool) -> list[str]:
    cells = [[str(c) for c in row] for row in rows]
    if markdown:
        esc = [[c.replace("|", "\\|") for c in row] for row in cells]
        return ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |",
                *("| " + " | ".join(row) + " |" for row in esc)]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    return ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
            *("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)]


def render(summary: Summary, markdown: bool = False) -> str:
    """The summary as plain text or as markdown tables."""
    head = "### " if markdown else ""
    lines = [f"{head}suggest sweep: {summary.path}", ""]
    generation = "/".join(f"{k} {n}" for k, n in sorted(summary.generations.items())) or "-"
    lines += _table(("count", "value"), [
        ("modules with a line", summary.records),
        ("modules swept (suggest ran)", summary.swept),
        ("modules that do not import", summary.skipped_import),
        ("modules with a map (>= 1 match)", summary.maps),
        ("  of which one of Liger's helpers patches", summary.maps_official),
        ("  of which no helper patches", summary.maps - summary.maps_official),
        ("families with a map", len(summary.map_families)),
        ("  with a map of a module no helper patches", len(summary.map_families_bare)),
        ("candidate JSON generation (candidates)", generation),
        ("seconds, all modules", f"{summary.seconds:.0f}"),
    ], markdown)
    lines += ["", f"{head}exit codes", ""]
    lines += _table(("exit code", "modules"), _rows_counts(summary.exit_codes, EXIT_WORDS), markdown)
    lines += ["", f"{head}outcomes", ""]
    lines += _table(("outcome", "modules"), _rows_counts(summary.outcomes), markdown)
    if summary.gpu:
        lines += ["", f"{head}gradient verdicts (--gpu)", ""]
        lines += _table(("verdict", "modules"), _rows_counts(summary.gradients), markdown)
        partial = [(m, v, c) for m, v, c in summary.coverage if v != "PASS" or c.get("compared") != c.get("total")]
        if partial:
            lines += ["", f"{head}coverage of verdicts that did not compare every tensor, or did not pass", ""]
            lines += _table(("module", "verdict", "model", "compared / total", "share", "not compared"), [
                (m, v, c.get("model"), f"{c.get('compared')} / {c.get('total')}",
                 f"{c.get('share', 0) or 0:.3f}", _short(", ".join(map(str, c.get("not_compared") or [])), 80))
                for m, v, c in partial], markdown)
    lines += ["", f"{head}call sites: printed matches by their replay on the whole model's calls", ""]
    lines += _table(("call-site verdict", "matches"), _rows_counts(summary.call_site_verdicts), markdown)
    lines += ["", f"{head}matches of the probe that differ at a recorded call site (left off, or another "
              f"replacement taken): {len(summary.call_site_differences)} in "
              f"{len({d[0] for d in summary.call_site_differences})} modules", ""]
    if summary.call_site_differences:
        lines += _table(("module", "symbol", "replacement", "first call site that differs", "argument"), [
            (m.rsplit(".", 1)[1], sym, rep, _short(sites, 70), _short(arg, 60))
            for m, sym, rep, sites, arg in sorted(summary.call_site_differences)], markdown)
    lines += ["", f"{head}in-place audit: matched swaps whose replacement writes in place", ""]
    by_category = Counter(a.category for a in summary.audits)
    def row(label: str, audits: list[Audit]) -> tuple[Any, ...]:
        bare = [a for a in audits if not a.official]
        return (label, len(audits), len({a.family for a in audits}), len({a.module for a in audits}),
                len(bare), len({a.family for a in bare}))

    lines += _table(("where its in-place check ran", "swaps", "families", "modules", "swaps (no helper)",
                     "families (no helper)"),
                    [row(c, [a for a in summary.audits if a.category == c])
                     for c in AUDIT_ORDER if by_category[c] or c in (WHOLE, SMALLER, NOT_CHECKED)]
                    + [row("total", summary.audits)], markdown)
    not_whole = [a for a in summary.audits if a.category != WHOLE]
    if not_whole:
        lines += ["", f"{head}in-place swaps not checked in the whole model", ""]
        lines += _table(("category", "family", "module", "symbol", "replacement", "checked in", "helper", "detail"), [
            (a.category, a.family, a.module.rsplit(".", 1)[1], a.symbol, a.replacement, a.model or "-",
             "yes" if a.official else "no", _short(a.detail, 140))
            for a in sorted(not_whole, key=lambda a: (AUDIT_ORDER.index(a.category), a.module, a.symbol))], markdown)
    return "\n".join(lines) + "\n"


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


# ---------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="output JSONL file (appended to; modules in it are skipped)")
    parser.add_argument("--gpu", action="store_true", help="run suggest --gpu (gradient proof on the GPU)")
    parser.add_argument("--only", help="comma-separated family names (qwen3) or module names (modeling_qwen3_moe), "
                                       "or @FILE with one name a line")
    parser.add_argument("--limit", type=int, help="stop after starting this many new modules")
    parser.add_argument("--deadline", type=float,
                        help="seconds of wall time after which no new module starts (e.g. 500 on the GPU machine)")
    parser.add_argument("--grace", type=float, default=60.0,
                        help="seconds after --deadline before modules in flight are killed and left for the next "
                             "call (default 60)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per module (default 300)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="parallel suggest subprocesses (default 1); each gets OMP_NUM_THREADS = cores / jobs "
                             "unless OMP_NUM_THREADS is set")
    parser.add_argument("--resume-from", type=Path, help="an earlier call's output: its lines are copied into --out first")
    parser.add_argument("--retry-timeouts", action="store_true", help="run modules whose last line timed out again")
    parser.add_argument("--dry-run", action="store_true", help="list the modules a sweep would run, run nothing")
    parser.add_argument("--summary", type=Path, metavar="FILE.jsonl", help="print the counts of a sweep file")
    parser.add_argument("--markdown", action="store_true", help="with --summary: markdown tables")
    args = parser.parse_args(argv)
    if args.summary is None and args.out is None:
        parser.error("give --out FILE.jsonl to sweep, or --summary FILE.jsonl")
    if args.jobs < 1 or (args.limit is not None and args.limit < 0) or args.timeout <= 0:
        parser.error("--jobs >= 1, --limit >= 0 and --timeout > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Sweep, or summarize a sweep file."""
    args = parse_args(argv)
    if args.summary is not None:
        if not args.summary.exists():
            raise SystemExit(f"--summary {args.summary}: no such file")
        sys.stdout.write(render(summarize(read_records(args.summary), str(args.summary)), args.markdown))
        return 0
    spec = importlib.util.find_spec("ligerkit")
    print(f"ligerkit from {spec.origin if spec else 'nowhere (not importable)'}; python {sys.executable}",
          file=sys.stderr, flush=True)
    targets = select(enumerate_modules(), args.only)
    if args.dry_run:
        done = done_modules(read_records(args.out), args.gpu, args.retry_timeouts, stack_now())
        for target in targets:
            print(("done  " if target.module in done else "todo  ") + target.module)
        return 0
    if args.resume_from is not None:
        copied = resume_from(args.resume_from, args.out)
        print(f"resume: {copied} line(s) copied from {args.resume_from} into {args.out}", file=sys.stderr, flush=True)
    options = Options(gpu=args.gpu, timeout=args.timeout, threads=threads_per_job(args.jobs))
    sweep(targets, args.out, options, jobs=args.jobs, limit=args.limit, deadline=args.deadline, grace=args.grace,
          retry_timeouts=args.retry_timeouts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
