"""Recipe configuration: the typed schema (``schema``) and how a YAML file becomes one (``loading``)."""

from ligerkit.train.config.loading import (
    ConfigError,
    apply_arm,
    apply_overrides,
    config_errors,
    load_recipe_config,
    parse_override,
    raw_config,
    read_yaml,
    unknown_key_hint,
    validate_config,
)
from ligerkit.train.config.schema import (
    DataConfig,
    LigerKernelConfig,
    LoraConfig,
    LossConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
)

__all__ = ["ConfigError", "DataConfig", "LigerKernelConfig", "LoraConfig", "LossConfig", "ModelConfig", "RecipeConfig",
           "TrainConfig", "apply_arm", "apply_overrides", "config_errors", "load_recipe_config", "parse_override",
           "raw_config", "read_yaml", "unknown_key_hint", "validate_config"]
