"""``ligerkit check RECIPE_DIR``: structure, every config, plan + meta build + verify. CPU only.

Every problem is collected (not only the first), so one run tells the user all that is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ligerkit.train.config import load_recipe_config
from ligerkit.train.config import RecipeConfig
from ligerkit.train.loading import Recipe, load_recipe
from ligerkit.errors import LigerKitError
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
                 "loss_path": p.loss_path,
                 "report": p.report.to_dict() if p.report else None,
                 "scan": p.scan.to_dict() if p.scan else None}
                for p in self.plans
            ],
        }


def check_recipe(path: str | Path) -> CheckResult:
    """Check a recipe folder without a GPU: files, configs, and the wiring of every config."""
    root = Path(path).resolve()
    result = CheckResult(recipe=root.name)
    if not root.is_dir():
        result.problems.append(f"{root} is not a folder")
        return result
    result.problems += structure_problems(root)
    try:
        recipe = load_recipe(root)
    except LigerKitError as exc:
        result.problems.append(str(exc))
        return result
    for config_path in recipe.configs():
        try:
            config = load_recipe_config(config_path)
        except LigerKitError as exc:
            result.problems.append(str(exc))
            continue
        plan = ConfigPlan(config_path.name, config.model.liger_kernel.enabled)
        result.plans.append(plan)
        problem = _plan_config(recipe, config, plan)
        if problem:
            result.problems.append(f"{config_path.name}: {problem}")
    return result


def _plan_config(recipe: Recipe, config: RecipeConfig, plan: ConfigPlan) -> str | None:
    """Set one config's model up on the meta device, filling ``plan``; return its problem, if any.

    A ligerkit error is reported as it is; anything else the recipe's own code raises (a model that
    does not build from its config, a hook that fails) is reported with its type, so one broken
    config never hides the problems of the others.
    """
    engine = None
    try:
        engine = recipe.engine(config)
        plan.loss_path = engine.loss_path()
        model = engine.setup_model(torch.device("meta"))
        plan.model_class = f"{type(model).__module__}.{type(model).__qualname__}"
        if plan.liger_enabled:
            plan.report, plan.scan = engine.liger_kit.report, engine.scan
            if plan.scan is not None and plan.scan.unused:
                return f"swaps the model never uses: {plan.scan.unused}"
        return None
    except LigerKitError as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the recipe's own code failed: reported, never a traceback
        return f"the recipe failed to set its model up on the meta device ({type(exc).__name__}: {exc})"
    finally:
        if engine is not None:
            engine.liger_kit.revert()
