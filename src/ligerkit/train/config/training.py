"""``train``: how the model is trained, one small section per concern, each validated on its own.

- ``train`` itself: the length and batch geometry (``steps``, ``global_batch_size``,
  ``micro_batch_size``) and the switches that change what a step runs (``compile``,
  ``activation_checkpointing``, ``autocast_bf16``, ``deterministic``, ``drop_right_padding_mask``,
  ``arm``), with the sections below.
- ``train.loss``: the loss path (standard or fused) and its chunks.
- ``train.lora``: LoRA adapters instead of every weight (``ligerkit.train.config.lora``).
- ``train.optim``: AdamW and its schedule (``lr``, ``weight_decay``, ``betas``, ``grad_clip``,
  ``warmup_steps``, ``fused_adamw``).
- ``train.run``: the run folder, its checkpoints and what it logs (``output_dir``, ``runs_dir``,
  ``checkpoint_every``, ``keep_checkpoints``, ``stop_after_steps``, ``log_every``, ``progress``,
  ``summary_warmup_steps``, ``peak_tflops``).
- ``train.memory``: the finer recompute keys (``recompute_glu_product``, ``recompute_norm_output``).

A rule that reads more than one section (warm-up against steps, recompute against compile, the
fused loss against Liger's modules) lives in ``ligerkit.train.config.rules``, not here. Run folders
written before the sections existed keep the flat keys; ``ligerkit.train.config.recorded`` reads them.
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ligerkit.train.config.compile_mode import CompileMode, compile_value
from ligerkit.train.config.lora import LoraConfig
from ligerkit.train.config.paths import check_run_folder
from ligerkit.train.config.strict import Float, Int, Strict


class LossConfig(Strict):
    """``train.loss``: how the token-normalized loss is computed (with Liger on or off).

    ``standard``: full logits, float32 cross entropy. ``fused``: ``ligerkit.loss`` from the hidden
    states and the output head, ``chunk_tokens`` rows of logits at a time (Liger's cross-entropy
    kernel on a GPU, chunked PyTorch on a CPU).
    """

    path: Literal["standard", "fused"] = "standard"
    chunk_tokens: Int | None = Field(
        None, gt=0, description="fused only; rows of logits that exist at once (default: "
        "ligerkit.loss.liger_chunks.CHUNK_TOKENS, 2048); fewer rows hold less memory, and below about 1024 "
        "the weight gradient's update runs at memory speed"
    )

    @model_validator(mode="after")
    def _chunks_need_the_fused_path(self) -> LossConfig:
        if self.chunk_tokens is not None and self.path != "fused":
            raise ValueError("chunk_tokens sets the fused loss's chunks; it needs path: fused")
        return self


class OptimConfig(Strict):
    """``train.optim``: AdamW, its learning-rate schedule (linear warm-up, then constant) and clipping."""

    lr: Float = Field(3e-4, gt=0, le=1.0, description="AdamW's learning rate (above 1 is refused as absurd)")
    weight_decay: Float = Field(0.0, ge=0, le=10.0)
    betas: tuple[Annotated[Float, Field(ge=0, lt=1)], Annotated[Float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    grad_clip: Float = Field(1.0, ge=0, description="0 disables clipping")
    warmup_steps: Int = Field(0, ge=0, description="steps of linear warm-up (at most train.steps)")
    fused_adamw: bool = Field(
        True, description="on a CUDA GPU, AdamW's fused kernel (one launch, float32 arithmetic for bf16 "
        "parameters) instead of the multi-tensor one; the CPU always uses the multi-tensor one"
    )


class RunConfig(Strict):
    """``train.run``: where the run folder is, how often it checkpoints, when it stops, what it logs."""

    output_dir: str | None = Field(None, description="the run folder (default: a new one under runs/<name>/)")
    runs_dir: str = Field(default_factory=lambda: os.environ.get("LIGERKIT_RUNS_DIR", "runs"), validate_default=True,
                          description="where default run folders go (default: $LIGERKIT_RUNS_DIR, else runs/)")
    checkpoint_every: Int | None = Field(None, gt=0, description="save a checkpoint every N steps (and at a "
                                         "graceful stop); resume with `ligerkit train --resume RUN_DIR`")
    keep_checkpoints: Int = Field(2, gt=0, description="complete checkpoints kept, newest first")
    stop_after_steps: Int | None = Field(None, gt=0, description="stop after this many steps of the run as if "
                                         "interrupted (checkpoint, exit non-zero): time-boxed jobs, tests")
    log_every: Int = Field(10, gt=0, description="steps between log lines when no progress bar is shown "
                           "(output that is not a terminal: pipes, nohup, CI)")
    progress: bool = True
    summary_warmup_steps: Int = Field(1, ge=0, description="first steps left out of the median tokens/s")
    peak_tflops: Float | None = Field(None, gt=0, description="per-device bf16 peak for MFU")

    @field_validator("output_dir", "runs_dir")
    @classmethod
    def _run_folders_fit(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_run_folder(value, f"train.run.{info.field_name}")


class MemoryConfig(Strict):
    """``train.memory``: recompute in backward what Liger's kernels would keep (the same gradients bit for bit),
    and how much host memory offloaded layer inputs may take."""

    recompute_glu_product: bool = Field(False, description="keep the inputs of Liger's SwiGLU/GeGLU, not their "
        "product, and run its elementwise kernel again in backward: the same gradients bit for bit, one MLP activation "
        "less per layer (ligerkit.train.memory.glu_recompute; with Liger on: train.compile off, no activation "
        "checkpointing)")
    recompute_norm_output: bool = Field(False, description="make Liger's RMSNorm outputs (and its rotary over q and "
        "k norms) again in backward instead of keeping them: the same gradients bit for bit, checked on the first "
        "forward (ligerkit.train.memory.norm_recompute; with Liger on: train.compile off, no activation checkpointing)")
    offload_budget_gib: Float | Literal["auto"] = Field(
        "auto", description="with train.activation_checkpointing: offload, the most pinned host memory the layers' "
        "inputs may hold at once, in GiB; the inputs past it stay on the device (the first layers' go to the host: "
        "backward needs them last). auto: this machine's memory less a quarter of it, at least 16 GiB left free")

    @field_validator("offload_budget_gib", mode="before")
    @classmethod
    def _budget_value(cls, value: object) -> object:
        """One message for a value that is neither auto nor a positive number of GiB (YAML reads ``2e3``,
        without a dot, as text: a number all the same)."""
        if value == "auto":
            return value
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number) and number > 0:
            return number
        raise ValueError(f"write auto or a number of GiB above 0 (got {value!r})")


class TrainConfig(Strict):
    """``train``: length and batch geometry, the switches that change what a step runs, and the sections."""

    steps: Int = Field(10, gt=0)
    global_batch_size: Int = Field(8, gt=0, description="sequences per optimizer step, all ranks")
    micro_batch_size: Int = Field(4, gt=0)
    compile: CompileMode = Field(
        "off", description="compile mode: off; ops (torch.compile each decoder layer, the FSDP units, with "
        "Liger's kernels as ligerkit's compile-mode operators); trace (torch.compile traces into Liger's autograd "
        "functions, measured on an H200 to change training: the opt-in)"
    )
    activation_checkpointing: bool | Literal["offload"] = Field(
        False, description="recompute each decoder layer (the recipe's FSDP units) in backward instead of keeping "
        "its activations (non-reentrant; composes with FSDP2, train.compile, LoRA and the fused loss): less memory, "
        "about one more forward of compute. offload: the same, and the one input each layer keeps waits in pinned "
        "host memory until backward (copies overlapped on a side stream; one CUDA GPU, uncompiled)")
    autocast_bf16: bool = Field(False, description="run forward and loss under bfloat16 autocast; with model.dtype="
                                "float32 this is mixed precision (float32 master weights and optimizer states)")
    deterministic: bool = Field(
        False, description="PyTorch's deterministic algorithms and a fixed cuBLAS workspace, so the same "
        "command gives the same losses bit for bit (slower; an op without a deterministic kernel raises)"
    )
    drop_right_padding_mask: bool = Field(
        False, description="causal text models only: leave out attention_mask when every sample is "
        "right-padded and every padded position's label is ignored (the mask then changes no counted "
        "logit), so SDPA takes its causal flash kernel with grouped-query heads; refused for any other "
        "padding"
    )
    arm: str | None = Field(
        None, description="a named arm of `ligerkit bench` (the table in ligerkit.train.config.arms, e.g. "
        "liger_fused); the loader sets the arm's keys (model.liger_kernel.enabled, train.loss.path, "
        "train.compile), and a key this config or --set gives another value is an error"
    )
    loss: LossConfig = LossConfig()
    lora: LoraConfig | None = Field(None, description="train LoRA adapters instead of every weight (needs peft: "
                                    "the lora extra); null trains every weight")
    optim: OptimConfig = OptimConfig()
    run: RunConfig = RunConfig()
    memory: MemoryConfig = MemoryConfig()

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _checkpointing_value(cls, value: object) -> object:
        """One message for a value that is none of the three (the union would give one per type)."""
        if isinstance(value, bool) or value == "offload":
            return value
        raise ValueError(f"write true, false or offload (got {value!r})")

    @model_validator(mode="after")
    def _offload_uncompiled(self) -> TrainConfig:
        if self.activation_checkpointing == "offload" and self.compile != "off":
            raise ValueError(f"activation_checkpointing: offload runs uncompiled, but compile is {self.compile}; set "
                             "compile: off, or activation_checkpointing: true (recomputed layers compile)")
        return self

    @field_validator("compile", mode="before")
    @classmethod
    def _bare_off(cls, value: object) -> object:
        """YAML reads a bare ``off`` as false: that is the value ``off``; true says no mode."""
        if value is True:
            raise ValueError("true names no compile mode; write ops (or trace, the opt-in), or off")
        return compile_value(value)

    @model_validator(mode="after")
    def _micro_divides_global(self) -> TrainConfig:
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError("train.global_batch_size must be a multiple of train.micro_batch_size")
        return self
