"""The version facts, listed once (``ligerkit.environment.TESTED``), and everything that repeats them: pyproject's
ranges, the README's "Tested versions" table and test command, ``.ci/run``, the gaps, the messages and the
once-per-process warning for a stack outside them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from ligerkit import environment as env
from ligerkit.environment import CPU_CI, PACKAGES, TESTED, UntestedVersionsWarning

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = [s for s in TESTED if s.where == CPU_CI]


def _stack(**changes: str | None) -> dict[str, str | None]:
    """The versions of the first tested stack, with ``changes`` (``liger_kernel=`` for liger-kernel)."""
    versions = dict(TESTED[0].versions)
    versions.update({k.replace("_", "-"): v for k, v in changes.items()})
    return versions


def test_every_stack_names_every_package_and_ci_runs_the_newest_and_the_oldest_transformers():
    assert all(tuple(dict(s.versions)) == PACKAGES for s in TESTED)
    transformers = sorted({s.version("transformers") for s in CI}, key=lambda v: tuple(map(int, v.split("."))))
    assert env.ci_transformers() == (transformers[-1], transformers[0]) == ("5.25.0", "5.22.2")
    assert env.tested_versions("transformers") == ("5.25.0", "5.22.2")
    assert all(s.why for s in TESTED if s.failing_helpers)


def test_pyproject_allows_transformers_from_the_oldest_to_the_newest_tested_and_pins_the_rest():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {re.split(r"[<>=]", d)[0]: d for d in project["dependencies"]}
    newest, oldest = env.ci_transformers()
    major, minor, _ = newest.split(".")
    assert deps["transformers"] == f"transformers>={oldest},<{major}.{int(minor) + 1}"
    assert deps["liger-kernel"] == f"liger-kernel=={env.tested_versions('liger-kernel')[0]}"
    assert len(env.tested_versions("liger-kernel")) == 1
    test_extra = {re.split(r"[<>=]", d)[0]: d for d in project["optional-dependencies"]["test"]}
    for package in ("trl", "peft"):  # CI installs the test extra: exactly the CPU stacks' versions
        (version,) = {s.version(package) for s in CI}
        assert test_extra[package] == f"{package}=={version}"


def test_the_readme_tested_versions_table_is_the_code_table():
    section = README.split("\n## Tested versions\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")]
    assert rows[0][:6] == ["where", *PACKAGES]
    read = []
    for cells in rows[1:]:
        versions = tuple(zip(PACKAGES, (None if "not recorded" in c else c for c in cells[1:6])))
        helpers = () if cells[6] == "-" else tuple(cells[6].split(":")[0].split(", "))
        read.append((cells[0], versions, helpers))
    assert read == [(s.where, s.versions, tuple(map(env.short, s.failing_helpers))) for s in TESTED]
    for stack in TESTED:
        if stack.failing_helpers:
            assert stack.why in section


def test_the_readme_test_command_is_what_ci_runs_on_each_end_of_the_range():
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = [line for line in README.splitlines() if line.startswith("python3 -m venv") and "pytest" in line]
    install, test = command.split(" && .venv/bin/python -m pytest")
    assert install in ci and f".venv/bin/python -m pytest{test}" in ci
    assert "ci_transformers()" in ci and "LIGERKIT_TRANSFORMERS" in ci
    torch = {s.version("torch") for s in CI}
    assert {f"torch=={v}" for v in torch} == set(re.findall(r"torch==[\d.]+", command))


def test_an_installed_tested_stack_is_no_gap_and_names_where_it_was_tested(monkeypatch):
    monkeypatch.setattr(env, "installed", lambda: _stack(peft=None, trl=None))  # extras not installed
    assert env.untested() is None and env.tested_stack() is TESTED[0]
    assert not [g for g in env.environment_gaps() if "tested" in g]
    assert f"a tested stack ({TESTED[0].where})" in env.environment_summary()


def test_a_version_outside_the_tested_ones_is_named_in_the_gaps_and_the_summary(monkeypatch):
    monkeypatch.setattr(env, "installed", lambda: _stack(transformers="5.26.0"))
    assert env.untested() == "transformers 5.26.0 is outside the tested versions"
    assert any(g.startswith("transformers 5.26.0 is outside") and "ligerkit env" in g for g in env.environment_gaps())
    summary = env.environment_summary()
    assert "transformers 5.26.0" in summary and "transformers 5.25.0, 5.22.2" in summary


def test_tested_versions_in_an_untested_combination_are_named_as_such():
    gpu = next(s for s in TESTED if s.where != CPU_CI)
    mixed = {**dict(gpu.versions), "transformers": "5.25.0", "peft": None}
    assert env.untested(mixed) == ("this combination (torch 2.11.0, transformers 5.25.0, liger-kernel 0.8.5, "
                                   "trl 1.16.0) is not a tested stack")


def test_the_helpers_known_to_fail_are_named_with_why_and_where_they_work(monkeypatch):
    failing = next(s for s in TESTED if s.failing_helpers)
    monkeypatch.setattr(env, "installed", lambda: dict(failing.versions))
    why = env.known_failure(f"liger_kernel.transformers.monkey_patch.{failing.failing_helpers[0]}")
    assert why.startswith(failing.why) and "pip install transformers==5.22.2" in why
    assert env.known_failure("apply_liger_kernel_to_qwen3") is None
    assert why in env.environment_summary() and "qwen3_vl" in env.environment_summary()


_HELPERS = """
import inspect, json
from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
failing = set()
for helper in set(MODEL_TYPE_TO_APPLY_LIGER_FN.values()):
    flags = {k: False for k, p in inspect.signature(helper).parameters.items() if isinstance(p.default, bool)}
    try:
        helper(**flags)  # every module off: what fails here fails whatever is asked for
    except Exception:
        failing.add(helper.__name__)
print(json.dumps(sorted(failing)))
"""


def test_the_installed_stack_fails_exactly_the_helpers_its_row_names():
    """The table's known failures are measured, not remembered: in a fresh process (the helpers' swaps stay
    there), every helper of Liger's registry is called with every module off."""
    stack = env.tested_stack()
    if stack is None:
        pytest.skip(f"this stack is untested ({env.untested()}): no row to hold it to")
    proc = subprocess.run([sys.executable, "-c", _HELPERS], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == sorted(stack.failing_helpers)


def test_an_untested_stack_is_warned_about_once_per_process_where_a_kit_first_applies(monkeypatch, kit):
    monkeypatch.setattr(env, "installed", lambda: _stack(trl="9.0.0"))
    monkeypatch.setattr(env, "_warned", False)
    with pytest.warns(UntestedVersionsWarning, match=r"trl 9\.0\.0 is outside the tested versions") as seen:
        kit.apply(model_family="qwen3")
    assert seen[0].filename == __file__  # it points at the caller's apply
    assert "`ligerkit env`" in str(seen[0].message) and TESTED[-1].line() in str(seen[0].message)
    kit.revert()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kit.apply(model_family="qwen3")  # once per process: no second warning


def test_a_tested_stack_applies_without_a_warning(monkeypatch, kit):
    monkeypatch.setattr(env, "installed", lambda: _stack())
    monkeypatch.setattr(env, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntestedVersionsWarning)
        kit.apply(model_family="qwen3")
