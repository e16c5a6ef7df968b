"""Deprecated: the recipe engine moved to :mod:`ligerkit.train`. ``Engine`` is ``RecipeEngine``.

Kept so recipes and scripts written against the first layout keep working; new code imports from
``ligerkit.train``.
"""

from ligerkit.train import RecipeConfig, RecipeEngine, Trainer, TrainResult, load_engine, load_recipe

Engine = RecipeEngine

__all__ = ["Engine", "RecipeConfig", "RecipeEngine", "TrainResult", "Trainer", "load_engine", "load_recipe"]
