"""Alias kept for one release: ``ligerkit.proof.check`` is now :mod:`ligerkit.proof.recipe_check`.

``ligerkit check RECIPE`` (structure, every config, plan + meta build + scan) lives in the module
named for what it checks. Import it from ``ligerkit.proof.recipe_check``; nothing in ligerkit imports
this module.
"""

from __future__ import annotations

from ligerkit.proof.recipe_check import (
    DEFAULT_RECIPE,
    CheckResult,
    ConfigPlan,
    check_recipe,
    resolve_recipe,
    shipped_recipes,
)

__all__ = ["DEFAULT_RECIPE", "CheckResult", "ConfigPlan", "check_recipe", "resolve_recipe", "shipped_recipes"]
