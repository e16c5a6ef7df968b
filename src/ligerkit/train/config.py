"""Recipe configuration: YAML validated against a typed schema, with ``--set a.b=c`` overrides.

Unknown keys are rejected with their full path, so a typo never turns into a silently ignored
option. ``model.liger_kernel`` carries everything the kit needs; Liger is off unless a recipe
asks for it. The loss is a training choice (``train.loss``), whatever Liger does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ligerkit.errors import LigerKitError
from ligerkit.kit.core import LOSS_MODULES


class ConfigError(LigerKitError):
    """A recipe config is invalid (unknown key, wrong type, inconsistent values)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LigerKernelConfig(_Strict):
    """``model.liger_kernel``: what the kit applies before the model is built."""

    enabled: bool = False
    modules: Literal["auto"] | dict[str, bool] = "auto"
    model_family_override: str | None = None
    excluded_modules: tuple[str, ...] = LOSS_MODULES


class LossConfig(_Strict):
    """``train.loss``: how the token-normalized loss is computed (with Liger on or off).

    ``standard``: full logits, float32 cross entropy. ``fused``: ``ligerkit.loss`` from the hidden
    states and the output head, ``chunk_tokens`` rows of logits at a time (Liger's cross-entropy
    kernel on a GPU, chunked PyTorch on a CPU). ``model.liger_kernel.loss: off | fused`` and
    ``model.liger_kernel.loss_chunk_tokens`` are accepted as aliases.
    """

    path: Literal["standard", "fused"] = "standard"
    chunk_tokens: int | None = Field(
        None, gt=0, description="fused only; rows of logits that exist at once (default: "
        "ligerkit.loss.liger_chunks.CHUNK_TOKENS, 512); more rows are faster and hold more memory"
    )

    @model_validator(mode="after")
    def _chunks_need_the_fused_path(self) -> LossConfig:
        if self.chunk_tokens is not None and self.path != "fused":
            raise ValueError("chunk_tokens sets the fused loss path's chunks; it needs path: fused")
        return self


class ModelConfig(_Strict):
    """``model``: how the model kit builds the model."""

    family: str = Field(description="transformers model_type (config/pretrained) or a label (custom)")
    source: Literal["config", "pretrained", "custom"] = "config"
    pretrained_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    liger_kernel: LigerKernelConfig = LigerKernelConfig()

    @model_validator(mode="after")
    def _pretrained_needs_path(self) -> ModelConfig:
        if self.source == "pretrained" and not self.pretrained_path:
            raise ValueError("source 'pretrained' needs model.pretrained_path (a local directory)")
        return self


class DataConfig(_Strict):
    """``data``: deterministic batches, synthetic or from the shipped corpus."""

    kind: Literal["synthetic", "corpus"] = "synthetic"
    seq_len: int = Field(128, gt=1)
    corpus_path: str | None = None
    pad_every: int = Field(4, ge=0, description="every N-th sample is right-padded (0: never)")


class TrainConfig(_Strict):
    """``train``: optimizer, batch geometry, logging."""

    steps: int = Field(10, gt=0)
    global_batch_size: int = Field(8, gt=0, description="sequences per optimizer step, all ranks")
    micro_batch_size: int = Field(4, gt=0)
    lr: float = Field(3e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = Field(1.0, ge=0, description="0 disables clipping")
    warmup_steps: int = Field(0, ge=0)
    output_dir: str | None = None
    peak_tflops: float | None = Field(None, gt=0, description="per-device bf16 peak for MFU")
    progress: bool = True
    compile: bool = Field(False, description="torch.compile each decoder layer (the FSDP units)")
    compile_over_liger_kernels: bool = Field(
        False, description="allow train.compile together with Liger's kernel swaps (measured on an H200 to "
        "change the step-1 loss of two recipes by 1e-2 to 2e-2; see docs/benchmarks.md)"
    )
    autocast_bf16: bool = Field(
        False, description="run forward and loss under bfloat16 autocast; with model.dtype=float32 this is "
        "mixed precision (float32 master weights and optimizer states)"
    )
    loss: LossConfig = LossConfig()
    log_every: int = Field(10, gt=0, description="steps between log lines when no progress bar is shown "
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

    @model_validator(mode="after")
    def _micro_divides_global(self) -> TrainConfig:
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError("train.global_batch_size must be a multiple of train.micro_batch_size")
        return self


class RecipeConfig(_Strict):
    """A whole recipe config."""

    name: str
    seed: int = 0
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
    def _compile_over_liger_is_opt_in(self) -> RecipeConfig:
        if self.train.compile and self.model.liger_kernel.enabled and not self.train.compile_over_liger_kernels:
            raise ValueError(
                "train.compile with Liger's kernel swaps on is refused by default: on an H200 it was slower "
                "than the swaps alone and changed the step-1 loss of custom_lm and composite_vlm by 1e-2 to "
                "2e-2 (docs/benchmarks.md). Use torch.compile with model.liger_kernel.enabled=false and "
                "train.loss.path=fused (the fastest measured), or set "
                "train.compile_over_liger_kernels=true after `ligerkit smoke` passes with it"
            )
        return self

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        if not value or "/" in value:
            raise ValueError("name must be a non-empty string without '/'")
        return value


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.steps=20")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML ({exc})") from exc
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with every ``a.b=c`` override set (intermediate maps created)."""
    data = copy.deepcopy(data)
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}  # e.g. modules: auto -> modules: {rope: false}
                node[part] = child
            node = child
        node[path[-1]] = value
    return data


def _format(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        path = ".".join(str(p) for p in error["loc"]) or "<root>"
        message = "unknown key (not in the schema)" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def validate_config(data: dict[str, Any], source: str = "<dict>") -> RecipeConfig:
    """Validate a raw mapping; raise :class:`ConfigError` naming every bad key path."""
    try:
        return RecipeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not a valid recipe config:\n{_format(exc)}") from None


def load_recipe_config(path: str | Path, overrides: list[str] | None = None) -> RecipeConfig:
    """Load a recipe YAML, apply ``--set`` overrides, validate."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return validate_config(apply_overrides(data, overrides or []), str(path))
