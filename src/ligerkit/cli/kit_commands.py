"""The verbs that look at Liger and a model without training it: families, plan, suggest, check (CPU)."""

from __future__ import annotations

import sys
from typing import Annotated, Any, NoReturn

import typer

from ligerkit.cli.common import (
    JsonOpt,
    command,
    emit_json,
    err,
    non_empty,
    out,
    parse_exclude,
    parse_modules,
    render_scan,
    run,
    set_option,
    text_width,
)
from ligerkit.cli.tables import print_prose, print_table
from ligerkit.errors import InvalidOptionError
from ligerkit.naming import FALLBACKS


@command("Liger's families: helpers, modules and defaults.")
def families(as_json: JsonOpt = False) -> None:
    """List every family in Liger's registry, by name: its helper, the modules it accepts, and the
    default of each, Liger's and ligerkit's (which keeps the loss kernels off unless asked for).

    The registry is read once per liger-kernel version and cached, in $LIGERKIT_CACHE_DIR, else
    $XDG_CACHE_HOME/ligerkit or ~/.cache/ligerkit (a folder that cannot be written is skipped).
    """
    from ligerkit.cli.families_view import json_rows, registry_view, text_lines

    def body() -> None:
        view = registry_view()
        if as_json:
            emit_json(json_rows(view))
            return
        sys.stdout.write("\n".join(text_lines(view, text_width())) + "\n")

    run(body)


@command("Apply, build on the meta device, scan, report, revert.")
def plan(
    family: Annotated[str | None, typer.Option("--family", metavar="FAMILY",
                                               help="Liger family (model_type), e.g. qwen3.")] = None,
    model: Annotated[str | None, typer.Option("--model", metavar="PATH", help="Local model/config directory.")] = None,
    modules: Annotated[str, typer.Option(metavar="SELECTION",
                                         help="'auto' or name=on|off pairs, e.g. rope=on,swiglu=off.")] = "auto",
    exclude: Annotated[str | None, typer.Option(
        metavar="NAMES", help="Modules kept off (comma-separated; 'none' for none). Default: the loss kernels.")] = None,
    fallback: Annotated[str, typer.Option(
        metavar="error|custom", help="When the family's Liger helper fails on the installed versions: error (raise "
        "it), or custom (apply ligerkit's proven map of the family instead: suggest's verdicts, each swap probed "
        "and replayed on the model's calls; the report says so).")] = "error",
    as_json: JsonOpt = False,
) -> None:
    """Apply, build the model on the meta device, scan that the swaps reached it, print the report, revert.

    With no options it plans the built-in default: a small Qwen3. Each option may be given once.
    """
    from ligerkit.plan import plan as run_plan

    def body() -> None:
        non_empty("--family", family)
        non_empty("--model", model)
        if family and model:
            raise InvalidOptionError("Give --family or --model, not both.")
        if fallback not in FALLBACKS:
            raise InvalidOptionError(f"--fallback {fallback!r}: use one of {', '.join(FALLBACKS)}")
        result = run_plan(family, model, parse_modules(modules), parse_exclude(exclude), fallback=fallback)
        if as_json:
            emit_json(result.to_dict())
            return
        from ligerkit.kit.report import render_report

        render_report(result.report, out)
        render_scan(result.scan, result.model_class, result.config_source, len(result.report.unproven))

    run(body)


@command("Probe a modeling module's symbols; print the map of the matches.")
def suggest(
    module: Annotated[str, typer.Argument(metavar="MODULE",
                                          help="Modeling module (dotted name) or .py file, e.g. a vendored copy. "
                                               "Its top-level code runs, as `python FILE` would run it: "
                                               "only code you trust.")],
    config: Annotated[str | None, typer.Option(metavar="CLASS_OR_JSON", help="Config class (pkg.Class or "
                                               "pkg.module:Class) or a JSON file of config values.")] = None,
    set_: Annotated[list[str] | None, set_option("Config override (a key the config has)",
                                                  "--set mlp_bias=true --set hidden_act=silu")] = None,
    gpu: Annotated[bool | None, typer.Option("--gpu/--no-gpu", help="Prove the printed map on a CUDA GPU: in-place "
                                                    "writes and every call checked in the whole model built there, "
                                                    "then per-parameter gradients of the whole model, Liger on vs "
                                                    "off, against float32 (exit 1 FAIL, 4 PARTIAL; --gpu without a "
                                                    "GPU: exit 3). Default: on where a CUDA GPU is; --no-gpu skips "
                                                    "it.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Probe every norm / MLP / rotary symbol of a modeling module and print the custom_patches map of the
    matches.

    Each candidate is compared, forward and backward in float32 and bfloat16, against the pure-PyTorch
    reference of every compatible Liger replacement; anything that does not match exactly is left off.
    A match is then replayed on the calls the model itself makes: the module's whole model (its causal
    LM or conditional-generation class, from a consistently shrunk config) runs once, every call of
    every candidate is recorded (call site, arguments, the instance called), and each distinct call is
    compared again; a replacement that differs at any call site is left off, naming the call site and
    the argument (e.g. a rotary called with unsqueeze_dim=2), and a symbol the forward never calls is
    left off too. A replacement that writes in place (Liger's default RMSNorm, its rotary) is checked in
    the same whole model: where another consumer shares what it writes, the out-of-place twin is
    printed, or the symbol is left off. Where the whole model cannot be built or run here, its calls
    and in-place writes are unproven: a norm takes its out-of-place twin, a rotary is left off (a
    complete --config, or a GPU, can prove it).

    Where a CUDA GPU is (or with --gpu), the map is then applied there and every parameter's gradient
    of the whole model is compared against an unpatched bfloat16 and a float32 run. The verdict names
    the model and how many of its trainable parameter tensors it compared: PASS (all, within bounds,
    exit 0), FAIL (a tensor over its bound, exit 1), PARTIAL (some got no gradient, exit 4); --gpu
    without a CUDA GPU prints the CPU map, then exits 3; --no-gpu skips the proof. After a FAIL each
    key of the map is proven alone, and the keys that fail alone are named to leave off.

    suggest executes the module: importing a dotted name, or loading a .py file, runs its top-level
    code as `python FILE` would, with your permissions. Point it only at code you trust. A .py file is
    imported under its package's dotted name when that name leads to the file; a file named like
    another module (json.py) is loaded on its own, never that module.

    When one of Liger's family helpers already patches the module (transformers' own modeling
    files), the output names it: the official route is the one for those models, and the map is
    for vendored copies. A config key or --set the config does not have, a size that is not a positive
    integer, a key a candidate needs and the config lacks, and a module with nothing to probe are errors
    (exit 1). Piped to a file, the table is plain rows of at most 100 columns, each reason under its row.
    """
    from ligerkit.probe.runnable import Unrunnable
    from ligerkit.proof.grads import FAIL, PARTIAL, PARTIAL_EXIT, exit_code
    from ligerkit.train.config import parse_override
    from ligerkit.suggest import suggest as run_suggest

    def body() -> None:
        overrides = {}
        for item in set_ or []:
            path, value = parse_override(item)
            overrides[".".join(path)] = value
        no_gpu = _no_gpu() if gpu or gpu is None else None
        gpu_run = gpu is not False and no_gpu is None  # by default wherever a CUDA GPU is
        no_gpu = no_gpu if gpu else None  # --gpu without one: the CPU map its help promises, then exit 3
        result = run_suggest(module, config, overrides, device="cuda" if gpu_run else "cpu")
        grads, unseen = None, None
        if gpu_run and (gpu or result.matched):  # by default, a module with no map has nothing to prove
            try:
                grads = _suggest_gradients(result)
            except Unrunnable as exc:  # nothing compared: no verdict but PARTIAL
                unseen = f"gradients PARTIAL (nothing compared: the whole model could not be built and run: {exc})"
        code = exit_code(grads.verdict) if grads is not None else PARTIAL_EXIT if unseen else 0
        alone = _ablation(result) if grads is not None and grads.verdict == FAIL else {}
        if as_json:
            gradients = grads.to_dict() if grads is not None else None
            if unseen:
                gradients = {"passed": False, "verdict": PARTIAL, "coverage": None, "reason": unseen}
            if alone:
                gradients["alone"] = {key: {"verdict": g.verdict, "summary": g.summary()} for key, g in alone.items()}
            emit_json({**result.to_dict(), "gradients": gradients})
            if no_gpu is not None:
                _say_no_gpu(no_gpu)
            if code:
                raise typer.Exit(code)
            return
        if result.official is not None:
            print_prose(f"official helper: {result.official.advice()}\n")
        rows = [(c.symbol, c.kind, c.verdict, c.replacement or "-", c.reason) for c in result.candidates]
        print_table(f"{result.module} (config: {result.config})", ("symbol", "kind", "verdict", "replacement",
                                                                      "reason"), rows, below=("reason",))
        out.print(f"# {len(result.matched)} of {len(result.candidates)} candidates matched", markup=False)
        sys.stdout.write(result.patches_code() + "\n")  # unwrapped: ready to paste
        if grads is not None or unseen:
            out.print(grads.summary() if grads is not None else unseen, markup=False, soft_wrap=True)
            for key, alone_grads in alone.items():
                out.print(f"  {key} alone: {alone_grads.summary()}", markup=False, soft_wrap=True)
            failing = [key for key, g in alone.items() if g.verdict == FAIL]
            if failing:
                out.print(f"  leave {', '.join(failing)} off: {'it changes' if len(failing) == 1 else 'each changes'} "
                          "gradients on its own in the whole model", markup=False, soft_wrap=True)
            if code:
                raise typer.Exit(code)
        if no_gpu is not None:
            _say_no_gpu(no_gpu)

    run(body)


def _no_gpu() -> str | None:
    """Why ``suggest --gpu`` cannot prove its map here (no CUDA GPU), or ``None``."""
    from ligerkit.environment import accelerator

    if accelerator() == "cuda":
        return None
    return ("suggest --gpu: no CUDA GPU here, so the map above was probed on the CPU only (forward and backward "
            "against the reference math, in-place writes in the whole model on the CPU); run the same command on "
            "a GPU machine to prove it with per-parameter gradients of the whole model")


def _say_no_gpu(reason: str) -> NoReturn:
    err.print(reason, markup=False, soft_wrap=True)
    raise typer.Exit(3)


@command("Check a recipe on the CPU: files, configs, plan + meta build.")
def check(
    recipe: Annotated[str | None, typer.Argument(
        metavar="RECIPE", help="Recipe folder, or the name of a shipped recipe (qwen3, recipes/qwen3); default: "
                                 "the shipped composite_vlm example.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a recipe on the CPU: structure, every config, plan + meta-device build + scan.

    Works from any folder: a name that is not a folder here is looked up among the recipes shipped
    with this checkout. Each step is announced on stderr as it starts (a check takes tens of
    seconds). Exit code 1, with every reason, when anything is wrong.
    """

    def progress(line: str) -> None:
        err.print(f"check {line}", markup=False, highlight=False, soft_wrap=True)

    def body() -> None:
        err.print("check: importing torch, transformers and the kit", markup=False, highlight=False)
        from ligerkit.kit.report import render_report
        from ligerkit.proof.recipe_check import check_recipe

        result = check_recipe(recipe, progress)
        if as_json:
            emit_json(result.to_dict())
        else:
            out.print(f"Recipe {result.recipe}: {len(result.plans)} config(s)", markup=False)
            for plan in result.plans:
                out.print(f"\n== {plan.config}: Liger {'on' if plan.liger_enabled else 'off'} ==", markup=False)
                out.print(f"loss path: {plan.loss_path}", markup=False, soft_wrap=True)
                if plan.training is not None:
                    out.print(f"training: {plan.training}", markup=False, soft_wrap=True)
                for note in plan.notes:
                    out.print(f"note: {note}", markup=False, soft_wrap=True)
                if plan.report is not None and plan.scan is not None:
                    render_report(plan.report, out)
                    render_scan(plan.scan, plan.model_class or "?", plan.config, len(plan.report.unproven))
                elif plan.model_class is None:
                    out.print("did not build: see the problems below", markup=False)
                else:
                    out.print(f"builds {plan.model_class} without Liger", markup=False)
            for problem in result.problems:
                err.print(f"problem: {problem}", markup=False, soft_wrap=True)
            out.print("check: OK" if result.ok else f"check: {len(result.problems)} problem(s)", markup=False)
        if not result.ok:
            raise typer.Exit(1)

    run(body)


def _ablation(result: Any) -> dict[str, Any]:
    """After a FAIL, each key of the map proven alone (``{}`` for a map of one key)."""
    import torch

    from ligerkit.proof.recipe_grads import ablate_map, suggested_patches

    patches = suggested_patches(result)
    if len(patches) < 2:
        return {}
    return ablate_map(result.module_object, result.config_object, patches, torch.device("cuda"))


def _suggest_gradients(result: Any) -> Any:
    """Gradient parity of a suggestion's map on the GPU (``None`` when nothing matched)."""
    import torch

    from ligerkit.proof.recipe_grads import map_grad_parity, suggested_patches

    patches = suggested_patches(result)
    if not patches:
        raise InvalidOptionError("suggest --gpu: no candidate matched, so there is no map to prove.")
    return map_grad_parity(result.module_object, result.config_object, patches, torch.device("cuda"))
