"""The package's shape: imports point one way, modules stay small, every public definition is documented.

Layers, lowest first: errors/environment/naming -> hf -> probe, compile -> kit -> loss, suggest, plan ->
train -> proof -> cli. A module may import its own layer or lower ones, at the top of the file or
inside a function (lazy imports are for start-up time, never for hiding a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ligerkit"

LAYERS = {
    "ligerkit": 0, "ligerkit.errors": 0, "ligerkit.cache_files": 0, "ligerkit.whole_files": 0,
    "ligerkit.environment": 0, "ligerkit.naming": 0,
    "ligerkit.hf": 1, "ligerkit.sizes": 1, "ligerkit.shrink": 1,
    "ligerkit.probe": 2, "ligerkit.compile": 2,
    "ligerkit.kit": 3,
    "ligerkit.loss": 4, "ligerkit.suggest": 4, "ligerkit.plan": 4,
    "ligerkit.train": 5,
    "ligerkit.integrations": 6, "ligerkit.proof": 6,
    "ligerkit.cli": 7, "ligerkit.__main__": 7,
}
PUBLIC_API = "ligerkit"  # the package root re-exports the kit's public names: it may import the kit


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS and (key != "ligerkit" or n == len(parts)):
            return LAYERS[key]
    raise KeyError(f"{module} has no layer: add it to LAYERS")


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        found.append((name, path))
    return found


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return [n for n in names if n == "ligerkit" or n.startswith("ligerkit.")]


@pytest.mark.parametrize("name, path", _modules(), ids=[n for n, _ in _modules()])
def test_imports_point_down(name, path):
    if name == PUBLIC_API:
        return
    mine = _layer(name)
    upward = [imported for imported in _imports(path) if _layer(imported) > mine]
    assert not upward, f"{name} (layer {mine}) imports higher layers: {upward}"


# ligerkit.train by concern, lowest first: the config; services the rooms above share; the data; the run on
# disk; the recipe; the loop at the top (every module of train/ itself that is not named here).
TRAIN_ROOMS = {"config": 0, "memory": 1, "distributed": 1, "models": 1, "data": 2, "run": 3, "recipe": 4}
LOOP = 5


def _train_room(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["ligerkit", "train"] or len(parts) == 2:
        return None if parts[:2] != ["ligerkit", "train"] else LOOP
    return TRAIN_ROOMS.get(parts[2], LOOP)


@pytest.mark.parametrize("name, path", [m for m in _modules() if m[0].startswith("ligerkit.train.")],
                         ids=[n for n, _ in _modules() if n.startswith("ligerkit.train.")])
def test_train_s_rooms_import_down(name, path):
    mine = _train_room(name)
    upward = [imported for imported in _imports(path) if (_train_room(imported) or 0) > mine]
    assert not upward, f"{name} (train room {mine}) imports higher rooms: {upward}"


def test_train_keeps_at_most_15_modules_at_its_top():
    top = [p for p in (SRC / "train").glob("*.py")]
    assert len(top) <= 15, sorted(p.name for p in top)
    assert set(TRAIN_ROOMS) - {"distributed", "models"} == {p.name for p in (SRC / "train").iterdir()
                                                           if p.is_dir() and p.name != "__pycache__"}


@pytest.mark.parametrize("name, path", _modules(), ids=[n for n, _ in _modules()])
def test_modules_stay_under_300_lines(name, path):
    assert len(path.read_text().splitlines()) <= 300, name


def test_public_definitions_are_documented():
    missing = []
    for name, path in _modules():
        tree = ast.parse(path.read_text())
        if ast.get_docstring(tree) is None:
            missing.append(name)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    missing.append(f"{name}.{node.name}")
    assert not missing, missing


def test_the_trainer_loads_no_probe_or_shrink_until_a_verdict_is_computed(tmp_path):
    """Importing the trainer and training with Liger off never import ``ligerkit.probe`` or ``shrink``:
    the kit loads them when it applies (and computes a verdict)."""
    import subprocess
    import sys

    config = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    script = f"""
import sys
import torch
from ligerkit.train import Trainer, load_engine
loaded = lambda: sorted(m for m in sys.modules if m.startswith(("ligerkit.probe", "ligerkit.shrink")))
assert loaded() == [], loaded()
engine = load_engine({str(config)!r}, ["train.steps=1", "train.run.progress=false",
                                        "train.run.output_dir={tmp_path / 'run'}"])
Trainer(engine).train(torch.device("cpu"))
assert loaded() == [], loaded()
import ligerkit.kit.swap_checks
assert "ligerkit.probe.call_sites" in loaded()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _edges(name: str, path: Path, known: set[str]) -> set[str]:
    """The ligerkit modules ``name`` imports, anywhere in it (in functions too: a lazy import never hides a
    circle), leaving out imports under ``if TYPE_CHECKING:`` (they never run)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for sub in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_module_imports_its_way_back_to_itself():
    modules = dict(_modules())
    graph = {name: _edges(name, path, set(modules)) for name, path in modules.items()}
    circles = []
    for start in graph:  # a depth-first walk from each module; a path that returns to it is a circle
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not circles, circles[:5]
