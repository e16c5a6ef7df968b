"""The hard-validation asserts every recipe runs (``tests/skills/liger-kernel/asserts.py``).

They check the recipe's files, its configs, the requirement's reference checks (the engine's
source names ``LigerKernelKit`` and its ``prepare_model`` calls ``liger_kit.apply(`` before
``build_model(``), that the engine really applies the kit before it builds the model (observed by
recording the calls, not only by reading the source), and that after setup every enabled
module-class kernel is present in the built model. The model is built on the ``meta`` device, so
this runs on a CPU with Liger enabled.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ligerkit.train.config import RecipeConfig, load_recipe_config
from ligerkit.train.recipe.loading import load_recipe
from ligerkit.train.recipe.engine import RecipeEngine
from ligerkit.train.recipe.setup import set_up_model

REQUIRED = ("README.md", "configs", "engine/__init__.py", "tests", "tests/skills/liger-kernel/asserts.py")


def structure_problems(root: Path) -> list[str]:
    """Missing files or folders of a recipe (empty when complete)."""
    problems = [f"missing {item}" for item in REQUIRED if not (root / item).exists()]
    if (root / "configs").is_dir() and not list((root / "configs").glob("*.yaml")):
        problems.append("configs/ holds no *.yaml")
    return problems


def assert_file_structure(root: Path) -> None:
    """The recipe folder has README, configs, engine, tests and the asserts file."""
    problems = structure_problems(root)
    assert not problems, f"{root.name}: " + "; ".join(problems)


def load_all_configs(root: Path) -> dict[str, RecipeConfig]:
    """Every shipped config, validated (raises on the first invalid one)."""
    return {path.name: load_recipe_config(path) for path in sorted((root / "configs").glob("*.yaml"))}


def assert_config_structure(root: Path) -> None:
    """Every config validates; a CPU config leaves Liger off and a GPU config turns it on."""
    configs = load_all_configs(root)
    assert configs, f"{root.name}: no configs"
    names = set(configs)
    assert {"cpu.yaml", "gpu.yaml"} <= names, f"{root.name}: needs configs/cpu.yaml and configs/gpu.yaml"
    assert not configs["cpu.yaml"].model.liger_kernel.enabled, "cpu.yaml must train with Liger off"
    assert configs["gpu.yaml"].model.liger_kernel.enabled, "gpu.yaml must enable Liger"
    for name, config in configs.items():
        excluded = set(config.model.liger_kernel.excluded_modules)
        assert {"cross_entropy", "fused_linear_cross_entropy"} <= excluded, (
            f"{name}: the loss kernels must stay excluded (the recipe owns its loss normalization)"
        )


def assert_reference_wiring(root: Path) -> None:
    """The requirement's own reference checks: ``engine/*.py`` uses ``LigerKernelKit``, the engine's
    ``prepare_model`` calls ``liger_kit.apply(`` before ``build_model(``, every config has ``liger_kernel``."""
    sources = "".join(path.read_text() for path in sorted((root / "engine").glob("*.py")))
    assert "LigerKernelKit" in sources, f"{root.name}: Engine must use LigerKernelKit"
    engine_class = load_recipe(root).engine_class
    assert "prepare_model" in vars(engine_class), f"{root.name}: the engine must define prepare_model"
    body = inspect.getsource(engine_class.prepare_model)
    assert "liger_kit.apply(" in body and "build_model(" in body, (
        f"{root.name}: prepare_model must call LigerKernelKit.apply(...) and then build_model(...)")
    assert body.index("liger_kit.apply(") < body.index("build_model("), f"{root.name}: apply must come before build"
    for path in sorted((root / "configs").glob("*.yaml")):
        assert "liger_kernel" in path.read_text(), f"{path.name}: configs must carry model.liger_kernel"


def record_prepare(engine: RecipeEngine) -> tuple[torch.nn.Module, list[str]]:
    """Set the model up on the meta device, recording the real order of kit and build calls."""
    events: list[str] = []

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            events.append(name)
            return fn(*args, **kwargs)
        return wrapper

    engine.liger_kit.apply = spy("kit.apply", engine.liger_kit.apply)  # type: ignore[method-assign]
    engine.liger_kit.scan = spy("kit.scan", engine.liger_kit.scan)  # type: ignore[method-assign]
    engine.build_model = spy("build_model", engine.build_model)  # type: ignore[method-assign]
    model = set_up_model(engine, torch.device("meta"))
    return model, events


def liger_engine(root: Path, config_name: str = "gpu.yaml") -> RecipeEngine:
    """The recipe's engine for a Liger-enabled config."""
    recipe = load_recipe(root)
    return recipe.engine(load_recipe_config(root / "configs" / config_name))


def assert_applies_before_build(root: Path) -> None:
    """Observed order: every kit.apply, then build_model, then kit.scan."""
    engine = liger_engine(root)
    try:
        _, events = record_prepare(engine)
    finally:
        engine.liger_kit.revert()
    assert "kit.apply" in events and "build_model" in events, events
    build = events.index("build_model")
    assert all(e == "kit.apply" for e in events[:build]), f"order was {events}"
    assert events[build + 1:] == ["kit.scan"], f"order was {events}"


def assert_kernels_in_model(root: Path) -> None:
    """After setup, every enabled class swap's Liger class is instantiated in the model."""
    engine = liger_engine(root)
    try:
        record_prepare(engine)
        report, scan = engine.liger_kit.report, engine.scan
        assert report.patched, f"{root.name}: Liger enabled but nothing was swapped"
        assert scan is not None and scan.counts, f"{root.name}: no class swap to find in the model"
        assert not scan.unused, f"{root.name}: swapped but never instantiated: {scan.unused}"
        assert all(scan.counts.values()), scan.counts
        assert not scan.leftovers, scan.leftovers
        assert engine.config.model.liger_kernel.enabled
        model = engine.unwrapped_model
        assert model is engine.model and any(type(m).__module__.startswith("liger_kernel") for m in model.modules())
    finally:
        engine.liger_kit.revert()


CHECKS = (assert_file_structure, assert_config_structure, assert_reference_wiring, assert_applies_before_build,
          assert_kernels_in_model)


def run_all(root: Path) -> None:
    """Every check of a recipe's Liger wiring, in order (each recipe's ``asserts.py`` calls this)."""
    for check in CHECKS:
        check(root)
