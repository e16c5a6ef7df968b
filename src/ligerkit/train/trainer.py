"""``Trainer``: runs any recipe. The loop, the optimizer, FSDP2, the run folder, checkpoints, stops.

The loss is the recipe's own token-normalized loss (``train.loss``): cross entropy summed over valid
(non-ignored) shifted tokens, divided by the count of valid tokens over the whole optimizer step
(all micro-batches, all ranks). Every run writes its folder (``run_dir.py``), says what it does
through the ``ligerkit`` logger (the Liger report before the first step, so a run that dies still
said what it swapped), checkpoints every ``train.run.checkpoint_every`` steps, resumes exactly, and stops
cleanly on SIGINT/SIGTERM, ``train.run.stop_after_steps`` or a non-finite number (``stopping.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from ligerkit.errors import LigerKitError
from ligerkit.train.run import checkpoint, resume, status, storage, folder as run_dir
from ligerkit.train.recipe.adapters import fingerprint_when_needed, training_line
from ligerkit.train import distributed as D
from ligerkit.train.distributed import pick_device, use_deterministic_algorithms
from ligerkit.compile.layers import compile_layers
from ligerkit.train.config.compile_mode import COMPILED
from ligerkit.train.flops import flops_per_token, peak_flops
from ligerkit.train.metrics import MetricsLog, StepMetrics
from ligerkit.train.recipe.engine import Batch, RecipeEngine
from ligerkit.train.result import TrainResult
from ligerkit.train.run.folder import RunDirError
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.train.staging import StagedData
from ligerkit.train.step import StepModule, as_float, dropout_seed, total_norm
from ligerkit.train.update import clip_to, update
from ligerkit.train.stopping import EXIT_CODES, STOPPED_AFTER_STEPS, TrainingStopped, graceful_signals
from ligerkit.train.config.run_files import METRICS_FILE

log = logging.getLogger("ligerkit.train")


class Trainer:
    """Trains one recipe (a :class:`RecipeEngine`) for ``train.steps`` optimizer steps.

    ``resume`` is a run folder to continue from its newest intact checkpoint, with the config it
    trained with (``ligerkit.train.run.resume``); ``init_from`` starts a new run from the model weights
    of a run folder's newest intact checkpoint, or of one ``checkpoints/step_N`` folder.
    """

    def __init__(self, engine: RecipeEngine, resume: str | Path | None = None, init_from: str | Path | None = None):
        if resume is not None and init_from is not None:
            raise RunDirError("--resume continues a run and --init-from starts a new one from a checkpoint's weights: "
                              "give one of the two")
        self.engine = engine
        self.config = engine.config
        self.env = engine.env
        self.resume = str(resume) if resume is not None else None
        self.init_from = str(init_from) if init_from is not None else None
        self.run: Path | None = None
        self.resume_seconds: float | None = None
        self._lock: IO[str] | None = None
        self._init_source: Path | None = None  # the checkpoint --init-from names, checked as the run opens
        self._stepped = False  # whether the training loop began (a failure before it leaves no run folder)
        self._existed: Path | None = None  # the deepest folder there before this run's was made
        self._frozen: Callable[[], str | None] = lambda: None  # the frozen weights' hash (train.lora), once built

    def train(self, device: torch.device | None = None) -> TrainResult:
        """Set everything up in order, train, log each step; the kit is reverted at the end."""
        device = device or pick_device(self.env)
        D.init(self.env, device)
        clean = False
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            if self.config.train.deterministic:
                use_deterministic_algorithms()
            with graceful_signals() as stop, storage.writing("a file of the run", lambda: self.run):
                result = self._train(device, stop)  # a full or read-only disk: a StorageError saying what to do
            clean = True
            return result
        finally:
            torch.use_deterministic_algorithms(was_deterministic)
            self.engine.liger_kit.revert()
            D.shutdown(self.env, barrier=clean)
            if not clean and self.resume is None and self.env.main and self.run is not None and not self._stepped:
                resume.discard_unstarted(self.run, self._existed)  # refused before its first step: no folder left
            if self._lock is not None:  # released after the folder is gone: no other process sees it half-removed
                self._lock.close()  # the OS would drop it at exit anyway
                self._lock = None

    def resolved_config(self) -> dict[str, Any]:
        """The config this run trains with, as ``config.yaml`` and ``run.json`` record it."""
        resolved = self.config.model_dump(mode="json")
        if self.engine.recipe_dir is not None:  # the run's config.yaml resumes from anywhere
            resolved["recipe"] = str(self.engine.recipe_dir)
        return resolved

    def _open_run(self) -> None:
        t = self.config.train
        self._existed = resume.deepest_existing(Path(t.run.output_dir or Path(t.run.runs_dir) / self.config.name))
        self.run, self._lock, self._init_source = resume.open_run(
            t.run.output_dir, t.run.runs_dir, self.config.name, self.resume, self.env, self.resolved_config,
            getattr(self.engine, "overrides", ()), self.init_from)

    def _train(self, device: torch.device, stop: object) -> TrainResult:
        t, main = self.config.train, self.env.main
        self.engine.check_footprint(device)  # a config that cannot fit is refused before its folder exists
        self._open_run()
        model = set_up_model(self.engine, device)
        self.engine.check_loss_path(model, device)  # a refused loss path leaves no run folder
        if main:  # announced once the checks that can refuse the run have passed
            log.info("%s: %d steps on %s x %d, Liger %s, loss %s, compile %s; run folder %s", self.config.name, t.steps,
                     device, self.env.world_size, "on" if self.engine.liger_enabled else "off", self.engine.loss.name,
                     t.compile, self.run)
        report = self.engine.liger_kit.report if self.engine.liger_kit.active else None
        if main and report is not None:
            log.info("Liger:\n%s", report)
        if main and self.resume is None:
            liger = {"report": report.to_dict(), "scan": self.engine.scan.to_dict() if self.engine.scan else None} \
                if report is not None else None
            resolved = self.resolved_config()
            run_dir.write_start(self.run, resolved, liger)
            resume.record(self.run, resolved)
        self._frozen = fingerprint_when_needed(model, now=self.env.distributed)  # before sharding under torchrun
        if main and (t.lora is not None or t.activation_checkpointing):
            log.info("training: %s", training_line(model, t))
        data = StagedData(self.data(model), device, t.drop_right_padding_mask, t.steps)
        flops = flops_per_token(model, self.config.data.seq_len)
        if t.compile in COMPILED:
            self.compile_model(model)
        step_module = StepModule(self.engine, model, self.engine.loss, t.autocast_bf16,
                                 self.engine.recomputes_glu_products, self.engine.recomputes_norm_outputs)
        if self.env.distributed:
            D.shard(step_module, self.engine.fsdp_units(model))
        optimizer = self.optimizer(step_module)
        start = self._resume_from(step_module, optimizer)
        if self._init_source is not None:
            resume.init_weights(self._init_source, step_module, self.env, self._frozen())
        if device.type == "cuda":  # peak memory is the training loop's, not the set-up checks'
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        metrics_log = MetricsLog(self.run / METRICS_FILE if main else None, t.steps, t.run.progress and main,
                                 self.config.name, t.run.log_every, done=start)
        result = TrainResult(report=report, scan=self.engine.scan, run_dir=self.run, first_step=start,
                             resume_seconds=self.resume_seconds)
        peak = peak_flops(device, t.run.peak_tflops)
        self._stepped, ended = True, False  # from here a failure keeps the folder: it says which step failed
        with status.recorded(self.run if main else None, start, t.steps, lambda: start + len(result.steps)):
            try:
                for step in range(start, t.steps):
                    metrics = self._timed_step(step, step_module, optimizer, data, device, flops, peak)
                    if step == start and self.engine.offload is not None and main:
                        log.info("activation offload: %s", self.engine.offload.first_step())
                    result.steps.append(metrics)
                    metrics_log.log(metrics)
                    self._after_step(step, start, step_module, optimizer, device, stop)
                ended = True
            finally:
                metrics_log.close()
                if main:  # a full disk at the plot is an error only when nothing else went wrong
                    run_dir.plot_losses(self.run, self.config.name, strict=ended)
        if main:
            earlier = run_dir.metrics_rows(self.run, through=start) if start else []
            run_dir.write_json(self.run / "summary.json", result.summary(t.run.summary_warmup_steps, earlier))
            log.info("%s", result.summary_line(t.run.summary_warmup_steps))
        return result

    def _resume_from(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """Load the newest intact checkpoint when resuming (every file checked first); its metrics rows, none after."""
        if self.resume is None:
            return 0
        began = time.perf_counter()  # the checks count as part of the resume
        found = checkpoint.usable(self.run, self.env)
        resume.check_room(self.run, found, self.config.train.steps)  # before any file is touched
        done = checkpoint.load(found, model, optimizer, self.env, self._frozen())
        self.resume_seconds = round(time.perf_counter() - began, 3)
        if self.env.main:
            kept = run_dir.keep_metrics_through(self.run, done, run_dir.saved_rows(found))  # each step once
            log.info("resuming %s at step %d from %s, loaded in %.1f s (%d metrics rows kept)", self.run, done,
                     found, self.resume_seconds, kept)
        return done

    def _after_step(self, step: int, start: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    device: torch.device, stop: object) -> None:
        """Checkpoint when due; stop (checkpoint first) on a signal or after ``train.run.stop_after_steps``."""
        t, done = self.config.train, step + 1
        signum = D.agree_max(float(getattr(stop, "signal", None) or 0), self.env, device)  # every rank agrees
        limit = t.run.stop_after_steps is not None and done - start >= t.run.stop_after_steps and done < t.steps
        due = t.run.checkpoint_every is not None and done % t.run.checkpoint_every == 0
        if not (due or signum or limit):
            return
        saved = checkpoint.save(self.run, done, model, optimizer, self.env, t.run.keep_checkpoints, self._frozen(),
                                run_dir.metrics_rows(self.run, through=done) if self.env.main else None)  # rows kept
        if self.env.main:
            log.info("checkpoint after step %d: %s", done, saved)
        if signum or limit:
            code = EXIT_CODES.get(int(signum), STOPPED_AFTER_STEPS) if signum else STOPPED_AFTER_STEPS
            why = f"signal {int(signum)}" if signum else f"train.run.stop_after_steps={t.run.stop_after_steps}"
            raise TrainingStopped(f"stopped after step {done} of {t.steps} ({why}); checkpoint in {saved}. Continue "
                                  f"with `ligerkit train --resume {self.run}`", code)

    def _timed_step(self, step: int, model: StepModule, optimizer: torch.optim.Optimizer,
                    data: StagedData, device: torch.device, flops: float,
                    peak: float | None) -> StepMetrics:
        lr = self.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # the first step's data is made untimed; every later step's was made and queued inside the
        # step before, while the host waited for the GPU (``staging.py``)
        batches = data.host(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        loss, norm, tokens = self.train_step(model, optimizer, batches, device, step, data)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - begin
        seen = sum(b["input_ids"].numel() for b in batches) * self.env.world_size
        per_device = seen / elapsed / self.env.world_size
        return StepMetrics(
            step=step + 1, loss=loss, grad_norm=norm, lr=lr, valid_tokens=tokens,
            tokens_per_s=seen / elapsed, tokens_per_s_per_device=per_device, step_time_s=elapsed,
            peak_mem_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
            mfu=flops * per_device / peak if peak else None,
        )

    def data(self, model: torch.nn.Module) -> Callable[[int], list[Batch]]:
        """The data source: global step -> this rank's micro-batches (deterministic)."""
        vocab = model.get_output_embeddings().weight.shape[0]
        return lambda step: self.micro_batches(step, vocab)

    def _first_samples(self, step: int) -> list[int]:
        t = self.config.train
        per_rank = t.global_batch_size // self.env.world_size
        if per_rank * self.env.world_size != t.global_batch_size or per_rank % t.micro_batch_size:
            raise LigerKitError(
                f"train.global_batch_size {t.global_batch_size} must split into {self.env.world_size} ranks "
                f"x whole micro-batches of {t.micro_batch_size}; change the batch sizes."
            )
        base = step * t.global_batch_size + self.env.rank * per_rank
        return list(range(base, base + per_rank, t.micro_batch_size))

    def micro_batches(self, step: int, vocab_size: int) -> list[Batch]:
        """This rank's micro-batches of global step ``step``."""
        size = self.config.train.micro_batch_size
        return [self.engine.make_batch(first, size, vocab_size) for first in self._first_samples(step)]

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """AdamW over every trainable parameter (fused on CUDA when ``train.optim.fused_adamw``)."""
        t = self.config.train
        params = [p for p in model.parameters() if p.requires_grad]
        fused = t.optim.fused_adamw and all(p.device.type == "cuda" for p in params)
        return torch.optim.AdamW(params, lr=t.optim.lr, betas=t.optim.betas, weight_decay=t.optim.weight_decay, fused=fused or None)

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then constant."""
        t = self.config.train
        return t.optim.lr * min(1.0, (step + 1) / t.optim.warmup_steps) if t.optim.warmup_steps else t.optim.lr

    def compile_model(self, model: torch.nn.Module) -> list[str]:
        """``torch.compile`` each decoder layer in place (the whole model when it has none); returns
        the compiled module paths (``ligerkit.train.compile.compile_layers``)."""
        return compile_layers(model, self.engine.fsdp_units(model))

    def train_step(self, model: StepModule, optimizer: torch.optim.Optimizer, batches: list[Batch],
                   device: torch.device, step: int = 0, data: StagedData | None = None) -> tuple[float, float, int]:
        """One optimizer step; returns (loss, grad norm, valid tokens). A non-finite loss or gradient
        norm raises :class:`NonFiniteError` with the weights not updated (``ligerkit.train.update``).

        With ``data`` (the run's :class:`StagedData`, from which ``batches`` came), the batches staged
        for this step are used, and the next step's are staged before the step's one read.
        """
        if data is None:
            data = StagedData(lambda _: batches, device, self.config.train.drop_right_padding_mask, step + 1)
        moved = data.take(step, batches)
        # counted on the host from the batches before they moved (one sync per step only across ranks)
        tokens = float(moved.tokens)
        if self.env.distributed:
            tokens = D.all_reduce_sum(torch.tensor(tokens, device=device), self.env).item()
        count = max(tokens, 1.0)  # an all-ignored step contributes zero loss, never NaN
        # FSDP averages gradients over ranks; the world-size factor keeps them sums / count.
        scale = self.env.world_size / count
        loss_sum = torch.zeros((), device=device)
        firsts = self._first_samples(step)
        for first, batch in zip(firsts if len(firsts) == len(batches) else range(len(batches)), moved.on_device,
                                strict=True):
            torch.manual_seed(dropout_seed(self.config.seed, first))  # dropout follows the data, not the rank
            part = model(batch, scale)
            part.backward()
            loss_sum += part.detach()
        total = D.all_reduce_sum(loss_sum, self.env)
        loss, norm = update(model, optimizer, total, total_norm(model), max_norm=self.config.train.optim.grad_clip,
                            world_size=self.env.world_size, step=step, while_waiting=lambda: data.stage(step + 1))
        return loss, norm, int(tokens)

    def clip(self, model: torch.nn.Module) -> float:
        """Clip to ``train.optim.grad_clip`` by the total gradient norm, taken in float32; return that norm."""
        norm = total_norm(model)
        clip_to(model, self.config.train.optim.grad_clip, norm)
        return as_float(norm) if norm is not None else 0.0
