"""``ligerkit env`` and ``ligerkit --version``: the installed versions against the tested stacks, and the
README's command table naming every verb."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from ligerkit import __version__
from ligerkit import environment as env
from ligerkit.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_ligerkit_and_every_tested_stack():
    result = runner.invoke(app, ["--version"], prog_name="ligerkit")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"ligerkit {__version__}"
    assert [line.strip() for line in lines[2:]] == env.tested_lines()


def test_version_reads_no_torch():
    code = ("import sys\nfrom ligerkit.cli import app\ntry:\n    app(['--version'], prog_name='ligerkit')\n"
            "except SystemExit:\n    pass\nprint('HEAVY=' + ','.join(m for m in ('torch', 'transformers', "
            "'liger_kernel') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ligerkit {__version__}\n") and proc.stdout.strip().endswith("HEAVY=")


def test_env_json_compares_each_installed_package_with_the_tested_versions():
    result = runner.invoke(app, ["env", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ligerkit"] == __version__ and data["accelerator"] is None  # the CPU suite
    installed = env.installed()
    assert data["packages"] == {p: {"installed": installed[p], "tested": list(env.tested_versions(p))}
                                for p in env.PACKAGES}
    stack = env.tested_stack()
    assert data["tested_stack"] == (stack.where if stack else None) and data["untested"] == env.untested()
    assert [row["versions"] for row in data["tested"]] == [dict(s.versions) for s in env.TESTED]


def test_env_names_the_stack_and_the_helpers_known_to_fail_on_it(monkeypatch):
    failing = next(s for s in env.TESTED if s.failing_helpers)
    monkeypatch.setattr(env, "installed", lambda: dict(failing.versions))
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0, result.output
    assert "accelerator: none" in result.stdout
    assert f"this stack: tested ({failing.where})" in result.stdout
    assert f"known to fail here: Liger's {', '.join(failing.failing_helpers)} ({failing.why})" in result.stdout
    for line in env.tested_lines():
        assert f"  {line}" in result.stdout


def test_env_on_an_untested_stack_says_what_is_outside_and_still_exits_0(monkeypatch):
    monkeypatch.setattr(env, "installed", lambda: {**dict(env.TESTED[0].versions), "transformers": "5.26.0"})
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0, result.output
    assert "this stack: untested: transformers 5.26.0 is outside the tested versions" in result.stdout
    assert "transformers  5.26.0        5.25.0, 5.22.2" in result.stdout


def test_the_readme_command_table_has_a_row_for_every_verb_and_the_version():
    table = (ROOT / "README.md").read_text().split("## Command line")[1].split("\n## ")[0]
    verbs = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    missing = [v for v in verbs if f"| `ligerkit {v}" not in table]
    assert not missing and "| `ligerkit --version` |" in table, missing
