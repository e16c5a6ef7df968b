"""The recipe engine: typed config, model kit, data, training loop, FSDP2; recipes subclass Engine."""

from ligerkit.engine.config import RecipeConfig, load_recipe_config
from ligerkit.engine.engine import Engine, TrainResult
from ligerkit.engine.recipe import Recipe, load_recipe

__all__ = ["Engine", "Recipe", "RecipeConfig", "TrainResult", "load_recipe", "load_recipe_config"]
