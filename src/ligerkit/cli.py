"""``ligerkit`` command line: families | plan | suggest | check | train | smoke | bench.

Every verb takes ``--json`` for machine-readable output; a ligerkit error exits with code 1 and
its message on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ligerkit.errors import InvalidOptionError, LigerKitError
from ligerkit.kit.core import LOSS_MODULES

app = typer.Typer(
    help="Wire Liger Kernel into a training recipe before the model is built, and prove every swap.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]

_TRUE = {"on", "true", "1", "yes"}
_FALSE = {"off", "false", "0", "no"}


def parse_modules(spec: str) -> str | dict[str, bool]:
    """``auto`` or ``rope=on,swiglu=off`` -> ``"auto"`` or ``{"rope": True, "swiglu": False}``.

    Empty items, a name without a value and a name given twice are errors, never guesses.
    """
    spec = spec.strip()
    if spec == "auto":
        return "auto"
    selection: dict[str, bool] = {}
    for item in (p.strip() for p in spec.split(",")):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not item or not sep or not name or value not in _TRUE | _FALSE:
            raise InvalidOptionError(
                f"--modules: cannot read {item!r} in {spec!r}; use 'auto' or name=on|off pairs, e.g. "
                "rope=on,swiglu=off."
            )
        if name in selection:
            raise InvalidOptionError(f"--modules names {name!r} twice; give each module once.")
        selection[name] = value in _TRUE
    return selection


def parse_exclude(spec: str | None) -> tuple[str, ...]:
    """Comma-separated module names; ``none`` for no exclusions; default: the loss kernels."""
    if spec is None:
        return LOSS_MODULES
    if spec.strip().lower() == "none":
        return ()
    names = tuple(p.strip() for p in spec.split(","))
    if not all(names):
        raise InvalidOptionError(
            f"--exclude {spec!r} has an empty name; list module names (e.g. cross_entropy,"
            "fused_linear_cross_entropy), or 'none' to exclude nothing."
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidOptionError(f"--exclude names {', '.join(repeated)} twice; give each module once.")
    return names


def non_empty(option: str, value: str | None) -> str | None:
    """``value``, refusing an empty string (an empty option is a mistake, never a default)."""
    if value is not None and not value.strip():
        raise InvalidOptionError(f"{option} is empty; give a value or leave the option out.")
    return value


def _run(body: Callable[[], None]) -> None:
    try:
        body()
    except LigerKitError as exc:
        err.print(f"[bold red]error[/]: {type(exc).__name__}: {exc}", soft_wrap=True)
        raise typer.Exit(1) from None


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


@app.command()
def families(as_json: JsonOpt = False) -> None:
    """List every family in Liger's registry: helper, accepted modules and Liger's defaults."""
    from ligerkit.kit.families import all_families

    def body() -> None:
        rows = [
            {"family": f.name, "helper": f.helper.__name__, "modules": dict(f.defaults),
             "modeling_modules": list(f.modeling_modules)}
            for f in all_families().values()
        ]
        if as_json:
            _emit_json(rows)
            return
        table = Table(title=f"Liger families ({len(rows)})", title_justify="left")
        for col in ("family", "helper", "modules (Liger default)"):
            table.add_column(col)
        for row in rows:
            mods = ", ".join(f"{k}={'on' if v else 'off'}" for k, v in row["modules"].items())
            table.add_row(row["family"], row["helper"], mods)
        out.print(table)

    _run(body)


@app.command()
def plan(
    family: Annotated[str | None, typer.Option("--family", help="Liger family (model_type), e.g. qwen3.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Local model/config directory.")] = None,
    modules: Annotated[str, typer.Option(help="'auto' or name=on|off pairs, e.g. rope=on,swiglu=off.")] = "auto",
    exclude: Annotated[
        str | None, typer.Option(help="Modules kept off (comma-separated; 'none' for none). Default: loss kernels.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply, build the model on the meta device, verify the swaps reached it, print the report, revert.

    With no options it plans the built-in default: a small Qwen3.
    """
    from ligerkit.plan import plan as run_plan

    def body() -> None:
        non_empty("--family", family)
        non_empty("--model", model)
        if family and model:
            raise InvalidOptionError("Give --family or --model, not both.")
        result = run_plan(family, model, parse_modules(modules), parse_exclude(exclude))
        if as_json:
            _emit_json(result.to_dict())
            return
        from ligerkit.kit.report import render_report

        render_report(result.report, out)
        render_scan(result.scan, result.model_class, result.config_source)

    _run(body)


def render_scan(scan: Any, model_class: str, config_source: str) -> None:
    """Print a scan result, one finding a line."""
    for line in scan_lines(scan, model_class, config_source):
        out.print(line, markup=False, soft_wrap=True)


def scan_lines(scan: Any, model_class: str, config_source: str) -> list[str]:
    """The scan result as plain lines."""
    lines = [f"Scan of {model_class} built on the meta device from {config_source}:"]
    lines += [f"  {count:4d} x {name}" for name, count in scan.counts.items()]
    lines += [f"  unused (no instance in this model): {swap}" for swap in scan.unused]
    lines += [f"  function swap (not visible in the module tree): {fn}" for fn in scan.function_swaps]
    lines += [f"  stale binding: {b.module}.{b.attr} still holds {b.original}" for b in scan.stale]
    lines.append("Validated: swaps measured, model scanned. Still to run on a GPU: `pytest -m gpu` (loss parity).")
    return lines


@app.command()
def suggest(
    module: Annotated[str, typer.Argument(help="Modeling module (dotted name) or .py file, e.g. a vendored copy.")],
    config: Annotated[str | None, typer.Option(help="Config class (pkg.Class or pkg.module:Class) or JSON file.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Config override, e.g. --set mlp_bias=true.")] = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="Then prove the printed map on a CUDA GPU: per-parameter "
                                                    "gradients of a small model of the module, Liger on vs off, "
                                                    "against float32.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Probe every norm / MLP / rotary symbol of a modeling module and print the verified custom_patches map.

    Each candidate is compared, forward and backward in float32 and bfloat16, against the pure-PyTorch
    reference of every compatible Liger replacement; anything that does not match exactly is left off.
    A replacement that writes in place (Liger's default RMSNorm, its rotary) is checked in a small model
    of the module: where another consumer shares what it writes, the out-of-place twin is printed, or
    the symbol is left off. With --gpu, the map is then applied on a GPU and every parameter's gradient
    is compared against an unpatched bfloat16 and a float32 run (exit 1 on failure, 3 without a GPU).
    """
    from ligerkit.train.config import parse_override
    from ligerkit.suggest import suggest as run_suggest

    def body() -> None:
        overrides = {}
        for item in set_ or []:
            path, value = parse_override(item)
            overrides[".".join(path)] = value
        if gpu:
            _require_gpu("suggest --gpu")
        result = run_suggest(module, config, overrides)
        grads = _suggest_gradients(result) if gpu else None
        if as_json:
            _emit_json({**result.to_dict(), "gradients": grads.to_dict() if grads is not None else None})
            if grads is not None and not grads.passed:
                raise typer.Exit(1)
            return
        table = Table(title=f"{result.module} (config: {result.config})", title_justify="left")
        for col in ("symbol", "kind", "verdict", "replacement", "reason"):
            table.add_column(col, overflow="fold")
        for c in result.candidates:
            table.add_row(c.symbol, c.kind, c.verdict, c.replacement or "-", c.reason)
        out.print(table)
        out.print(f"# {len(result.matched)} of {len(result.candidates)} candidates verified", markup=False)
        sys.stdout.write(result.patches_code() + "\n")  # unwrapped: ready to paste
        if grads is not None:
            out.print(grads.summary(), markup=False, soft_wrap=True)
            if not grads.passed:
                raise typer.Exit(1)

    _run(body)


@app.command()
def check(
    recipe_dir: Annotated[str, typer.Argument(help="Recipe folder (default: the composite VLM example).")] = "recipes/composite_vlm",
    as_json: JsonOpt = False,
) -> None:
    """Check a recipe on the CPU: structure, every config, plan + meta-device build + verify.

    Exit code 1, with every reason, when anything is wrong.
    """
    from ligerkit.kit.report import render_report
    from ligerkit.proof.check import check_recipe

    def body() -> None:
        result = check_recipe(recipe_dir)
        if as_json:
            _emit_json(result.to_dict())
        else:
            out.print(f"Recipe {result.recipe}: {len(result.plans)} config(s)", markup=False)
            for plan in result.plans:
                out.print(f"\n== {plan.config}: Liger {'on' if plan.liger_enabled else 'off'} ==", markup=False)
                out.print(f"loss path: {plan.loss_path}", markup=False, soft_wrap=True)
                if plan.report is not None and plan.scan is not None:
                    render_report(plan.report, out)
                    render_scan(plan.scan, plan.model_class or "?", plan.config)
                else:
                    out.print(f"builds {plan.model_class} without Liger", markup=False)
            for problem in result.problems:
                err.print(f"problem: {problem}", markup=False, soft_wrap=True)
            out.print("check: OK" if result.ok else f"check: {len(result.problems)} problem(s)", markup=False)
        if not result.ok:
            raise typer.Exit(1)

    _run(body)


@app.command()
def train(
    config: Annotated[str, typer.Argument(help="Recipe config, e.g. recipes/qwen3/configs/cpu.yaml.")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override, e.g. --set train.steps=5.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Train a recipe config (Liger as the config says; under torchrun for several GPUs).

    Progress goes to stderr: a bar in a terminal, log lines elsewhere (train.log_every steps apart).
    """
    from ligerkit.kit.report import render_report
    from ligerkit.train import Trainer, load_engine

    def body() -> None:
        overrides = list(set_ or [])
        if as_json:
            overrides.append("train.progress=false")
        engine = load_engine(config, overrides)
        _log_to_stderr()
        result = Trainer(engine).train()
        if not engine.env.main:
            return
        if as_json:
            _emit_json({
                "config": engine.config.model_dump(mode="json"),
                "loss_path": engine.loss_path(),
                "report": result.report.to_dict() if result.report else None,
                "scan": result.scan.to_dict() if result.scan else None,
                "steps": [s.to_dict() for s in result.steps],
            })
            return
        if result.report is not None:
            render_report(result.report, out)
            if result.scan is not None:
                render_scan(result.scan, "the trained model", "the recipe config")
        else:
            out.print("Liger: off (model.liger_kernel.enabled is false); the model trained unpatched.", markup=False)
        out.print(f"loss path: {engine.loss_path()}", markup=False, soft_wrap=True)
        first, last = result.steps[0], result.steps[-1]
        out.print(f"trained {len(result.steps)} steps: loss {first.loss:.4f} -> {last.loss:.4f}, "
                  f"median {result.median_tokens_per_s:,.0f} tokens/s after the first step", markup=False)

    _run(body)


def _log_to_stderr() -> None:
    """Show the ``ligerkit`` logger's INFO lines on stderr (the library itself never adds handlers)."""
    import logging

    logger = logging.getLogger("ligerkit")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _require_gpu(verb: str) -> None:
    """Exit with code 3 and the reason where Liger's kernels cannot run."""
    from ligerkit.proof import arms

    try:
        arms.require_accelerator(verb)
    except arms.NoAcceleratorError as exc:
        err.print(str(exc), markup=False, soft_wrap=True)
        raise typer.Exit(arms.NO_GPU_EXIT) from None


@app.command()
def smoke(
    target: Annotated[str, typer.Argument(help="Recipe folder (uses configs/gpu.yaml) or a config file.")],
    steps: Annotated[int, typer.Option(help="Training steps per arm.")] = 20,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Config override for both arms.")] = None,
    nproc: Annotated[int, typer.Option(help="GPUs per arm (torchrun + FSDP2 when > 1).")] = 1,
    grad_factor: Annotated[float, typer.Option(help="Gradient check: a tensor fails when its relative error "
                                                   "against float32 exceeds this x eager's + --grad-slack.")] = 2.0,
    grad_slack: Annotated[float, typer.Option(help="Gradient check: added to the bound.")] = 0.01,
    out_dir: Annotated[str, typer.Option("--out", help="Folder for smoke.json and smoke.png.")] = "runs/smoke",
    as_json: JsonOpt = False,
) -> None:
    """Prove Liger on a recipe: step-1 gradients per parameter, then the loss curve, Liger off vs on.

    First, in this process: the recipe's model with Liger off in float32 (the truth), off in the
    training dtype, and on; every parameter tensor's relative gradient error against float32 must
    stay within GRAD_FACTOR x eager's + GRAD_SLACK (the kit is reverted after). Then each arm trains in
    its own process from the same seed and data: per-step loss and grad norm within a dtype
    tolerance. Exit 1 when either fails; exit 3 (with a message) on a machine without a GPU.
    """
    from pathlib import Path

    from ligerkit.proof import arms, smoke
    from ligerkit.proof.recipe_grads import recipe_grad_parity
    from ligerkit.probe.tolerance import GradTolerance

    def body() -> None:
        config = arms.resolve_config(target)
        tolerance = _tolerance(GradTolerance, grad_factor, grad_slack)
        _require_gpu("smoke")
        import torch

        overrides = list(set_ or [])
        result = smoke.smoke(config, steps, overrides, arms.default_runner(), nproc,
                              gradients=lambda: recipe_grad_parity(config, overrides, torch.device("cuda"), tolerance))
        files = smoke.write_outputs(result, Path(out_dir))
        if as_json:
            _emit_json(result.to_dict())
        else:
            out.print(result.table(), markup=False)
            if result.gradients is not None:
                out.print(result.gradients.summary(), markup=False, soft_wrap=True)
            out.print(f"max loss gap {max(result.loss_gaps):.2e} (tolerance {result.loss_tolerance:g}, {result.dtype}); "
                      f"max grad-norm gap {max(result.grad_norm_rel_gaps):.1%} (tolerance {result.grad_norm_rtol:.0%})"
                      f": {'PASS' if result.passed else 'FAIL'}; wrote {', '.join(map(str, files))}", markup=False)
        if not result.passed:
            raise typer.Exit(1)

    _run(body)


def _suggest_gradients(result: Any) -> Any:
    """Gradient parity of a suggestion's map on the GPU (``None`` when nothing was verified)."""
    import torch

    from ligerkit.proof.recipe_grads import map_grad_parity, suggested_patches

    patches = suggested_patches(result)
    if not patches:
        raise InvalidOptionError("suggest --gpu: no candidate was verified, so there is no map to prove.")
    return map_grad_parity(result.module_object, result.config_object, patches, torch.device("cuda"))


def _tolerance(cls: Any, factor: float, slack: float) -> Any:
    """A gradient tolerance from the CLI's options (a bad value is an InvalidOptionError)."""
    try:
        return cls(factor, slack)
    except ValueError as exc:
        raise InvalidOptionError(f"--grad-factor/--grad-slack: {exc}") from None


@app.command()
def bench(
    target: Annotated[str, typer.Argument(help="Recipe folder (uses configs/gpu.yaml) or a config file.")],
    arms: Annotated[str, typer.Option(
        help="Comma-separated, from: eager (Liger off), liger (kernel swaps), liger_fused (swaps + fused loss), "
             "compile (torch.compile per decoder layer), liger_compile (swaps + compile), compile_fused "
             "(compile + fused loss, no swaps).")] = "eager,liger,liger_fused,compile,liger_compile,compile_fused",
    steps: Annotated[int, typer.Option(help="Training steps per arm.")] = 20,
    warmup: Annotated[int, typer.Option(help="First steps excluded from timing.")] = 5,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Config override for every arm.")] = None,
    nproc: Annotated[int, typer.Option(help="GPUs per arm (torchrun + FSDP2 when > 1).")] = 1,
    out_dir: Annotated[str, typer.Option("--out", help="Folder for bench.json and bench.md.")] = "runs/bench",
    as_json: JsonOpt = False,
) -> None:
    """Each arm in its own process: median tokens/s, peak memory and MFU, with ratios against eager.

    Exit 3 (with a message) on a machine without a GPU.
    """
    from pathlib import Path

    from rich.progress import Progress

    from ligerkit.proof import bench as B
    from ligerkit.proof.arms import default_runner, resolve_config

    def body() -> None:
        config = resolve_config(target)
        chosen = B.parse_arms(arms)
        _require_gpu("bench")
        with Progress(console=err, disable=as_json) as progress:
            task = progress.add_task("bench arms", total=len(chosen))
            result = B.bench(config, chosen, steps, warmup, list(set_ or []), default_runner(),
                             on_arm=lambda arm: progress.advance(task), nproc=nproc)
        files = B.write_outputs(result, Path(out_dir))
        if as_json:
            _emit_json(result)
        else:
            out.print(B.to_markdown(result), markup=False)
            out.print(f"wrote {', '.join(map(str, files))}", markup=False)

    _run(body)


def main() -> None:
    """Console-script entry point."""
    app()
