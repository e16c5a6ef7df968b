"""Finding a recipe on disk: its folder, configs, and the ``RecipeEngine`` subclass in ``engine/``.

A recipe lives in ``recipes/<name>/`` and is imported as the package ``recipes.<name>`` (the
folder holding ``recipes/`` goes on ``sys.path``), so its modeling modules have stable dotted
names that ``LigerPatch`` can point at.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ligerkit.train.config import ConfigError, RecipeConfig, config_errors, load_recipe_config, raw_config
from ligerkit.train.config.loading import is_run_folder
from ligerkit.train.config.origin import attributed
from ligerkit.train.config.checks import check_model_keys, config_class_for, problems_of
from ligerkit.train.recipe.engine import RecipeEngine
from ligerkit.errors import RecipeError


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


# The recipes of the checkout ligerkit runs from (an editable install: src/ligerkit -> ../../recipes).
SHIPPED_RECIPES = Path(__file__).resolve().parents[4] / "recipes"


def recipe_root(path: str | Path, recipe: str | None = None) -> Path:
    """The recipe folder: a recipe folder itself, the one a config in ``configs/`` sits in, or the one
    a config names with ``recipe:`` (a folder relative to the config or the working directory, or a
    name under ``recipes/`` of the working directory or of this repository's checkout)."""
    path = Path(path).resolve()
    if recipe is not None:
        base = path.parent if path.is_file() else path
        shipped = SHIPPED_RECIPES / recipe
        for candidate in (base / recipe, Path(recipe), Path("recipes") / recipe, shipped):
            if (candidate / "configs").is_dir() or (candidate / "engine").is_dir():
                return candidate.resolve()
        raise RecipeError(f"recipe: {recipe!r} is not a recipe folder (looked next to {base}, in the working "
                          f"directory, under recipes/ and under {SHIPPED_RECIPES})")
    if path.is_file() and path.parent.name == "configs":
        return path.parent.parent
    if path.is_dir():
        return path
    raise RecipeError(f"{path} is neither a recipe folder nor a config in a recipe's configs/ folder; a config kept "
                      "elsewhere names its recipe with `recipe: recipes/<name>`")


def shipped_names() -> list[str]:
    """The recipes shipped in this checkout (folders of ``recipes/`` with a ``configs/`` folder)."""
    return sorted(p.parent.name for p in SHIPPED_RECIPES.glob("*/configs") if p.is_dir())


def named_recipe(spec: str | Path) -> Path:
    """The folder ``spec`` names, for every verb: a path that exists, as given; else a recipe shipped in
    this checkout named ``qwen3`` or ``recipes/qwen3`` (from any folder); else ``spec`` unchanged."""
    path = Path(spec)
    if path.exists() or path.is_absolute():
        return path
    parts = path.parts
    shipped = SHIPPED_RECIPES / parts[-1] if parts and (len(parts) == 1 or parts[:-1] == ("recipes",)) else None
    return shipped if shipped is not None and (shipped / "configs").is_dir() else path


def config_of(target: str | Path, gpu: bool) -> Path:
    """A config file as given, or a recipe folder's ``configs/gpu.yaml`` (``gpu``) or ``configs/cpu.yaml``;
    a shipped recipe's name works from any folder; anything else is a :class:`RecipeError` listing them."""
    path = named_recipe(target)
    if not path.exists():
        close = difflib.get_close_matches(Path(target).name, shipped_names(), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise RecipeError(f"{target} is neither a config file nor a recipe folder; {hint}give a config file, a recipe "
                          f"folder, or a shipped recipe: {', '.join(shipped_names())}")
    if path.is_dir():
        chosen = path / "configs" / ("gpu.yaml" if gpu else "cpu.yaml")
        if not chosen.is_file():
            raise RecipeError(f"{target} is a folder without {chosen.relative_to(path)}; give a config file")
        return chosen
    return path


def load_recipe(path: str | Path, recipe: str | None = None) -> Recipe:
    """Import ``recipes.<name>.engine`` and find its RecipeEngine subclass (the base class if none)."""
    root = recipe_root(path, recipe)
    inside = next((p for p in (root, *root.parents) if is_run_folder(p)), None)
    if inside is not None:  # a run folder is data: whatever it holds, none of it is imported
        raise RecipeError(f"the recipe {root} lies inside the run folder {inside}, and nothing in a run folder is "
                          "loaded as code; give the recipe's own config (ligerkit train recipes/<name>/configs/"
                          f"<file> --resume {inside}), or move the recipe out of the run folder")
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


def _model_key_problems(model: Any) -> list[str]:
    """The ``model.config`` keys of a ``source: config`` model its transformers config class lacks (read
    from the unvalidated mapping, while the schema has refused something else)."""
    if not (isinstance(model, dict) and model.get("source", "config") == "config" and isinstance(model.get("family"), str)
            and isinstance(model.get("config", {}), dict)):
        return []
    family, keys = model["family"], model.get("config", {})
    return problems_of(lambda: check_model_keys(keys, config_class_for(family)))


def load_engine(config_path: str | Path, overrides: list[str] | None = None) -> RecipeEngine:
    """Config path (+ overrides) -> the recipe's engine, its config checked against the world (files,
    the model's keys, module names) before anything is built."""
    overrides = list(overrides or [])
    try:
        config = load_recipe_config(config_path, overrides)
    except ConfigError as exc:  # name the model's own keys too: every mistake of a copied config in one run
        more = _model_key_problems(raw_config(config_path, overrides).get("model"))
        if not more:
            raise
        raise config_errors(str(config_path), exc.problems + attributed(more, overrides)) from None
    engine = load_recipe(config_path, config.recipe).engine(config)
    engine.overrides = tuple(overrides)
    try:
        engine.validate()
    except ConfigError as exc:  # a problem a --set gave is led by that --set (config.origin)
        problems = attributed(exc.problems, overrides)
        if len(problems) < 2 and problems == exc.problems:
            raise
        raise config_errors(str(config_path), problems) from None
    return engine
