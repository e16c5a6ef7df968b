"""The verbs that train: train (CPU or GPU), and the GPU proofs smoke and bench."""

from __future__ import annotations

from typing import Annotated

import typer

from ligerkit.cli.common import (
    JsonOpt,
    command,
    emit_json,
    err,
    log_to_stderr,
    out,
    render_scan,
    require_gpu,
    run,
    set_option,
    tolerance,
)

# ligerkit.train.config.arms.DEFAULT_ARMS, spelled out: importing it would import torch to show --help
_ALL_ARMS = "eager,liger,liger_fused,compile,liger_compile,compile_fused,liger_compile_fused"


@command("Train a recipe config (Liger as the config says).")
def train(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG",
        help="A recipe config (recipes/qwen3/configs/cpu.yaml), or a recipe folder (its configs/gpu.yaml on a GPU "
             "machine, configs/cpu.yaml elsewhere). Optional with --resume.", show_default=False)] = None,
    set_: Annotated[list[str] | None, set_option("Override a config key",
                                                  "--set train.steps=5 --set train.optim.lr=1e-3")] = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="RUN_DIR", help="Continue the run in this folder "
                                                              "(one that did not finish: a finished run is "
                                                              "refused, saying how to extend it) "
                                                              "from its newest intact checkpoint, with the config "
                                                              "it trained with (only train.steps, logging and "
                                                              "checkpoint keys may change).")] = None,
    init_from: Annotated[str | None, typer.Option("--init-from", metavar="RUN_OR_CHECKPOINT", help="Start a new run "
                                                  "from the model weights of a run folder's newest intact "
                                                  "checkpoint (or of one checkpoints/step_N folder): fresh "
                                                  "optimizer, data from the start.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Train a recipe config (Liger as the config says; under torchrun for several GPUs).

    Every run writes a folder (train.run.output_dir, or a new one under runs/<config name>/): the resolved
    config, the environment, the Liger report, metrics.jsonl, checkpoints, loss.png and summary.json.
    SIGINT/SIGTERM finish the step, save a checkpoint and exit 130/143 (a second signal stops at once);
    train.run.stop_after_steps exits 75 the same way; --resume continues (the same config, or a refusal naming
    each changed key; one process per run folder). Progress goes to stderr: a bar in a
    terminal, log lines elsewhere (train.run.log_every steps apart).
    """
    from ligerkit.kit.report import render_report
    from ligerkit.train import Trainer, load_engine

    def body() -> None:
        overrides = list(set_ or [])
        if as_json:
            overrides.append("train.run.progress=false")
        engine = load_engine(_train_config(config, resume), overrides)
        log_to_stderr()
        result = Trainer(engine, resume, init_from).train()
        if not engine.env.main:
            return
        if as_json:
            emit_json({
                "config": engine.config.model_dump(mode="json"),
                "loss_path": engine.loss_path(),
                "run_dir": str(result.run_dir),
                "report": result.report.to_dict() if result.report else None,
                "scan": result.scan.to_dict() if result.scan else None,
                "steps": [s.to_dict() for s in result.steps],
                "summary": result.summary(engine.config.train.run.summary_warmup_steps),
            })
            return
        if result.report is not None:
            render_report(result.report, out)
            if result.scan is not None:
                render_scan(result.scan, "the trained model")
        else:
            out.print("Liger: off (model.liger_kernel.enabled is false); the model trained unpatched.", markup=False)
        out.print(f"loss path: {engine.loss_path()}", markup=False, soft_wrap=True)
        out.print(result.summary_line(engine.config.train.run.summary_warmup_steps), markup=False, soft_wrap=True)

    run(body)


def _train_config(config: str | None, resume: str | None) -> str:
    """The config to train: as given (a recipe folder picks its cpu/gpu config), or the resumed run's."""
    from pathlib import Path

    from ligerkit.environment import accelerator
    from ligerkit.errors import InvalidOptionError
    from ligerkit.train.recipe.loading import config_of
    from ligerkit.train.config.paths import check_path

    for option, value in (("CONFIG", config), ("--resume", resume)):
        try:
            if value is not None:
                check_path(value, option)
        except ValueError as exc:
            raise InvalidOptionError(str(exc)) from None
    if config is None:
        if resume is None:
            raise InvalidOptionError("give a config (or a recipe folder) to train, or --resume RUN_DIR")
        from ligerkit.train.config.run_files import CONFIG_FILE

        return str(Path(resume) / CONFIG_FILE)
    return str(config_of(config, gpu=accelerator() is not None))


@command("GPU: per-parameter gradients, then loss curves, Liger off/on.")
def smoke(
    target: Annotated[str, typer.Argument(metavar="RECIPE_OR_CONFIG",
                                          help="Recipe folder (uses configs/gpu.yaml) or a config file.")],
    steps: Annotated[int, typer.Option(metavar="N", help="Training steps per arm.")] = 20,
    set_: Annotated[list[str] | None, set_option("Config override for both arms", "--set train.optim.lr=1e-4")] = None,
    nproc: Annotated[int, typer.Option(metavar="N", help="GPUs per arm (torchrun + FSDP2 when > 1).")] = 1,
    grad_factor: Annotated[float, typer.Option(metavar="X", help="Gradient check: a tensor fails when its relative "
                                               "error against float32 exceeds this x eager's + --grad-slack.")] = 2.0,
    grad_slack: Annotated[float, typer.Option(metavar="X", help="Gradient check: added to the bound.")] = 0.01,
    out_dir: Annotated[str, typer.Option("--out", metavar="DIR", help="Folder for smoke.json and smoke.png.")
                       ] = "runs/smoke",
    as_json: JsonOpt = False,
) -> None:
    """Prove Liger on a recipe: step-1 gradients per parameter, then the loss curve, Liger off vs on.

    First, in a process of its own: the recipe's model with Liger off in float32 (the truth), off in the
    training dtype, and on; every parameter tensor's relative gradient error against float32 must stay
    within GRAD_FACTOR x eager's + GRAD_SLACK. Then each arm trains in its own process from the same seed
    and data: per-step loss and grad norm within a dtype tolerance. Exit 1 when either fails; exit 4 when
    everything compared passes but some trainable parameter got no gradient from the sample (PARTIAL: the
    verdict names them); exit 3 (with a message) on a machine without a GPU.
    """
    from pathlib import Path

    from ligerkit.proof import arm_runs, smoke
    from ligerkit.proof.bench_options import check_run_options
    from ligerkit.proof.grads import exit_code
    from ligerkit.proof.grads_apart import recipe_grad_parity_apart
    from ligerkit.train.config import load_recipe_config
    from ligerkit.probe.tolerance import GradTolerance

    def body() -> None:
        config = arm_runs.resolve_config(target)
        grad_tolerance = tolerance(GradTolerance, grad_factor, grad_slack)
        check_run_options(steps, 0, nproc)
        load_recipe_config(config, list(set_ or []))  # a bad config or --set is named before the GPU check
        require_gpu("smoke")
        import torch

        overrides = list(set_ or [])
        result = smoke.smoke(config, steps, overrides, arm_runs.default_runner(), nproc,
                              gradients=lambda: recipe_grad_parity_apart(config, overrides, torch.device("cuda"),
                                                                         grad_tolerance))
        files = smoke.write_outputs(result, Path(out_dir))
        if as_json:
            emit_json(result.to_dict())
        else:
            out.print(result.table(), markup=False)
            if result.gradients is not None:
                out.print(result.gradients.summary(), markup=False, soft_wrap=True)
            out.print(f"max loss gap {max(result.loss_gaps):.2e} (tolerance {result.loss_tolerance:g}, {result.dtype}); "
                      f"max grad-norm gap {max(result.grad_norm_rel_gaps):.1%} (tolerance {result.grad_norm_rtol:.0%})"
                      f": {result.verdict}; wrote {', '.join(map(str, files))}", markup=False)
        if not result.passed:
            raise typer.Exit(exit_code(result.verdict))

    run(body)


@command("GPU: tokens/s, memory and MFU per arm, and the arm to train with.")
def bench(
    target: Annotated[str, typer.Argument(metavar="RECIPE_OR_CONFIG",
                                          help="Recipe folder (uses configs/gpu.yaml) or a config file.")],
    arms: Annotated[str, typer.Option(
        metavar="NAMES", show_default=False,
        help="Comma-separated, from: eager (Liger off), liger (kernel swaps), liger_fused (swaps + fused loss), "
             "compile (torch.compile per decoder layer), liger_compile (swaps + compile), compile_fused "
             "(compile + fused loss, no swaps), liger_compile_fused (swaps + compile + fused loss). "
             "Default: all seven.")] = _ALL_ARMS,
    steps: Annotated[int, typer.Option(metavar="N", help="Training steps per arm.")] = 20,
    warmup: Annotated[int, typer.Option(metavar="N", help="First steps excluded from timing.")] = 5,
    repeats: Annotated[int, typer.Option(
        metavar="N", help="Rounds: every arm runs N times (eager first in each round); speed and MFU are "
                          "medians of the runs, speed ratios the median of per-round ratios, peak memory and "
                          "loss gaps the worst round's.")] = 1,
    set_: Annotated[list[str] | None, set_option("Config override for every arm", "--set data.seq_len=1024")] = None,
    nproc: Annotated[int, typer.Option(metavar="N", help="GPUs per arm (torchrun + FSDP2 when > 1).")] = 1,
    loss_tolerance: Annotated[float, typer.Option(
        metavar="X", help="Recommendation: an arm's largest per-step loss difference from eager (absolute) "
                          "may be at most this.")] = 1e-2,
    loss_reference: Annotated[str, typer.Option(
        metavar="eager|float32", help="float32: after the rounds, train eager once more in float32 and also "
                                      "accept an arm whose loss is no further from float32's than eager's is "
                                      "(+ --loss-tolerance); for configs where bf16 eager drifts, as with LoRA. "
                                      "A float32 run that does not fit is tried again with activation checkpointing, "
                                      "then said, and eager's rule stays.")] = "eager",
    no_grads: Annotated[bool, typer.Option(
        "--no-grads", help="Skip the step-1 gradient check (the recommendation then uses the loss rule "
                           "only, and says so).")] = False,
    grad_factor: Annotated[float, typer.Option(metavar="X", help="Gradient check: a tensor fails when its relative "
                                               "error against float32 exceeds this x its reference arm's "
                                               "+ --grad-slack.")] = 2.0,
    grad_slack: Annotated[float, typer.Option(metavar="X", help="Gradient check: added to the bound.")] = 0.01,
    grad_set: Annotated[list[str] | None, typer.Option(
        "--grad-set", metavar="KEY=VALUE", show_default=False,
        help="Config override for the gradient check alone, after --set (repeat for several), e.g. "
             "--grad-set data.seq_len=1024 where a float32 copy of the model does not fit at the training "
             "length; bench.md says what the check ran with.")] = None,
    out_dir: Annotated[str, typer.Option("--out", metavar="DIR", help="Folder for bench.json, bench.md and bench.png, "
                                         "and bench_runs.jsonl (each run as it ends).")] = "runs/bench",
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the bench stopped part way in --out DIR: the runs its bench_runs.jsonl holds "
                         "are read back, not run again; refused when the config file, --set lines, options, "
                         "GPU, package versions, ligerkit's code or the recipe's Python files differ.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Each arm in its own process: median tokens/s, peak memory and MFU, with ratios against eager;
    then the arm to train with.

    After the arms (whose table is written first), this process takes every arm's step-1 gradients on
    one sample on one GPU against a float32 run
    (each parameter within GRAD_FACTOR x the reference arm's error + GRAD_SLACK; the reference is
    eager, or compile for compiled arms). The recommendation, printed last and written to bench.json
    and bench.md, is the fastest arm whose per-step loss stays within --loss-tolerance of eager's (with
    --loss-reference float32: or is no further from a float32 run's than eager's is) and whose
    gradients pass, with the config lines that select it (train.arm: NAME). Each arm's run sets
    train.arm to its own name, whatever the config says. An arm that runs out of memory is a result:
    named under the table and left out of the ratios and the recommendation (eager, the reference,
    must fit). Each run is kept in bench_runs.jsonl as it ends; --resume continues a stopped bench
    from there. Exit 3 (with a message) without a GPU.
    """
    from pathlib import Path

    from rich.progress import Progress

    from ligerkit.errors import ConfigError, InvalidOptionError
    from ligerkit.probe.tolerance import GradTolerance
    from ligerkit.proof import bench as B
    from ligerkit.proof import bench_output as BO
    from ligerkit.proof import bench_options as BOpt
    from ligerkit.proof.arm_runs import default_runner, resolve_config
    from ligerkit.proof.bench_log import BenchLog, bench_identity, check_resumable
    from ligerkit.proof.recommend import Recommendation
    from ligerkit.train.config import load_recipe_config

    def body() -> None:
        config = resolve_config(target)
        overrides = list(set_ or [])
        grad_lines = list(grad_set or [])
        if grad_lines and no_grads:
            raise InvalidOptionError("--grad-set sets the gradient check, which --no-grads skips; give one of them")
        options = BOpt.BenchOptions(BOpt.parse_arms(arms), steps=steps, warmup=warmup, repeats=repeats, nproc=nproc,
                                    loss_tolerance=loss_tolerance, loss_reference=loss_reference,
                                    grad_tolerance=tolerance(GradTolerance, grad_factor, grad_slack),
                                    grad_overrides=tuple(grad_lines))  # every option checked here, once
        chosen = list(options.arms)
        load_recipe_config(config, overrides)  # a bad config or --set is named before the GPU check
        B.check_arm_configs(config, chosen, overrides, steps)
        if grad_lines:
            try:
                load_recipe_config(config, [*overrides, *B.GRADIENT_PASS_LINES, *grad_lines])
            except ConfigError as exc:  # name the option the user gave, not only the file it was applied to
                said = str(exc)
                for line in grad_lines:  # where the loader says "--set LINE", the line came from --grad-set
                    said = said.replace(f"--set {line!r}", f"--grad-set {line!r}").replace(f"--set {line}",
                                                                                           f"--grad-set {line}")
                shown = " ".join(f"--grad-set {line!r}" for line in grad_lines)
                raise ConfigError(f"{shown} (the gradient check's overrides, after --set): {said}",
                                  exc.problems) from None

        identity = bench_identity(config, overrides, chosen, steps, warmup, repeats, nproc, loss_reference, {})
        if resume:  # nothing to continue, or another bench's log, is said before the GPU check
            check_resumable(Path(out_dir), identity)
        require_gpu("bench")
        import torch

        gradients = None if no_grads else B.recipe_gradients(config, overrides, torch.device("cuda"), grad_lines)
        machine = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
        log = BenchLog(Path(out_dir), {**identity, "machine": machine}, resume)
        with Progress(console=err, disable=as_json) as progress:
            task = progress.add_task("bench arms", total=len(chosen) * repeats + (gradients is not None)
                                     + (loss_reference == "float32"))
            result = B.bench(config, options, overrides, default_runner(), on_arm=lambda arm: progress.advance(task),
                             gradients=gradients, on_speed=lambda partial: BO.write_outputs(partial, Path(out_dir)),
                             log=log)
        files = BO.write_outputs(result, Path(out_dir))
        if as_json:
            emit_json(result)
        else:
            out.print(BO.to_markdown(result), markup=False)
            out.print(f"wrote {', '.join(map(str, files))}", markup=False)
            for line in Recommendation.from_dict(result["recommendation"]).lines():
                out.print(line, markup=False, soft_wrap=True)

    run(body)
