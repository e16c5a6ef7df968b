"""The typed schema of a recipe config: every key, its type, its range, and its meaning.

Unknown keys are errors (``extra="forbid"``); numbers are never booleans, infinite or NaN, and
stay within sensible ranges. ``model.liger_kernel`` carries everything the kit needs; the loss is a
training choice (``train.loss``), whatever Liger does.
"""

from __future__ import annotations

import copy
import os
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ligerkit.naming import LOSS_MODULES
from ligerkit.train.config.compile_mode import TRACE_NEEDS_LIGER, CompileMode, map_old_keys, recorded_trace_as_ops
from ligerkit.train.config.lora import LoraConfig
from ligerkit.train.config.strict import Float, Int, Strict
from ligerkit.train.config.paths import check_name, check_path, check_run_folder


class LigerKernelConfig(Strict):
    """``model.liger_kernel``: what the kit applies before the model is built."""

    enabled: bool = False
    modules: Literal["auto"] | dict[str, bool] = "auto"
    model_family_override: str | None = None
    excluded_modules: tuple[str, ...] = LOSS_MODULES


class LossConfig(Strict):
    """``train.loss``: how the token-normalized loss is computed (with Liger on or off).

    ``standard``: full logits, float32 cross entropy. ``fused``: ``ligerkit.loss`` from the hidden
    states and the output head, ``chunk_tokens`` rows of logits at a time (Liger's cross-entropy
    kernel on a GPU, chunked PyTorch on a CPU). ``model.liger_kernel.loss: off | fused`` and
    ``model.liger_kernel.loss_chunk_tokens`` are accepted as aliases.
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


class ModelConfig(Strict):
    """``model``: how the model is built (``pretrained_model_name_or_path`` is accepted for the path)."""

    family: str = Field(min_length=1, description="transformers model_type (config/pretrained) or a label (custom)")
    source: Literal["config", "pretrained", "custom"] = "config"
    pretrained_path: str | None = Field(None, description="a local checkpoint folder (config.json, safetensors, "
                                        "tokenizer); never downloaded")
    config: dict[str, Any] = Field(default_factory=dict)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    liger_kernel: LigerKernelConfig = LigerKernelConfig()

    @model_validator(mode="before")
    @classmethod
    def _requirement_path_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "pretrained_model_name_or_path" in data:
            data = dict(data)
            value = data.pop("pretrained_model_name_or_path")
            if data.setdefault("pretrained_path", value) != value:
                raise ValueError("pretrained_model_name_or_path and pretrained_path disagree; set one of them")
        return data

    @field_validator("pretrained_path")
    @classmethod
    def _path_fits(cls, value: str | None) -> str | None:
        return value if value is None else check_path(value, "model.pretrained_path")

    @model_validator(mode="after")
    def _pretrained_needs_path(self) -> ModelConfig:
        if self.source == "pretrained" and not self.pretrained_path:
            raise ValueError("source 'pretrained' needs model.pretrained_path (a local directory)")
        if self.source != "pretrained" and self.pretrained_path:
            raise ValueError(f"model.pretrained_path is only read with source: pretrained (source is {self.source!r})")
        return self


class DataConfig(Strict):
    """``data``: deterministic batches: synthetic motifs, the shipped corpus, or a local file.

    ``jsonl`` (one JSON object per line, its ``text_field`` the text) and ``text`` (one document per
    line) read ``path`` and tokenize with the model's own tokenizer (``tokenizer``, by default
    ``model.pretrained_path``); documents are packed into ``seq_len`` windows (``packing: true``) or
    padded one per sample; ``shuffle`` orders them by ``seed``, epoch after epoch.
    """

    kind: Literal["synthetic", "corpus", "jsonl", "text"] = "synthetic"
    seq_len: Int = Field(128, gt=1, le=1 << 20)
    corpus_path: str | None = None
    pad_every: Int = Field(4, ge=0, description="synthetic/corpus: every N-th sample is right-padded (0: never)")
    path: str | None = Field(None, description="jsonl/text: the local dataset file")
    text_field: str = Field("text", min_length=1, description="jsonl: the field holding the text")
    tokenizer: str | None = Field(None, description="jsonl/text: a local tokenizer folder (default: the model's)")
    packing: bool = True
    shuffle: bool = True

    @field_validator("corpus_path", "path", "tokenizer")
    @classmethod
    def _paths_fit(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_path(value, f"data.{info.field_name}")

    @model_validator(mode="after")
    def _files_need_a_path(self) -> DataConfig:
        if self.kind in ("jsonl", "text") and not self.path:
            raise ValueError(f"data.kind {self.kind!r} needs data.path (a local {self.kind} file)")
        if self.kind not in ("jsonl", "text") and (self.path or self.tokenizer):
            raise ValueError("data.path and data.tokenizer are read with kind jsonl or text only")
        if self.corpus_path and self.kind != "corpus":
            raise ValueError("data.corpus_path is read with kind: corpus only")
        return self


class TrainConfig(Strict):
    """``train``: optimizer, batch geometry, logging."""

    steps: Int = Field(10, gt=0)
    global_batch_size: Int = Field(8, gt=0, description="sequences per optimizer step, all ranks")
    micro_batch_size: Int = Field(4, gt=0)
    lr: Float = Field(3e-4, gt=0, le=1.0, description="AdamW's learning rate (above 1 is refused as absurd)")
    weight_decay: Float = Field(0.0, ge=0, le=10.0)
    betas: tuple[Annotated[Float, Field(ge=0, lt=1)], Annotated[Float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    grad_clip: Float = Field(1.0, ge=0, description="0 disables clipping")
    warmup_steps: Int = Field(0, ge=0)
    output_dir: str | None = Field(None, description="the run folder (default: a new one under runs/<name>/)")
    runs_dir: str = Field(default_factory=lambda: os.environ.get("LIGERKIT_RUNS_DIR", "runs"), validate_default=True,
                          description="where default run folders go (default: $LIGERKIT_RUNS_DIR, else runs/)")
    checkpoint_every: Int | None = Field(None, gt=0, description="save a checkpoint every N steps (and at a "
                                         "graceful stop); resume with `ligerkit train --resume RUN_DIR`")
    keep_checkpoints: Int = Field(2, gt=0, description="complete checkpoints kept, newest first")
    stop_after_steps: Int | None = Field(None, gt=0, description="stop after this many steps of the run as if "
                                         "interrupted (checkpoint, exit non-zero): time-boxed jobs, tests")
    summary_warmup_steps: Int = Field(1, ge=0, description="first steps left out of the median tokens/s")
    peak_tflops: Float | None = Field(None, gt=0, description="per-device bf16 peak for MFU")
    progress: bool = True
    compile: CompileMode = Field(
        "off", description="compile mode: off; ops (torch.compile each decoder layer, the FSDP units, with "
        "Liger's kernels as ligerkit's compile-mode operators); trace (torch.compile traces into Liger's autograd "
        "functions, measured on an H200 to change training: the opt-in). true/false, train.liger_compile_ops and "
        "train.compile_over_liger_kernels, the earlier keys, are read into it (ligerkit.train.config.compile_mode)"
    )
    autocast_bf16: bool = Field(False, description="run forward and loss under bfloat16 autocast; with model.dtype="
                                "float32 this is mixed precision (float32 master weights and optimizer states)")
    loss: LossConfig = LossConfig()
    lora: LoraConfig | None = Field(None, description="train LoRA adapters instead of every weight (needs peft: "
                                    "the lora extra); null trains every weight")
    activation_checkpointing: bool = Field(False, description="recompute each decoder layer (the recipe's FSDP units) "
        "in backward instead of keeping its activations (non-reentrant; composes with FSDP2, train.compile and the "
        "fused loss): less memory, about one more forward of compute")
    recompute_glu_product: bool = Field(False, description="keep the inputs of Liger's SwiGLU/GeGLU, not their "
        "product, and run its elementwise kernel again in backward: the same gradients bit for bit, one MLP activation "
        "less per layer (ligerkit.train.memory.glu_recompute; with Liger on: train.compile off, no activation checkpointing)")
    recompute_norm_output: bool = Field(False, description="make Liger's RMSNorm outputs (and its rotary over q and "
        "k norms) again in backward instead of keeping them: the same gradients bit for bit, checked on the first "
        "forward (ligerkit.train.memory.norm_recompute; with Liger on: train.compile off, no activation checkpointing)")
    log_every: Int = Field(10, gt=0, description="steps between log lines when no progress bar is shown "
                           "(output that is not a terminal: pipes, nohup, CI)")
    fused_adamw: bool = Field(
        True, description="on a CUDA GPU, AdamW's fused kernel (one launch, float32 arithmetic for bf16 "
        "parameters) instead of the multi-tensor one; the CPU always uses the multi-tensor one"
    )
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

    @field_validator("output_dir", "runs_dir")
    @classmethod
    def _run_folders_fit(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_run_folder(value, f"train.{info.field_name}")

    @model_validator(mode="after")
    def _micro_divides_global(self) -> TrainConfig:
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError("train.global_batch_size must be a multiple of train.micro_batch_size")
        if self.warmup_steps > self.steps:
            raise ValueError(f"train.warmup_steps ({self.warmup_steps}) is more than train.steps ({self.steps})")
        return self


class RecipeConfig(Strict):
    """A whole recipe config."""

    name: str
    seed: Int = Field(0, ge=0, le=2**63 - 1)
    recipe: str | None = Field(None, description="the recipe this config trains (a folder, or a name under "
                               "recipes/); needed only for a config that lives outside recipes/<name>/configs/")
    model: ModelConfig
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="before")
    @classmethod
    def _loss_aliases(cls, data: Any) -> Any:
        """``model.liger_kernel.loss`` / ``loss_chunk_tokens`` (the design notes' names) -> ``train.loss``."""
        liger = data.get("model", {}).get("liger_kernel") if isinstance(data, dict) else None
        if not isinstance(liger, dict) or not {"loss", "loss_chunk_tokens"} & set(liger):
            return data
        data = copy.deepcopy(data)
        liger = data["model"]["liger_kernel"]
        train = data.setdefault("train", {})
        if not isinstance(train, dict):
            return data
        loss = train.setdefault("loss", {})
        if not isinstance(loss, dict):
            return data
        if "loss" in liger:
            value = liger.pop("loss")
            path = {False: "standard", "off": "standard", "standard": "standard", "fused": "fused"}.get(value, value)
            if loss.setdefault("path", path) != path:
                raise ValueError(f"model.liger_kernel.loss={value!r} and train.loss.path={loss['path']!r} disagree; "
                                 "set only train.loss.path")
        if "loss_chunk_tokens" in liger:
            chunks = liger.pop("loss_chunk_tokens")
            if loss.setdefault("chunk_tokens", chunks) != chunks:
                raise ValueError("model.liger_kernel.loss_chunk_tokens and train.loss.chunk_tokens disagree; "
                                 "set only train.loss.chunk_tokens")
        return data

    @model_validator(mode="after")
    def _fused_keeps_liger_loss_kernels_off(self) -> RecipeConfig:
        lk = self.model.liger_kernel
        if self.train.loss.path == "fused":
            enabled = {k for k, v in lk.modules.items() if v} if isinstance(lk.modules, dict) else set()
            if not set(LOSS_MODULES) <= set(lk.excluded_modules) or enabled & set(LOSS_MODULES):
                raise ValueError(
                    "train.loss.path: fused computes the loss itself; keep cross_entropy and "
                    "fused_linear_cross_entropy excluded and off in model.liger_kernel.modules (no double patching)"
                )
        return self

    @model_validator(mode="after")
    def _recomputes_see_liger_s_outputs(self) -> RecipeConfig:
        t = self.train  # with Liger off there is nothing to recompute: the keys then change nothing
        why = [k for k, v in {f"train.compile is {t.compile}": t.compile != "off",
                              "train.activation_checkpointing is on": t.activation_checkpointing}.items() if v]
        for key, on, what in (("train.recompute_glu_product", t.recompute_glu_product, "SwiGLU/GeGLU"),
                              ("train.recompute_norm_output", t.recompute_norm_output, "RMSNorm")):
            if on and self.model.liger_kernel.enabled and why:
                raise ValueError(f"{key} sees Liger's {what} only uncompiled and outside checkpointed layers, but "
                                 f"{' and '.join(why)}; set it to false or change those keys")
        return self

    @model_validator(mode="after")
    def _trace_needs_liger(self) -> RecipeConfig:
        if self.train.compile == "trace" and not self.model.liger_kernel.enabled:
            raise ValueError(TRACE_NEEDS_LIGER)
        return self

    @model_validator(mode="before")
    @classmethod
    def _compile_keys(cls, data: Any, info: ValidationInfo) -> Any:
        """``train.compile: true | false`` and the two booleans beside it (earlier configs) -> its named value;
        a run folder's recorded ``trace`` with Liger off (validated with ``context={"recorded": True}``) -> ``ops``."""
        data = map_old_keys(data)
        return recorded_trace_as_ops(data) if (info.context or {}).get("recorded") else data

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, value: str) -> str:
        return check_name(value)

    @field_validator("recipe")
    @classmethod
    def _recipe_path_fits(cls, value: str | None) -> str | None:
        return value if value is None else check_path(value, "recipe")

    @model_validator(mode="after")
    def _run_folder_fits(self) -> RecipeConfig:
        if self.train.output_dir is None:  # the default run folder: runs_dir/name/<stamp>
            check_run_folder(f"{self.train.runs_dir}/{self.name}", "train.runs_dir with the run's name")
        return self
