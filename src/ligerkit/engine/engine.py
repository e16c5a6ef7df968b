"""``Engine``: the recipe host. ``prepare_model`` = kit.apply, then build, then kit.verify.

Recipes subclass it and override hooks: ``custom_patches`` (their own map), ``official_family``,
``build_model`` (custom models), ``make_batch`` (other modalities), ``forward_logits``; the
lifecycle hooks are ``prepare_model``, ``prepare_data``, ``prepare_optimizer``, ``train_step`` and
``train``. The loss
is always the recipe's own: cross entropy summed over valid (non-ignored) shifted tokens, divided
by the count of valid tokens over the whole optimizer step (all micro-batches, all ranks).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path


import torch
import torch.nn.functional as F

from ligerkit.engine import distributed as D
from ligerkit.engine.config import RecipeConfig
from ligerkit.engine.data import IGNORE_INDEX, text_batch
from ligerkit.engine.flops import flops_per_token, peak_flops
from ligerkit.engine.metrics import MetricsLog, StepMetrics
from ligerkit.engine.model_kit import ModelKit
from ligerkit.environment import accelerator
from ligerkit.errors import LigerKitError
from ligerkit.kit.core import LigerKernelKit
from ligerkit.kit.custom import CustomPatches
from ligerkit.kit.report import LigerKernelReport
from ligerkit.kit.scan import ScanResult

Batch = dict[str, torch.Tensor]


class LigerNeedsAcceleratorError(LigerKitError):
    """Liger is enabled but there is neither a CUDA GPU nor an NPU here."""


@dataclass
class TrainResult:
    """What ``train`` returns: every step's metrics, the kit report and the scan."""

    steps: list[StepMetrics] = field(default_factory=list)
    report: LigerKernelReport | None = None
    scan: ScanResult | None = None


def pick_device(env: D.DistEnv) -> torch.device:
    """The local accelerator for this rank, else the CPU."""
    kind = accelerator()
    if kind == "cuda":
        return torch.device("cuda", env.local_rank)
    if kind == "npu":
        return torch.device("npu", env.local_rank)
    return torch.device("cpu")


def use_deterministic_algorithms() -> None:
    """Make a run repeatable bit for bit: PyTorch's deterministic kernels (flash attention's
    backward included) and a fixed cuBLAS workspace. An op with no deterministic kernel then
    raises instead of running. The Liger kernels the recipes use (RMSNorm, RoPE, SwiGLU, cross
    entropy) reduce without atomics in liger-kernel 0.8.5."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of float32 cross entropy over shifted, non-ignored labels."""
    shifted = labels[:, 1:].reshape(-1)
    flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    return F.cross_entropy(flat, shifted, ignore_index=IGNORE_INDEX, reduction="sum")


class StepModule(torch.nn.Module):
    """The model plus the engine's loss, as one module (the FSDP2 root when sharded), so the output
    head's parameters are gathered for the fused loss exactly as for the model's own forward."""

    def __init__(self, engine: Engine, model: torch.nn.Module):
        super().__init__()
        self.engine = engine  # a plain attribute: the engine is not an nn.Module
        self.inner = model

    def forward(self, batch: Batch, scale: float = 1.0) -> torch.Tensor:
        """The sum of this micro-batch's token losses times ``scale`` (standard or fused path).

        The engine passes ``scale = world size / valid tokens of the optimizer step``, so the fused
        path can divide inside its kernel, before the logits' gradient is rounded, as the standard
        path's float32 cross entropy does.
        """
        if self.engine.config.train.autocast_bf16:
            device_type = batch["input_ids"].device.type
            with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
                return self._loss(batch, scale)
        return self._loss(batch, scale)

    def _loss(self, batch: Batch, scale: float) -> torch.Tensor:
        engine = self.engine
        if engine.config.model.liger_kernel.loss == "fused":
            from ligerkit.loss import fused_linear_token_loss, output_head

            head = output_head(self.inner)
            hidden = engine.forward_hidden(self.inner, batch)
            return fused_linear_token_loss(hidden, head.weight, batch["labels"], 1.0 / scale, head.bias,
                                           softcap=head.softcap,
                                           chunk_tokens=engine.config.model.liger_kernel.loss_chunk_tokens)
        return token_loss_sum(engine.forward_logits(self.inner, batch), batch["labels"]) * scale


def drop_right_padding_mask(batch: Batch) -> Batch:
    """``batch`` without its ``attention_mask``, after checking the mask is redundant for the loss.

    Under causal attention a right-padded sample's real positions never see its padding (it lies in
    their future), so when every padded position's label is ignored, no counted logit depends on the
    mask. Without it, SDPA runs its causal flash kernel (grouped-query heads included) instead of the
    masked kernel with repeated key/value heads. Raises for left padding, holes, or padding that
    carries a counted label. ``labels`` may be longer than the mask by a prefix (image positions).
    """
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    if bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise LigerKitError(
            "train.drop_right_padding_mask is on, but a sample's attention_mask has a 0 before a 1 (left "
            "padding, packing or holes), so the mask matters; set train.drop_right_padding_mask=false"
        )
    labels = batch["labels"][:, -mask.shape[1]:]
    if bool((labels[mask == 0] != IGNORE_INDEX).any()):
        raise LigerKitError(
            "train.drop_right_padding_mask is on, but a padded position has a counted label, so the mask "
            "changes the loss; ignore padded labels (-100) or set train.drop_right_padding_mask=false"
        )
    return {k: v for k, v in batch.items() if k != "attention_mask"}


def disable_kv_cache(model: torch.nn.Module) -> None:
    """Set ``use_cache = False`` on every transformers config inside ``model``.

    transformers models default to building a key/value cache in every forward, training included:
    work and bookkeeping a training step never reads (and, under ``torch.compile``, a recompile when
    the cache's first layer fills).
    """
    for module in model.modules():
        config = getattr(module, "config", None)
        for cfg in (config, getattr(config, "text_config", None)):
            if getattr(cfg, "use_cache", False) is True:
                cfg.use_cache = False


def valid_tokens(labels: torch.Tensor) -> int:
    """Number of shifted labels that count in the loss."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


class Engine:
    """Hosts one recipe: the kit, the model kit, data, optimizer and the training loop."""

    def __init__(self, config: RecipeConfig, recipe_dir: Path | None = None):
        self.config = config
        self.recipe_dir = recipe_dir
        self.kit = LigerKernelKit()
        self.model_kit = ModelKit()
        self.env = D.DistEnv.from_env()
        self.scan: ScanResult | None = None

    # ----- hooks a recipe may override -------------------------------------------------------
    def official_family(self) -> str | None:
        """Family for the official route (``None``: no official call)."""
        lk = self.config.model.liger_kernel
        if lk.model_family_override:
            return lk.model_family_override
        return None if self.config.model.source == "custom" else self.config.model.family

    def custom_patches(self) -> CustomPatches | None:
        """The recipe's own ``custom_patches`` map (custom and composite recipes)."""
        return None

    def probe_config(self) -> Any:
        """The config the kit's probe builds the custom map's source modules from (``None``: the
        probe builds what it can from the constructors and the report lists the rest as unprobed)."""
        return None

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Build the model (after the kit was applied)."""
        return self.model_kit.build_model(self.config.model, device)

    def make_batch(self, start: int, size: int, vocab_size: int) -> Batch:
        """Samples ``start .. start+size-1`` of the deterministic data stream."""
        return text_batch(self.config.data, vocab_size, self.config.seed, start, size)

    def forward_logits(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """Logits for a batch (``labels`` never reach the model: the engine owns the loss)."""
        out = model(**{k: v for k, v in batch.items() if k != "labels"})
        return out if isinstance(out, torch.Tensor) else out.logits

    def forward_hidden(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """Final hidden states (before the output head), for the fused loss path.

        Default: the transformers base model (``model.<base_model_prefix>``). Custom models override.
        """
        base = getattr(model, getattr(model, "base_model_prefix", ""), None)
        if not isinstance(base, torch.nn.Module):
            raise LigerKitError(
                f"{type(model).__name__} has no transformers base model; the recipe's engine must override "
                "forward_hidden to use model.liger_kernel.loss: fused"
            )
        out = base(**{k: v for k, v in batch.items() if k != "labels"})
        return out if isinstance(out, torch.Tensor) else out.last_hidden_state

    def loss_path(self) -> str:
        """Which loss path trains, in words (reports, ``check``, ``train``)."""
        if self.config.model.liger_kernel.loss == "fused":
            from ligerkit.loss.liger_chunks import CHUNK_TOKENS

            rows = self.config.model.liger_kernel.loss_chunk_tokens or CHUNK_TOKENS
            return (f"fused: ligerkit.loss from hidden states and the output head, {rows} rows of logits at a time "
                    "(Liger's cross-entropy kernel on a GPU, chunked PyTorch on a CPU), float32, summed, divided by "
                    "the step's global valid-token count before the logits' gradient is rounded")
        return "standard: full logits + float32 cross entropy, summed, divided by the step's global valid-token count"

    def check_loss_path(self, model: torch.nn.Module, device: torch.device) -> None:
        """Before training on the fused path: the head applied to the hidden states must give the
        model's own logits (else :class:`~ligerkit.loss.FusedLossRefusedError`)."""
        if self.config.model.liger_kernel.loss != "fused":
            return
        from ligerkit.loss.wiring import check_head_reproduces_logits, output_head

        head = output_head(model)
        batch = {k: v.to(device) for k, v in self.make_batch(0, 1, head.weight.shape[0]).items()}
        with torch.no_grad():
            check_head_reproduces_logits(self.forward_logits(model, batch), self.forward_hidden(model, batch), head)

    def compile_model(self, model: torch.nn.Module) -> list[str]:
        """``torch.compile`` each decoder layer in place (the whole model when it has none); returns
        the compiled module paths. Liger's kernels inside a layer stay Liger's."""
        units = set(self.fsdp_units(model))
        compiled = [name for name, m in model.named_modules() if type(m).__name__ in units]
        for name in compiled:
            model.get_submodule(name).compile()
        if not compiled:
            model.compile()
            compiled = ["<model>"]
        return compiled

    def fsdp_units(self, model: torch.nn.Module) -> tuple[str, ...]:
        """Class names FSDP2 shards one by one (transformers' ``_no_split_modules``)."""
        return tuple(getattr(model, "_no_split_modules", None) or ())

    # ----- the fixed order ---------------------------------------------------------------------
    def apply_liger(self) -> LigerKernelReport | None:
        """Apply the kit: the official family (if any), then the recipe's custom map (if any)."""
        lk = self.config.model.liger_kernel
        if not lk.enabled:
            return None
        family = self.official_family()
        if family is not None:
            self.kit.apply(model_family=family, modules=lk.modules, excluded_modules=lk.excluded_modules)
        patches = dict(self.custom_patches() or {})
        if isinstance(lk.modules, dict):  # modules.<name>=false turns a map entry off too
            patches = {k: v for k, v in patches.items() if lk.modules.get(k, True)}
        if patches:
            self.kit.apply(model_family=self.config.model.family, custom_patches=patches,
                           excluded_modules=lk.excluded_modules, config=self.probe_config())
        return self.kit.report

    def prepare_model(self, device: torch.device) -> torch.nn.Module:
        """kit.apply, then build, then kit.verify (the scan), in this order, always."""
        if self.config.model.liger_kernel.enabled and device.type == "cpu":
            raise LigerNeedsAcceleratorError(
                "model.liger_kernel.enabled is true, but Liger's kernels need a CUDA GPU or an Ascend NPU "
                "and this machine has neither; nothing was built. To train here without Liger, add "
                "--set model.liger_kernel.enabled=false (or use `ligerkit check` to plan on the meta device)."
            )
        self.apply_liger()
        torch.manual_seed(self.config.seed)
        model = self.build_model(device)
        disable_kv_cache(model)  # a training step never reads a key/value cache
        if self.config.model.liger_kernel.enabled:
            self.scan = self.kit.verify(model)
        return model

    def prepare_data(self, model: torch.nn.Module) -> Callable[[int], list[Batch]]:
        """The data source: global step -> this rank's micro-batches (deterministic)."""
        vocab = model.get_output_embeddings().weight.shape[0]
        return lambda step: self.micro_batches(step, vocab)

    def prepare_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """AdamW over every trainable parameter."""
        t = self.config.train
        params = [p for p in model.parameters() if p.requires_grad]
        fused = t.fused_adamw and all(p.device.type == "cuda" for p in params)
        return torch.optim.AdamW(params, lr=t.lr, betas=t.betas, weight_decay=t.weight_decay, fused=fused or None)

    def device_batch(self, batch: Batch, device: torch.device) -> Batch:
        """A micro-batch as the model gets it: without its padding mask when
        ``train.drop_right_padding_mask`` is on (checked first), every tensor on ``device``."""
        if self.config.train.drop_right_padding_mask:
            batch = drop_right_padding_mask(batch)
        return {k: v.to(device) for k, v in batch.items()}

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then constant."""
        t = self.config.train
        return t.lr * min(1.0, (step + 1) / t.warmup_steps) if t.warmup_steps else t.lr

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
        return [self.make_batch(base + i, t.micro_batch_size, vocab_size)
                for i in range(0, per_rank, t.micro_batch_size)]

    def train_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list[Batch],
                   device: torch.device) -> tuple[float, float, int]:
        """One optimizer step of ``model`` (a :class:`StepModule`); returns (loss, grad norm, valid tokens)."""
        local = torch.tensor(float(sum(valid_tokens(b["labels"]) for b in batches)), device=device)
        total = D.all_reduce_sum(local, self.env)
        count = max(total.item(), 1.0)  # an all-ignored step contributes zero loss, never NaN
        # FSDP averages gradients over ranks; the world-size factor keeps them sums / count.
        scale = self.env.world_size / count
        loss_sum = torch.zeros((), device=device)
        for batch in batches:
            part = model(self.device_batch(batch, device), scale)
            part.backward()
            loss_sum += part.detach()
        norm = self._clip(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = D.all_reduce_sum(loss_sum, self.env).item() / self.env.world_size
        return loss, norm, int(total.item())

    def _clip(self, model: torch.nn.Module) -> float:
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

    def train(self, device: torch.device | None = None) -> TrainResult:
        """Prepare everything in order, train ``train.steps`` steps, log each one."""
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
            self.kit.revert()
            D.shutdown(self.env, barrier=clean)

    def _train(self, device: torch.device) -> TrainResult:
        t = self.config.train
        model = self.prepare_model(device)
        self.check_loss_path(model, device)
        data = self.prepare_data(model)
        flops = flops_per_token(model, self.config.data.seq_len)
        if t.compile:
            self.compile_model(model)
        step_module = StepModule(self, model)
        if self.env.distributed:
            D.shard(step_module, self.fsdp_units(model))
        optimizer = self.prepare_optimizer(step_module)
        if device.type == "cuda":  # peak memory is the training loop's, not the set-up checks'
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        peak = peak_flops(device, t.peak_tflops)
        out = Path(t.output_dir) if t.output_dir else None
        log = MetricsLog(out / "metrics.jsonl" if out and self.env.main else None, t.steps,
                         t.progress and self.env.main, self.config.name)
        result = TrainResult(report=self.kit.report if self.kit.active else None, scan=self.scan)
        try:
            for step in range(t.steps):
                for group in optimizer.param_groups:
                    group["lr"] = self.lr_at(step)
                batches = data(step)  # data generation is not timed
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                loss, norm, tokens = self.train_step(step_module, optimizer, batches, device)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                elapsed = time.perf_counter() - start
                seen = sum(b["input_ids"].numel() for b in batches) * self.env.world_size
                per_device = seen / elapsed / self.env.world_size
                metrics = StepMetrics(
                    step=step, loss=loss, grad_norm=norm, lr=self.lr_at(step), valid_tokens=tokens,
                    tokens_per_s=seen / elapsed, tokens_per_s_per_device=per_device, step_time_s=elapsed,
                    peak_mem_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
                    mfu=flops * per_device / peak if peak else None,
                )
                result.steps.append(metrics)
                log.log(metrics)
        finally:
            log.close()
        return result
