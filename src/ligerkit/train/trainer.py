"""``Trainer``: runs any recipe. The loop, the optimizer, FSDP2, metrics; the recipe declares the rest.

The loss is the recipe's own token-normalized loss (``train.loss``): cross entropy summed over valid
(non-ignored) shifted tokens, divided by the count of valid tokens over the whole optimizer step
(all micro-batches, all ranks). Every run says what it does through the ``ligerkit`` logger: the
Liger report when the model is built (before the first step, so a run that dies still said what it
swapped), progress, and a summary at the end.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ligerkit.environment import accelerator
from ligerkit.errors import LigerKitError
from ligerkit.kit import LigerKernelReport, ScanResult
from ligerkit.loss import valid_tokens
from ligerkit.train import distributed as D
from ligerkit.train.flops import flops_per_token, peak_flops
from ligerkit.train.metrics import MetricsLog, StepMetrics
from ligerkit.train.recipe import Batch, RecipeEngine
from ligerkit.train.step import StepModule, device_batch

log = logging.getLogger("ligerkit.train")


@dataclass
class TrainResult:
    """What ``train`` returns: every step's metrics, the kit report and the scan."""

    steps: list[StepMetrics] = field(default_factory=list)
    report: LigerKernelReport | None = None
    scan: ScanResult | None = None

    @property
    def median_tokens_per_s(self) -> float:
        """Median tokens/s over the steps after the first (warm-up), or the only step's."""
        timed = self.steps[1:] or self.steps
        return statistics.median(s.tokens_per_s for s in timed) if timed else 0.0


def pick_device(env: D.DistEnv) -> torch.device:
    """The local accelerator for this rank, else the CPU."""
    kind = accelerator()
    return torch.device(kind, env.local_rank) if kind in ("cuda", "npu") else torch.device("cpu")


def use_deterministic_algorithms() -> None:
    """Make a run repeatable bit for bit: PyTorch's deterministic kernels (flash attention's
    backward included) and a fixed cuBLAS workspace. An op with no deterministic kernel then
    raises instead of running. The Liger kernels the recipes use (RMSNorm, RoPE, SwiGLU, cross
    entropy) reduce without atomics in liger-kernel 0.8.5."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


class Trainer:
    """Trains one recipe (a :class:`RecipeEngine`) for ``train.steps`` optimizer steps."""

    def __init__(self, recipe: RecipeEngine):
        self.recipe = recipe
        self.config = recipe.config
        self.env = recipe.env

    def train(self, device: torch.device | None = None) -> TrainResult:
        """Set everything up in order, train, log each step; the kit is reverted at the end."""
        device = device or pick_device(self.env)
        D.init(self.env, device)
        clean = False
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            if self.config.train.deterministic:
                use_deterministic_algorithms()
            result = self._train(device)
            clean = True
            return result
        finally:
            torch.use_deterministic_algorithms(was_deterministic)
            self.recipe.liger_kit.revert()
            D.shutdown(self.env, barrier=clean)

    def _train(self, device: torch.device) -> TrainResult:
        t = self.config.train
        main = self.env.main
        if main:
            log.info("%s: %d steps on %s x %d, Liger %s, loss %s", self.config.name, t.steps, device,
                     self.env.world_size, "on" if self.recipe.liger_enabled else "off", self.recipe.loss.name)
        model = self.recipe.setup_model(device)
        if main and self.recipe.liger_enabled:
            log.info("Liger:\n%s", self.recipe.liger_kit.report)
        self.recipe.check_loss_path(model, device)
        data = self.data(model)
        flops = flops_per_token(model, self.config.data.seq_len)
        if t.compile:
            self.compile_model(model)
        step_module = StepModule(self.recipe, model, self.recipe.loss, t.autocast_bf16)
        if self.env.distributed:
            D.shard(step_module, self.recipe.fsdp_units(model))
        optimizer = self.optimizer(step_module)
        if device.type == "cuda":  # peak memory is the training loop's, not the set-up checks'
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        peak = peak_flops(device, t.peak_tflops)
        out = Path(t.output_dir) if t.output_dir else None
        metrics_log = MetricsLog(out / "metrics.jsonl" if out and main else None, t.steps, t.progress and main,
                                 self.config.name, t.log_every)
        result = TrainResult(report=self.recipe.liger_kit.report if self.recipe.liger_kit.active else None,
                             scan=self.recipe.scan)
        try:
            for step in range(t.steps):
                result.steps.append(self._timed_step(step, step_module, optimizer, data, device, flops, peak))
                metrics_log.log(result.steps[-1])
        finally:
            metrics_log.close()
        if main:
            first, last = result.steps[0], result.steps[-1]
            log.info("%s: trained %d steps, loss %.4f -> %.4f, median %s tokens/s%s", self.config.name,
                     len(result.steps), first.loss, last.loss, f"{result.median_tokens_per_s:,.0f}",
                     f"; metrics in {out / 'metrics.jsonl'}" if out else "")
        return result

    def _timed_step(self, step: int, model: StepModule, optimizer: torch.optim.Optimizer,
                    data: Callable[[int], list[Batch]], device: torch.device, flops: float,
                    peak: float | None) -> StepMetrics:
        lr = self.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batches = data(step)  # data generation is not timed
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        loss, norm, tokens = self.train_step(model, optimizer, batches, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        seen = sum(b["input_ids"].numel() for b in batches) * self.env.world_size
        per_device = seen / elapsed / self.env.world_size
        return StepMetrics(
            step=step, loss=loss, grad_norm=norm, lr=lr, valid_tokens=tokens,
            tokens_per_s=seen / elapsed, tokens_per_s_per_device=per_device, step_time_s=elapsed,
            peak_mem_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
            mfu=flops * per_device / peak if peak else None,
        )

    def data(self, model: torch.nn.Module) -> Callable[[int], list[Batch]]:
        """The data source: global step -> this rank's micro-batches (deterministic)."""
        vocab = model.get_output_embeddings().weight.shape[0]
        return lambda step: self.micro_batches(step, vocab)

    def micro_batches(self, step: int, vocab_size: int) -> list[Batch]:
        """This rank's micro-batches of global step ``step``."""
        t = self.config.train
        per_rank = t.global_batch_size // self.env.world_size
        if per_rank * self.env.world_size != t.global_batch_size or per_rank % t.micro_batch_size:
            raise LigerKitError(
                f"train.global_batch_size {t.global_batch_size} must split into {self.env.world_size} ranks "
                f"x whole micro-batches of {t.micro_batch_size}; change the batch sizes."
            )
        base = step * t.global_batch_size + self.env.rank * per_rank
        return [self.recipe.make_batch(base + i, t.micro_batch_size, vocab_size)
                for i in range(0, per_rank, t.micro_batch_size)]

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """AdamW over every trainable parameter (fused on CUDA when ``train.fused_adamw``)."""
        t = self.config.train
        params = [p for p in model.parameters() if p.requires_grad]
        fused = t.fused_adamw and all(p.device.type == "cuda" for p in params)
        return torch.optim.AdamW(params, lr=t.lr, betas=t.betas, weight_decay=t.weight_decay, fused=fused or None)

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then constant."""
        t = self.config.train
        return t.lr * min(1.0, (step + 1) / t.warmup_steps) if t.warmup_steps else t.lr

    def compile_model(self, model: torch.nn.Module) -> list[str]:
        """``torch.compile`` each decoder layer in place (the whole model when it has none); returns
        the compiled module paths. Liger's kernels inside a layer stay Liger's."""
        units = set(self.recipe.fsdp_units(model))
        compiled = [name for name, m in model.named_modules() if type(m).__name__ in units]
        for name in compiled:
            model.get_submodule(name).compile()
        if not compiled:
            model.compile()
            compiled = ["<model>"]
        return compiled

    def train_step(self, model: StepModule, optimizer: torch.optim.Optimizer, batches: list[Batch],
                   device: torch.device) -> tuple[float, float, int]:
        """One optimizer step; returns (loss, grad norm, valid tokens)."""
        local = torch.tensor(float(sum(valid_tokens(b["labels"]) for b in batches)), device=device)
        total = D.all_reduce_sum(local, self.env)
        count = max(total.item(), 1.0)  # an all-ignored step contributes zero loss, never NaN
        # FSDP averages gradients over ranks; the world-size factor keeps them sums / count.
        scale = self.env.world_size / count
        loss_sum = torch.zeros((), device=device)
        for batch in batches:
            part = model(device_batch(batch, device, self.config.train.drop_right_padding_mask), scale)
            part.backward()
            loss_sum += part.detach()
        norm = self.clip(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = D.all_reduce_sum(loss_sum, self.env).item() / self.env.world_size
        return loss, norm, int(total.item())

    def clip(self, model: torch.nn.Module) -> float:
        """Clip to ``train.grad_clip`` by the total gradient norm, taken in float32; return that norm.

        ``clip_grad_norm_`` takes the norm in the gradients' dtype: for bf16 gradients the clip
        factor then moves in steps of 0.4-0.8%, and two runs whose gradients differ in the last
        bit can be clipped by factors that far apart.
        """
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in params:  # one foreach launch per (device, dtype), as clip_grad_norm_ groups them
            groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        first = params[0].grad.device
        norms = [n.to(first) for grads in groups.values()
                 for n in torch._foreach_norm(grads, 2.0, dtype=torch.float32)]
        total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
        if self.config.train.grad_clip:
            torch.nn.utils.clip_grads_with_norm_(params, self.config.train.grad_clip, total)
        full = getattr(total, "full_tensor", None)
        return float(full() if callable(full) else total)
