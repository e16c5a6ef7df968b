"""``RecipeEngine``: what a recipe declares. Its model build, its Liger wiring, its data; nothing else.

A recipe's engine (``recipes/<name>/engine/``) holds the kit and shows where Liger is wired, in a
few lines of its own ``prepare_model``::

    class MyEngine(RecipeEngine):
        def prepare_model(self, device):
            if self.liger_enabled:
                self.liger_kit.apply(**self.official_liger())          # before the model exists
            return self.build_model(device)

The trainer runs any recipe: its set-up (``ligerkit.train.recipe.setup.set_up_model``) refuses Liger on a
machine without an accelerator, checks the footprint, seeds, calls ``prepare_model`` (apply, then build),
then scans the built model and leaves it here as ``model`` and its scan as ``scan``. Hooks a recipe may
override: ``model_config``, ``validate``, ``check_footprint``, ``prepare_model``, ``build_model``,
``make_batch``, ``forward_logits``, ``forward_hidden`` and ``fsdp_units``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ligerkit.errors import LigerKitError
from ligerkit.kit import LigerKernelKit, ScanResult
from ligerkit.kit.custom import CustomPatches
from ligerkit.loss import make_loss
from ligerkit.train.config import ConfigError, RecipeConfig, config_errors
from ligerkit.train.config.checks import check_modules, check_paths, problems_of
from ligerkit.train.data.batches import text_batch, tokenizer_key
from ligerkit.train.data.files import check_tokenizer_folder
from ligerkit.train.distributed import DistEnv
from ligerkit.train.memory.offload import HostOffload
from ligerkit.train.recipe.footprint import Footprint, check_footprint
from ligerkit.train.models import build_transformers_model, transformers_config

Batch = dict[str, torch.Tensor]


class RecipeEngine:
    """One recipe: the kit it wires (``self.liger_kit``), the model it builds, the data it trains on."""

    def __init__(self, config: RecipeConfig, recipe_dir: Path | None = None):
        self.config = config
        self.recipe_dir = recipe_dir
        self.liger_kit = LigerKernelKit()
        self.env = DistEnv.from_env()
        self.loss = make_loss(config.train.loss.path, config.train.loss.chunk_tokens)
        self.scan: ScanResult | None = None
        self.model: nn.Module | None = None
        self.offload: HostOffload | None = None  # train.activation_checkpointing: offload, once set up
        self.overrides: tuple[str, ...] = ()  # the --set lines over the file (load_engine): messages name them

    @property
    def compile_mode(self) -> bool:
        """Whether the kit applies for a compiled model: ``train.compile: ops`` (Liger's kernels then run
        as ``ligerkit.compile`` operators)."""
        return self.config.train.compile == "ops"

    @property
    def liger_enabled(self) -> bool:
        """``model.liger_kernel.enabled``."""
        return self.config.model.liger_kernel.enabled

    @property
    def recomputes_glu_products(self) -> bool:
        """``train.memory.recompute_glu_product`` with Liger on (with Liger off there is no product to recompute)."""
        return self.config.train.memory.recompute_glu_product and self.liger_enabled

    @property
    def recomputes_norm_outputs(self) -> bool:
        """``train.memory.recompute_norm_output`` with Liger on (with Liger off there is no output to recompute)."""
        return self.config.train.memory.recompute_norm_output and self.liger_enabled

    @property
    def recompute_table(self) -> dict[str, Any]:
        """The outputs this engine's training recomputes in backward (``norm_recompute.recompute_table``)."""
        from ligerkit.train.memory.norm_recompute import recompute_table

        return recompute_table(self.recomputes_glu_products, self.recomputes_norm_outputs)

    @property
    def unwrapped_model(self) -> nn.Module | None:
        """The model the set-up built (``set_up_model``; never sharded or compiled wrappers)."""
        return self.model

    # ----- the wiring: arguments for ``self.liger_kit.apply`` -----------------------------------
    def official_liger(self, family: str | None = None) -> dict[str, Any]:
        """``apply`` arguments for Liger's official route: ``model.liger_kernel.model_family_override``,
        else ``family``, else ``model.family``; the config's module selection and exclusions; with
        ``model.liger_kernel.fallback: custom``, ``fallback=ligerkit.suggest.proven_map``; ``tiled_mlp``."""
        lk = self.config.model.liger_kernel
        wiring = {"model_family": lk.model_family_override or family or self.config.model.family,
                  "modules": lk.modules, "excluded_modules": lk.excluded_modules, "compile": self.compile_mode,
                  "tiled_mlp": lk.tiled_mlp}
        if lk.fallback == "custom":  # the helper failing: ligerkit's proven map instead (ligerkit.kit.fallback)
            from ligerkit.suggest import proven_map

            wiring["fallback"] = proven_map
        return wiring

    def custom_liger(self, custom_patches: CustomPatches, probe_config: Any = None) -> dict[str, Any]:
        """``apply`` arguments for a ``custom_patches`` map; ``probe_config`` is what the kit's probes
        build the mapped modules from. An explicit ``modules`` mapping is the whole selection, here as on
        the official route: a map entry stays on only when its key is set true there."""
        lk = self.config.model.liger_kernel
        if isinstance(lk.modules, Mapping) and isinstance(custom_patches, Mapping):
            custom_patches = {k: v for k, v in custom_patches.items() if lk.modules.get(k) is True}
        return {"model_family": self.config.model.family, "custom_patches": custom_patches,
                "excluded_modules": lk.excluded_modules, "config": probe_config, "compile": self.compile_mode}

    # ----- hooks --------------------------------------------------------------------------------
    def model_config(self) -> Any:
        """The config object the model is built from, every ``model.config`` key checked
        (:class:`~ligerkit.train.config.ConfigError` on a typo). Recipes with their own config class
        override it with ``build_config(TheirConfig, self.config.model.config)``."""
        model = self.config.model
        if model.source == "config":
            return transformers_config(model)
        if model.config:
            raise ConfigError(f"model.config is not read with source: {model.source}; " + (
                "the checkpoint's config.json is. Remove it (--set 'model.config={}')" if model.source == "pretrained"
                else "this recipe's engine must override model_config() to read it"))
        return None

    def module_names(self) -> set[str]:
        """Names ``model.liger_kernel.modules`` may use: Liger's (a recipe with other map keys adds them)."""
        from ligerkit.kit.families import known_module_names

        return set(known_module_names())

    def validate(self) -> None:
        """Check the config against the world before anything is built: files, the model's keys,
        module names: one :class:`~ligerkit.train.config.ConfigError` naming every problem found; then a
        tokenizer folder without a tokenizer (:class:`~ligerkit.errors.TokenizerError`)."""
        problems = problems_of(lambda: check_paths(self.config), lambda: check_modules(self.config, self.module_names()),
                               self.model_config)
        if problems:
            raise config_errors("the recipe config", problems)
        data = self.config.data
        if data.kind in ("jsonl", "text"):  # a model folder saved without its tokenizer: said before anything is built
            check_tokenizer_folder(str(data.tokenizer or self.config.model.pretrained_path), tokenizer_key(data))

    def check_footprint(self, device: torch.device) -> Footprint:
        """Refuse, before anything is allocated, a config whose memory lower bound exceeds ``device`` (per
        rank) or host memory, or whose steps need too many samples (:mod:`ligerkit.train.recipe.footprint`)."""
        model_config = self.model_config()
        if model_config is None and self.config.model.source == "pretrained":
            from transformers import AutoConfig

            try:
                model_config = AutoConfig.from_pretrained(self.config.model.pretrained_path, local_files_only=True)
            except Exception:  # the build names an unreadable checkpoint itself
                model_config = None
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", self.env.world_size))
        return check_footprint(self.config, model_config, device, self.env.world_size, ranks_here)

    def prepare_model(self, device: torch.device) -> nn.Module:
        """Apply Liger, then build the model (recipes show their own wiring here)."""
        if self.liger_enabled:
            self.liger_kit.apply(**self.official_liger())
        return self.build_model(device)

    def build_model(self, device: torch.device) -> nn.Module:
        """Build the model on ``device`` (after the kit was applied): a transformers model by default."""
        return build_transformers_model(self.config.model, device)

    def make_batch(self, start: int, size: int, vocab_size: int) -> Batch:
        """Samples ``start .. start+size-1`` of the deterministic data stream."""
        return text_batch(self.config.data, vocab_size, self.config.seed, start, size, self.config.model.pretrained_path)

    def forward_logits(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Logits for a batch (``labels`` never reach the model: the trainer owns the loss)."""
        out = model(**{k: v for k, v in batch.items() if k != "labels"})
        return out if isinstance(out, torch.Tensor) else out.logits

    def forward_hidden(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Final hidden states (before the output head), for the fused loss: the transformers base
        model (``model.<base_model_prefix>``) by default; custom models override."""
        base = getattr(model, getattr(model, "base_model_prefix", ""), None)
        if not isinstance(base, nn.Module):
            raise LigerKitError(
                f"{type(model).__name__} has no transformers base model; the recipe's engine must override "
                "forward_hidden to use train.loss.path: fused"
            )
        out = base(**{k: v for k, v in batch.items() if k != "labels"})
        return out if isinstance(out, torch.Tensor) else out.last_hidden_state

    def fsdp_units(self, model: nn.Module) -> tuple[str, ...]:
        """Class names FSDP2 shards one by one (transformers' ``_no_split_modules``)."""
        return tuple(getattr(model, "_no_split_modules", None) or ())

    def loss_path(self) -> str:
        """Which loss trains, in words (reports, ``check``, ``train``)."""
        return self.loss.describe()

    def check_loss_path(self, model: nn.Module, device: torch.device) -> None:
        """Before training with the fused loss: the head applied to the hidden states must give the
        model's own logits (else :class:`~ligerkit.loss.FusedLossRefusedError`)."""
        vocab = model.get_output_embeddings().weight.shape[0]
        batch = {k: v.to(device) for k, v in self.make_batch(0, 1, vocab).items()}
        self.loss.check(self, model, batch)
