"""Recipe configuration: the typed schema (``schema``, ``train``'s sections in ``training``, the rules that
read several sections in ``rules``), how a YAML file becomes one (``loading``), and how a run folder's
config of an earlier release is read (``recorded``)."""

from ligerkit.train.config.loading import (
    ConfigError,
    apply_arm,
    apply_overrides,
    config_errors,
    load_recipe_config,
    parse_override,
    raw_config,
    read_yaml,
    recorded_config,
    unknown_key_hint,
    validate_config,
)
from ligerkit.train.config.lora import LoraConfig
from ligerkit.train.config.schema import DataConfig, LigerKernelConfig, ModelConfig, RecipeConfig
from ligerkit.train.config.training import LossConfig, MemoryConfig, OptimConfig, RunConfig, TrainConfig

__all__ = ["ConfigError", "DataConfig", "LigerKernelConfig", "LoraConfig", "LossConfig", "MemoryConfig", "ModelConfig",
           "OptimConfig", "RecipeConfig", "RunConfig", "TrainConfig", "apply_arm", "apply_overrides", "config_errors", "load_recipe_config", "parse_override",
           "raw_config", "read_yaml", "recorded_config", "unknown_key_hint", "validate_config"]
