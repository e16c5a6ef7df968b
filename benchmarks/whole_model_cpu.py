"""Sweep: does every transformers family's top model build, run and use every symbol ``suggest`` probes?

For every ``transformers.models.*.modeling_*`` module in which ``ligerkit.suggest.discover`` finds
candidate symbols (norms, MLPs, rotary functions), one subprocess builds the module's top model the
way the in-place check and the gradient proof do (``ligerkit.probe.runnable.runnable_model``: the
top class, consistently shrunk configs, a parameter budget, inputs that route every expert) and
records one JSON line: the top class, the config that built, its parameter count, whether it ran,
whether each discovered symbol was instantiated and used, whether every parameter that requires a
gradient got one after ``Runnable.loss().backward()``, the seconds; or why not.

A recorded run, not a CI test. It runs in parts and resumes: families already in the output file
are skipped, so it can be stopped and started again (and fits a machine's per-command limit).

    python benchmarks/whole_model_cpu.py --device cpu [--out FILE] [--only a,b] [--limit N] [--timeout S] [--jobs N]
    python benchmarks/whole_model_cpu.py --summary [--out FILE]
    python benchmarks/whole_model_cpu.py --device cuda --out docs/results/whole_model/cuda.jsonl
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "whole_model" / "cpu.jsonl"


def family_modules() -> list[str]:
    """Every transformers modeling module (``modeling_*``, not TF/Flax) with symbols ``discover`` finds."""
    import transformers.models as models

    from ligerkit.suggest import discover

    found = []
    for package in pkgutil.iter_modules(models.__path__):
        try:
            sub = importlib.import_module(f"transformers.models.{package.name}")
        except Exception:  # noqa: BLE001 - a family that does not import has nothing to sweep
            continue
        for info in pkgutil.iter_modules(getattr(sub, "__path__", [])):
            if not info.name.startswith("modeling_") or info.name.startswith(("modeling_tf_", "modeling_flax_")):
                continue
            name = f"transformers.models.{package.name}.{info.name}"
            try:
                if discover(importlib.import_module(name)):
                    found.append(name)
            except Exception:  # noqa: BLE001 - e.g. an optional dependency missing
                continue
    return found


def short_name(module: str) -> str:
    """``transformers.models.x.modeling_y`` -> ``x.modeling_y``."""
    return module.removeprefix("transformers.models.")


# --- one family, in its own process -----------------------------------------------------------------

@contextmanager
def _watching(module: types.ModuleType, symbols: list[tuple[str, object, str]],
              model: Any, used: set[str]) -> Iterator[Callable[[], bool]]:
    """Record which symbols a forward of ``model`` uses (class instances called, functions called)."""
    with ExitStack() as stack:
        for name, obj, _ in symbols:
            if isinstance(obj, type):
                for m in model.modules():
                    if type(m) is obj:
                        handle = m.register_forward_hook(lambda *_, n=name: used.add(n))
                        stack.callback(handle.remove)
            else:
                stack.enter_context(_counting(module, obj, name, used))
        yield lambda: bool(used)


@contextmanager
def _counting(module: types.ModuleType, fn: Any, name: str, used: set[str]) -> Iterator[None]:
    bound = [k for k, v in list(vars(module).items()) if v is fn]

    def counting(*args: Any, **kwargs: Any) -> Any:
        used.add(name)
        return fn(*args, **kwargs)

    for k in bound:
        vars(module)[k] = counting
    try:
        yield
    finally:
        for k in bound:
            vars(module)[k] = fn


@contextmanager
def _all_of(watching: Any, expected: dict[str, bool], used: set[str]) -> Iterator[Callable[[], bool]]:
    with watching:
        yield lambda: all(name in used for name, want in expected.items() if want) and bool(used)


def _expected(module: types.ModuleType, symbols: list[tuple[str, object, str]], model: Any) -> dict[str, bool]:
    """Which symbols the built model should use: classes it instantiates, functions named in the body
    of a class of the module it instantiates."""
    from ligerkit.probe.runnable import class_references

    present = {type(m) for m in model.modules()}
    refs = class_references(module)
    named = set().union(*(refs.get(c.__name__, frozenset()) for c in present if c.__module__ == module.__name__))
    return {name: (obj in present) if isinstance(obj, type) else (name in named) for name, obj, _ in symbols}


def _own_build(module: types.ModuleType, top: Any) -> dict[str, Any]:
    """Whether the top class builds (on the meta device) from the family's own default config, unshrunk."""
    import torch

    from ligerkit.probe.runnable import _base_config, _make

    if top is None:
        return {"own_builds": False, "own_error": "no top class"}
    config = _base_config(module, None, top)[0]
    try:
        with torch.device("meta"):
            _make(top, config)
    except Exception as exc:  # noqa: BLE001 - recorded
        return {"own_builds": False, "own_error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"own_builds": True}


def run_one(module_name: str, device: str) -> dict[str, Any]:
    """Build, run and backpropagate ``module_name``'s top model; the JSON record of what happened."""
    import torch

    from ligerkit.probe.runnable import Unrunnable, runnable_model, top_model_class
    from ligerkit.suggest import discover

    warnings.simplefilter("ignore")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    module = importlib.import_module(module_name)
    symbols = discover(module)
    record: dict[str, Any] = {"module": short_name(module_name), "symbols": {n: k for n, _, k in symbols}}
    top = top_model_class(module)
    record["top"] = top.__name__ if top is not None else None
    record.update(_own_build(module, top))
    used: set[str] = set()

    def watch_all(model: Any) -> Any:  # a run must use every symbol the model should use
        used.clear()
        return _all_of(_watching(module, symbols, model, used), _expected(module, symbols, model), used)

    def watch_any(model: Any) -> Any:
        used.clear()
        return _watching(module, symbols, model, used)

    try:
        run = runnable_model(module, None, watch_all, device=device, symbol="every discovered symbol it builds")
    except Unrunnable as exc:
        if "runs but never uses" not in str(exc):
            record.update(ran=False, error=str(exc))
            return record
        try:  # no run uses them all: the run that uses some, to say which
            run = runnable_model(module, None, watch_any, device=device, symbol="any discovered symbol")
        except Unrunnable as again:
            record.update(ran=False, error=str(again))
            return record
    model = run.model
    expected = _expected(module, symbols, model)
    with _watching(module, symbols, model, used):
        used.clear()
        loss = run.loss()
        loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    missing = [n for n, p in trainable if p.grad is None]
    total = sum(p.numel() for _, p in trainable)
    record.update(
        ran=True, label=run.label, params=sum(p.numel() for p in model.parameters()),
        inputs=sorted(run.kwargs) or [f"positional x{len(run.args)}"],
        used={n: n in used for n in expected}, expected=expected,
        all_used=all(n in used for n, want in expected.items() if want),
        unused=[n for n, want in expected.items() if want and n not in used],
        never_instantiated=[n for n, want in expected.items() if not want],
        grads_all=not missing, no_grad=missing[:8], no_grad_count=len(missing),
        no_grad_share=round(sum(p.numel() for n, p in trainable if p.grad is None) / max(total, 1), 4),
        finite=bool(torch.isfinite(loss).item()),
    )
    return record


# --- the sweep --------------------------------------------------------------------------------------

def done(out: Path) -> set[str]:
    """Modules already recorded in ``out``."""
    if not out.exists():
        return set()
    return {json.loads(line)["module"] for line in out.read_text().splitlines() if line.strip()}


def sweep(out: Path, device: str, only: list[str] | None, limit: int | None, timeout: float, jobs: int = 1) -> None:
    """Run every family not yet in ``out`` (or those of ``only``) in its own process, appending a line each;
    ``jobs`` processes at a time (each uses at most two threads)."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Lock

    out.parent.mkdir(parents=True, exist_ok=True)
    modules = family_modules()
    if only:
        modules = [m for m in modules if any(short_name(m) == o or short_name(m).split(".")[0] == o for o in only)]
    finished = done(out)
    todo = [m for m in modules if short_name(m) not in finished][: limit or None]
    print(f"{len(modules)} modules, {len(finished)} recorded, {len(todo)} to run", flush=True)
    lock = Lock()

    def one(name: str) -> None:
        record = _run_family(name, device, timeout)
        with lock, out.open("a") as f:
            f.write(json.dumps(record) + "\n")
            status = "FAIL" if not record.get("ran") else "ok" if record.get("all_used") and record.get("grads_all") \
                else "partial"
            said = record.get("label") or record.get("error", "")[:120]
            print(f"{status:7} {record['module']:60} {record['seconds']:6.1f}s {said}", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))


def _run_family(name: str, device: str, timeout: float) -> dict[str, Any]:
    """One family's record, from its own process (a crash or a timeout is recorded, not raised)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--device", device],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        record = json.loads(lines[-1]) if lines else {
            "module": short_name(name), "ran": False,
            "error": f"process exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    except subprocess.TimeoutExpired:
        record = {"module": short_name(name), "ran": False, "error": f"timed out after {timeout:.0f} s"}
    record["seconds"] = round(time.perf_counter() - start, 1)
    record["device"] = device
    return record


def summary(out: Path) -> None:
    """Counts, and every family that does not build or run, with why."""
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    ran = [r for r in records if r.get("ran")]
    used = [r for r in ran if r.get("all_used")]
    grads = [r for r in ran if r.get("grads_all")]
    both = [r for r in ran if r.get("all_used") and r.get("grads_all")]
    own = [r for r in records if r.get("own_builds")]
    print(f"{len(records)} modules recorded in {out}")
    print(f"  top model builds from the family's own default config (meta device): {len(own)}")
    own_ran = [r for r in own if r.get("ran")]
    print(f"  top model builds and runs (shrunk): {len(ran)} ({len(own_ran)} of those {len(own)})")
    print(f"  uses every discovered symbol it instantiates: {len(used)}")
    print(f"  every trainable parameter gets a gradient: {len(grads)}")
    print(f"  both: {len(both)}")
    print(f"  total seconds: {sum(r.get('seconds', 0) for r in records):.0f}")
    print("\nBuild from their own default config, but do not build or run shrunk:")
    for r in sorted((r for r in own if not r.get("ran")), key=lambda r: r["module"]):
        print(f"  {r['module']} [{r.get('top')}]: {r.get('error', '')[:400]}")
    print("\nDo not build from their own default config either:")
    for r in sorted((r for r in records if not r.get("own_builds") and not r.get("ran")), key=lambda r: r["module"]):
        print(f"  {r['module']} [{r.get('top')}]: {r.get('own_error', r.get('error', ''))[:300]}")
    print("\nRun, but a discovered symbol the model instantiates is not used:")
    for r in sorted((r for r in ran if not r.get("all_used")), key=lambda r: r["module"]):
        print(f"  {r['module']} [{r['top']}, {r['label']}]: unused {r['unused']}")
    print("\nRun, but some parameters get no gradient:")
    for r in sorted((r for r in ran if not r.get("grads_all")), key=lambda r: r["module"]):
        print(f"  {r['module']} [{r['top']}]: {r['no_grad_count']} tensors ({r['no_grad_share']:.1%} of the "
              f"parameters), e.g. {r['no_grad'][:3]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSONL file, appended to (default: %(default)s)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", default="", help="comma-separated modules (x.modeling_y) or family folders (x)")
    parser.add_argument("--limit", type=int, default=None, help="run at most N families this time")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per family (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="families run at once (default: %(default)s)")
    parser.add_argument("--summary", action="store_true", help="print counts and failures of --out, run nothing")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        start = time.perf_counter()
        try:
            record = run_one(args.one, args.device)
        except Exception as exc:  # noqa: BLE001 - recorded, not raised: the sweep goes on
            record = {"module": short_name(args.one), "ran": False, "error": f"{type(exc).__name__}: {exc}",
                      "trace": traceback.format_exc(limit=4)[-1500:]}
        record["run_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(record), flush=True)
        return
    if args.summary:
        summary(args.out)
        return
    only = [o.strip() for o in args.only.split(",") if o.strip()] or None
    sweep(args.out, args.device, only, args.limit, args.timeout, args.jobs)


if __name__ == "__main__":
    main()
