"""Training: the typed recipe config, the recipe spec (``RecipeEngine``), and one ``Trainer`` for all, which
sets a recipe's model up with ``set_up_model``."""

from ligerkit.train.config import RecipeConfig, load_recipe_config
from ligerkit.train.recipe.loading import Recipe, load_engine, load_recipe
from ligerkit.train.recipe.engine import RecipeEngine
from ligerkit.train.result import TrainResult
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.train.trainer import Trainer

__all__ = ["Recipe", "RecipeConfig", "RecipeEngine", "TrainResult", "Trainer", "load_engine", "load_recipe",
           "load_recipe_config", "set_up_model"]
