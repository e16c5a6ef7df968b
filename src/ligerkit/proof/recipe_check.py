"""``ligerkit check RECIPE_DIR``: structure, every config, plan + meta build + scan. CPU only.

Every problem is collected (not only the first), so one run tells the user all that is wrong. A
recipe is a folder, or the name of a recipe shipped in this checkout (``qwen3``), so ``check``
works from any folder; each step is announced as it starts, since a check takes tens of seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ligerkit.train.config import load_recipe_config
from ligerkit.train.recipe.adapters import training_line
from ligerkit.train.config import RecipeConfig
from ligerkit.train.recipe.loading import SHIPPED_RECIPES, Recipe, load_recipe, named_recipe, shipped_names
from ligerkit.train.recipe.setup import set_up_model
from ligerkit.errors import LigerKitError, MissingExtraError
from ligerkit.kit.report import LigerKernelReport
from ligerkit.kit.scan import ScanResult
from ligerkit.proof.asserts import structure_problems


@dataclass
class ConfigPlan:
    """One config's plan: its report and the scan of the meta-built model (Liger-enabled configs)."""

    config: str
    liger_enabled: bool
    report: LigerKernelReport | None = None
    scan: ScanResult | None = None
    model_class: str | None = None
    loss_path: str | None = None
    training: str | None = None
    notes: list[str] = field(default_factory=list)  # what was checked otherwise, and why (a missing extra)


@dataclass
class CheckResult:
    """Everything ``check`` found."""

    recipe: str
    problems: list[str] = field(default_factory=list)
    plans: list[ConfigPlan] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "recipe": self.recipe,
            "ok": self.ok,
            "problems": self.problems,
            "plans": [
                {"config": p.config, "liger_enabled": p.liger_enabled, "model_class": p.model_class,
                 "loss_path": p.loss_path, "training": p.training, "notes": p.notes,
                 "report": p.report.to_dict() if p.report else None,
                 "scan": p.scan.to_dict() if p.scan else None}
                for p in self.plans
            ],
        }


# What ``ligerkit check`` checks when given nothing.
DEFAULT_RECIPE = "composite_vlm"


def resolve_recipe(spec: str | Path | None) -> Path:
    """The recipe folder ``spec`` names: a folder as given (relative to the working directory), else
    a recipe shipped in this checkout (``qwen3`` or ``recipes/qwen3``); ``None`` is the default one.

    A name that is neither comes back as given, and :func:`check_recipe` reports it.
    """
    return named_recipe(spec if spec is not None else DEFAULT_RECIPE).resolve()


def shipped_recipes() -> list[str]:
    """Names of the recipes shipped in this checkout (folders with a ``configs/`` folder)."""
    return shipped_names()


def check_recipe(path: str | Path | None = None, progress: Callable[[str], None] | None = None) -> CheckResult:
    """Check a recipe without a GPU: files, configs, and the wiring of every config.

    ``path`` is resolved by :func:`resolve_recipe`; ``progress`` is called with one line as each step starts
    and as each config ends.
    """
    say = progress or (lambda line: None)
    root = resolve_recipe(path)
    result = CheckResult(recipe=root.name)
    if not root.is_dir():
        result.problems.append(
            f"{path or DEFAULT_RECIPE} is not a recipe folder, nor a recipe shipped in {SHIPPED_RECIPES} "
            f"({', '.join(shipped_recipes()) or 'none'}); give a folder or one of those names")
        return result
    say(f"{root.name}: its files ({root})")
    result.problems += structure_problems(root)
    say(f"{root.name}: importing its engine")
    try:
        recipe = load_recipe(root)
    except LigerKitError as exc:
        result.problems.append(str(exc))
        return result
    configs = recipe.configs()
    for n, config_path in enumerate(configs, 1):
        step, started = f"{root.name}: {config_path.name} ({n}/{len(configs)})", time.perf_counter()
        say(f"{step}: loading it, then setting its model up on the meta device")
        try:
            config = load_recipe_config(config_path)
        except LigerKitError as exc:
            result.problems.append(str(exc))
            say(f"{step}: does not load")
            continue
        plan = ConfigPlan(config_path.name, config.model.liger_kernel.enabled)
        result.plans.append(plan)
        problem = _plan_config(recipe, config, plan)
        if isinstance(problem, MissingExtraError):  # checked without the key that needs it; a note, not a problem
            plan.notes.append(f"needs the `{problem.extra}` extra (pip install -e '.[{problem.extra}]'), which is "
                              f"not installed: checked without {problem.key}")
            problem = _plan_config(recipe, load_recipe_config(config_path, [f"{problem.key}=null"]), plan)
            problem = f"{type(problem).__name__}: {problem}" if isinstance(problem, MissingExtraError) else problem
        if problem:
            result.problems.append(f"{config_path.name}: {problem}")
        say(f"{step}: {'a problem (listed at the end)' if problem else 'ok'} in {time.perf_counter() - started:.1f} s")
    return result


def _plan_config(recipe: Recipe, config: RecipeConfig, plan: ConfigPlan) -> str | MissingExtraError | None:
    """Set one config's model up on the meta device, filling ``plan``; return its problem, if any (a
    :class:`~ligerkit.errors.MissingExtraError` as it is: the caller checks the rest without its key).

    A ligerkit error is reported as it is; anything else the recipe's own code raises (a model that
    does not build from its config, a hook that fails) is reported with its type, so one broken
    config never hides the problems of the others.
    """
    engine = None
    try:
        engine = recipe.engine(config)
        plan.loss_path = engine.loss_path()
        model = set_up_model(engine, torch.device("meta"))
        plan.model_class = f"{type(model).__module__}.{type(model).__qualname__}"
        plan.training = training_line(model, config.train)
        if plan.liger_enabled:
            plan.report, plan.scan = engine.liger_kit.report, engine.scan
            if plan.scan is not None and plan.scan.unused:
                return f"swaps the model never uses: {plan.scan.unused}"
        return None
    except MissingExtraError as exc:
        return exc
    except LigerKitError as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the recipe's own code failed: reported, never a traceback
        return f"the recipe failed to set its model up on the meta device ({type(exc).__name__}: {exc})"
    finally:
        if engine is not None:
            engine.liger_kit.revert()
