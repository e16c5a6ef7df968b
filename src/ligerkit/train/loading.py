"""Finding a recipe on disk: its folder, configs, and the ``RecipeEngine`` subclass in ``engine/``.

A recipe lives in ``recipes/<name>/`` and is imported as the package ``recipes.<name>`` (the
folder holding ``recipes/`` goes on ``sys.path``), so its modeling modules have stable dotted
names that ``LigerPatch`` can point at.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from ligerkit.train.config import RecipeConfig, load_recipe_config
from ligerkit.train.recipe import RecipeEngine
from ligerkit.errors import LigerKitError


class RecipeError(LigerKitError):
    """A recipe folder is missing something or its engine cannot be loaded."""


@dataclass(frozen=True)
class Recipe:
    """A recipe folder and its engine class."""

    root: Path
    engine_class: type[RecipeEngine]

    @property
    def name(self) -> str:
        """Folder name, e.g. ``qwen3``."""
        return self.root.name

    def configs(self) -> list[Path]:
        """Every shipped YAML under ``configs/``."""
        return sorted((self.root / "configs").glob("*.yaml"))

    def engine(self, config: RecipeConfig) -> RecipeEngine:
        """An engine for one of this recipe's configs."""
        return self.engine_class(config, recipe_dir=self.root)


def recipe_root(path: str | Path) -> Path:
    """The recipe folder for a recipe folder or a config inside its ``configs/``."""
    path = Path(path).resolve()
    if path.is_file() and path.parent.name == "configs":
        return path.parent.parent
    if path.is_dir():
        return path
    raise RecipeError(f"{path} is neither a recipe folder nor a config in a recipe's configs/ folder")


def load_recipe(path: str | Path) -> Recipe:
    """Import ``recipes.<name>.engine`` and find its RecipeEngine subclass (the base class if none)."""
    root = recipe_root(path)
    if root.parent.name != "recipes":
        raise RecipeError(f"{root} must sit in a folder named 'recipes/' (recipes/<name>/)")
    top = str(root.parent.parent)
    if top not in sys.path:
        sys.path.insert(0, top)
    if not (root / "engine" / "__init__.py").is_file():
        return Recipe(root, RecipeEngine)
    try:
        module = importlib.import_module(f"recipes.{root.name}.engine")
    except Exception as exc:
        raise RecipeError(f"cannot import recipes.{root.name}.engine: {type(exc).__name__}: {exc}") from exc
    found = [c for _, c in inspect.getmembers(module, inspect.isclass)
             if issubclass(c, RecipeEngine) and c is not RecipeEngine and c.__module__.startswith(module.__name__)]
    if len(found) != 1:
        raise RecipeError(f"recipes.{root.name}.engine must define exactly one RecipeEngine subclass, found {found}")
    return Recipe(root, found[0])


def load_engine(config_path: str | Path, overrides: list[str] | None = None) -> RecipeEngine:
    """Config path (+ overrides) -> the recipe's engine."""
    config = load_recipe_config(config_path, overrides)
    return load_recipe(config_path).engine(config)
