"""The typed schema of a recipe config: every key, its type, its range, and its meaning.

Unknown keys are errors (``extra="forbid"``); numbers are never booleans, infinite or NaN, and
stay within sensible ranges. ``model.liger_kernel`` carries everything the kit needs; ``train`` and its
sections live in ``ligerkit.train.config.training`` (the loss is a training choice, ``train.loss``,
whatever Liger does); the rules that read several sections, in ``ligerkit.train.config.rules``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ligerkit.naming import LOSS_MODULES
from ligerkit.train.config.paths import check_name, check_path
from ligerkit.train.config.rules import cross_section_problems
from ligerkit.train.config.strict import Int, Strict
from ligerkit.train.config.training import TrainConfig


class LigerKernelConfig(Strict):
    """``model.liger_kernel``: what the kit applies before the model is built."""

    enabled: bool = False
    modules: Literal["auto"] | dict[str, bool] = "auto"
    model_family_override: str | None = None
    excluded_modules: tuple[str, ...] = LOSS_MODULES
    tiled_mlp: bool = Field(False, description="the official route's MLP in Liger's tiled form (LigerTiledSwiGLUMLP, "
                            "LigerTiledGEGLUMLP: the sequence in tiles, each tile's MLP run again in backward; for long "
                            "sequences), probed like every swap; not with train.compile or a custom map")
    fallback: Literal["error", "custom"] = Field(
        "error", description="when Liger's official helper for the family fails on the installed versions: error "
        "(raise it, the default), or custom (apply ligerkit's proven map of the family instead, every entry probed, "
        "replayed on the model's calls and checked in place; the report says so: ligerkit.kit.fallback)")


class ModelConfig(Strict):
    """``model``: how the model is built."""

    family: str = Field(min_length=1, description="transformers model_type (config/pretrained) or a label (custom)")
    source: Literal["config", "pretrained", "custom"] = "config"
    pretrained_path: str | None = Field(None, description="a local checkpoint folder (config.json, safetensors, "
                                        "tokenizer); never downloaded")
    config: dict[str, Any] = Field(default_factory=dict)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    liger_kernel: LigerKernelConfig = LigerKernelConfig()

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


class RecipeConfig(Strict):
    """A whole recipe config."""

    name: str
    seed: Int = Field(0, ge=0, le=2**63 - 1)
    recipe: str | None = Field(None, description="the recipe this config trains (a folder, or a name under "
                               "recipes/); needed only for a config that lives outside recipes/<name>/configs/")
    model: ModelConfig
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="after")
    def _cross_section_rules(self) -> RecipeConfig:
        problems = cross_section_problems(self)
        if problems:
            raise ValueError("; and ".join(problems))
        return self

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, value: str) -> str:
        return check_name(value)

    @field_validator("recipe")
    @classmethod
    def _recipe_path_fits(cls, value: str | None) -> str | None:
        return value if value is None else check_path(value, "recipe")
