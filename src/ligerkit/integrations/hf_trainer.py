"""Hugging Face Trainer: a callback that keeps the kit's word, and the fused loss in Trainer.

    model = load_model(path)
    trainer = FusedLossTrainer(model=model, args=args, train_dataset=data,
                                    callbacks=[LigerKitCallback()])
    trainer.train()

:class:`LigerKitCallback` refuses ``TrainingArguments(use_liger_kernel=True)`` when the Trainer is
built (Trainer would run Liger's helper again inside ``train()`` and turn on the loss kernel the kit
keeps off), writes the kit's report and scan to ``<output_dir>/ligerkit.json`` and onto
``trainer.state.ligerkit``, and logs one line. :class:`FusedLossMixin` computes Trainer's own
loss (cross entropy summed over shifted labels, divided by ``num_items_in_batch``, times the number of
processes when ``average_tokens_across_devices`` is on) through ``ligerkit``'s fused loss, so the
logits are never built.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from ligerkit.errors import LigerKitError, RevertedKitError, TrainerConflictError
from ligerkit.integrations.hf_loss import token_loss
from ligerkit.integrations.model import LigerKitHandle, kit_of
from ligerkit.loss import token_loss_sum, valid_tokens

log = logging.getLogger("ligerkit.integrations")


def refuse_trainer_liger(args: Any) -> None:
    """Raise :class:`TrainerConflictError` if ``args`` ask the trainer to apply Liger itself."""
    if getattr(args, "use_liger_kernel", False):
        raise TrainerConflictError(
            "TrainingArguments(use_liger_kernel=True) makes the trainer run Liger's helper again on a model the kit "
            "already patched (and turns on Liger's fused loss, which changes how the loss is normalized). Set "
            "use_liger_kernel=False: the kit's swaps are in the model; for a fused loss, train with "
            "ligerkit.integrations.FusedLossTrainer (or LigerKitSFTTrainer under TRL)."
        )


class LigerKitCallback(TrainerCallback):
    """Refuses ``use_liger_kernel=True``; records the kit's report and scan in the run.

    Args:
        handle: the model's kit handle; by default the one :func:`load_model` attached to the
            Trainer's model, else the kit whose ``kit.scan(model)`` scanned it.
    """

    def __init__(self, handle: LigerKitHandle | None = None):
        self.handle = handle

    def on_init_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """At ``Trainer(...)``: refuse a conflicting ``use_liger_kernel``; find the kit."""
        refuse_trainer_liger(args)
        self.handle = self.handle or kit_of(model)
        if self.handle is None:
            raise LigerKitError(
                "Call kit.scan(model) on the model you built under kit.apply (or build it with "
                "ligerkit.integrations.load_model) before creating the Trainer: LigerKitCallback found no kit on "
                "the Trainer's model."
            )
        refuse_inline_compile(args, self.handle.report)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Refuse a reverted kit; write the report before the first step."""
        if self.handle is not None and not self.handle.kit.active and self.handle.report.patched:
            raise RevertedKitError(
                "the kit that built this model was reverted before training; keep it applied until training "
                "ends (model.ligerkit.kit.revert() afterwards)"
            )
        self._record(args, state)
        if self.handle is not None and state.is_world_process_zero:
            log.info("ligerkit: %d swap(s) in the model (%s); report in %s", len(self.handle.report.patched),
                     self.handle.report.route, Path(args.output_dir) / "ligerkit.json")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """After the first step, record again: the first forward's guard has filled in the wrappers."""
        if state.global_step == 1:
            self._record(args, state)

    def _record(self, args: Any, state: Any) -> None:
        if self.handle is None:
            return
        record = {"report": self.handle.report.to_dict(), "scan": self.handle.scan.to_dict()}
        state.ligerkit = record
        if state.is_world_process_zero and args.output_dir:
            folder = Path(args.output_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "ligerkit.json").write_text(json.dumps(record, indent=2) + "\n")


def refuse_inline_compile(args: Any, report: Any) -> None:
    """Raise :class:`TrainerConflictError` for ``torch_compile=True`` over Liger kernels the kit did not
    apply in compile mode (torch.compile would trace into Liger's functions: measured to overwrite norm
    weights during backward)."""
    if getattr(args, "torch_compile", False) and report.patched and not any(a.compile for a in report.applications):
        raise TrainerConflictError(
            "TrainingArguments(torch_compile=True) compiles a model whose Liger kernels were applied without "
            "compile mode; traced inline they overwrote norm weights on an H200 (docs/benchmarks.md, compile over "
            "Liger). Build it with load_model(..., compile=True), or kit.apply(..., compile=True), or drop "
            "torch_compile."
        )


def refuse_fused_conflicts(args: Any, compute_loss_func: Any = None) -> None:
    """Raise :class:`TrainerConflictError` for trainer settings the fused loss cannot honour."""
    if args is None:
        return
    refuse_trainer_liger(args)
    if compute_loss_func is not None or getattr(args, "label_smoothing_factor", 0.0):
        raise TrainerConflictError("the fused loss replaces the Trainer's loss: drop compute_loss_func and "
                                   "label_smoothing_factor, or use the plain Trainer class")
    if getattr(args, "loss_type", "nll") not in ("nll", None):
        raise TrainerConflictError(f"loss_type={args.loss_type!r} weights tokens differently; the fused loss "
                                   "is the plain negative log-likelihood: set loss_type='nll' or use the trainer's loss")
    if args.n_gpu > 1:
        raise TrainerConflictError("the fused loss does not run under nn.DataParallel (several GPUs in one "
                                   "process): launch with torchrun or accelerate, or make one GPU visible")


class FusedLossMixin:
    """Trainer's causal-LM loss through ``ligerkit``'s fused loss; mix in before a Trainer class.

    Training: ``sum of cross entropy over shifted labels / num_items_in_batch`` (the valid labels of
    the whole accumulated step, counted across processes when ``average_tokens_across_devices``), times
    the number of processes in that case, as ``Trainer.compute_loss`` does for a model's own loss.
    Evaluation and ``return_outputs=True`` use the full logits (``compute_metrics`` needs them).
    ``fused_chunk_tokens`` sets the rows of logits that exist at once.
    """

    fused_chunk_tokens: int | None = None

    def __init__(self, *args: Any, **kwargs: Any):
        # Checked before the Trainer exists: nothing is patched or wrapped when one is refused.
        refuse_fused_conflicts(kwargs.get("args", args[1] if len(args) > 1 else None),
                               kwargs.get("compute_loss_func"))
        super().__init__(*args, **kwargs)
        # Trainer counts num_items_in_batch only for models that take loss kwargs, and over labels[..., 1:]
        # only for causal-LM losses; this loss always needs the count of the shifted labels.
        self.model_accepts_loss_kwargs = True
        self._loss_shifts_labels = True
        self.loss_is_scaled_for_ga = True

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        """Trainer's micro-batches of one optimizer step and their count of valid labels; the count is read
        to the host here, once per optimizer step, since the fused kernel takes it as a host number (read
        in every micro-batch's loss instead, it made the host wait for the GPU once per micro-batch)."""
        samples, items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._ligerkit_items = (items, float(items)) if torch.is_tensor(items) else None
        return samples, items

    def _items_on_host(self, items: torch.Tensor | int) -> float:
        held = getattr(self, "_ligerkit_items", None)
        return held[1] if held is not None and held[0] is items else float(items)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: torch.Tensor | int | None = None) -> Any:
        """The fused loss (see the class docstring)."""
        if "labels" not in inputs:
            raise TrainerConflictError("the fused loss needs labels in every batch (a causal-LM collator "
                                       "adds them); this batch has only " + ", ".join(sorted(inputs)))
        if return_outputs or not model.training:
            outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
            count = valid_tokens(inputs["labels"]) if num_items_in_batch is None else float(num_items_in_batch)
            loss = token_loss_sum(outputs.logits, inputs["labels"].to(outputs.logits.device)) / max(count, 1)
            return (loss, outputs) if return_outputs else loss
        factor = 1
        if num_items_in_batch is not None and self.args.average_tokens_across_devices:
            factor = self.accelerator.num_processes // self.get_tp_size()
        count = None if num_items_in_batch is None else self._items_on_host(num_items_in_batch) / factor
        loss = token_loss(model, inputs, count, path="fused", chunk_tokens=self.fused_chunk_tokens)
        if num_items_in_batch is None:
            loss = loss / self.current_gradient_accumulation_steps
        return loss


class FusedLossTrainer(FusedLossMixin, Trainer):
    """``transformers.Trainer`` whose causal-LM loss never builds the logits (same loss, same gradients)."""

