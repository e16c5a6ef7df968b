"""``ligerkit families``: readable at 80 columns, sorted, ligerkit's defaults beside Liger's, and a cached
view of Liger's registry that equals the live one and spares the second run Liger's import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.cli import families_view as view
from ligerkit.naming import LOSS_MODULES

runner = CliRunner()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder for the test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(view.CACHE_ENV, str(folder))
    return folder


def _live() -> list[dict]:
    """Liger's registry read directly, as the view describes it."""
    from ligerkit.kit.families import all_families

    return sorted(({"family": name, "helper": f.helper.__name__, "modules": dict(f.defaults),
                    "modeling_modules": list(f.modeling_modules)} for name, f in all_families().items()),
                  key=lambda row: row["family"])


def test_the_cached_view_equals_the_live_registry(cache):
    assert runner.invoke(app, ["families", "--json"]).exit_code == 0
    files = list(cache.glob("families-*.json"))
    assert len(files) == 1 and files[0] == view.cache_file()
    cached = json.loads(files[0].read_text())
    assert cached["families"] == _live()
    assert cached["stamp"]["liger_kernel"] and cached["stamp"]["transformers"]
    assert view.registry_view() == _live()  # read back from the file


def test_a_cache_for_another_installation_is_rebuilt(cache):
    path = view.cache_file()
    cache.mkdir()
    path.write_text(json.dumps({"stamp": {"liger_kernel": "0.0.1"}, "families": [{"family": "stale"}]}))
    assert [row["family"] for row in view.registry_view()] == [row["family"] for row in _live()]
    assert json.loads(path.read_text())["families"] == _live()


def test_an_unwritable_cache_folder_falls_back_to_the_live_registry(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(view.CACHE_ENV, str(blocker / "cache"))
    result = runner.invoke(app, ["families", "--json"])
    assert result.exit_code == 0, result.output
    assert [row["family"] for row in json.loads(result.stdout)] == [row["family"] for row in _live()]
    assert result.stderr == ""


def test_json_rows_are_sorted_and_carry_ligerkit_defaults(cache):
    rows = json.loads(runner.invoke(app, ["families", "--json"]).stdout)
    assert [r["family"] for r in rows] == sorted(r["family"] for r in rows)
    qwen3 = next(r for r in rows if r["family"] == "qwen3")
    assert set(qwen3) == {"family", "helper", "modules", "modeling_modules", "ligerkit_defaults"}
    assert qwen3["modules"]["fused_linear_cross_entropy"] is True
    assert qwen3["ligerkit_defaults"] == {**qwen3["modules"], "fused_linear_cross_entropy": False}
    granite = next(r for r in rows if r["family"] == "granite")  # Liger turns cross_entropy on there
    assert granite["modules"]["cross_entropy"] and not granite["ligerkit_defaults"]["cross_entropy"]


def test_the_table_is_readable_at_80_columns_sorted_with_both_defaults(cache):
    result = runner.invoke(app, ["families"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not [line for line in lines if len(line) > 80 or "…" in line]
    headers = [line.split(":")[0] for line in lines if line.endswith(tuple(r["helper"] for r in _live()))]
    assert headers == sorted(r["family"] for r in _live())
    block = result.stdout.split("\nqwen3: apply_liger_kernel_to_qwen3\n")[1].split("\n\n")[0]
    assert block.splitlines() == ["  on:  rope, rms_norm, swiglu", "  off: cross_entropy",
                                  "  fused_linear_cross_entropy: Liger on, ligerkit off (loss kernel)"]
    for name in LOSS_MODULES:
        assert name in " ".join(lines[:4])  # the header says which kernels ligerkit keeps off


def test_every_module_of_every_family_is_shown(cache):
    text = runner.invoke(app, ["families"], env={"COLUMNS": "80"}).stdout
    for row in _live():
        block = " ".join(text.split(f"\n{row['family']}: {row['helper']}\n")[1].split("\n\n")[0].split())
        assert all(module in block for module in row["modules"]), row["family"]


_RUN = """
import sys
from ligerkit.cli import app
try:
    app(["families", "--json"], prog_name="ligerkit", standalone_mode=False)
finally:
    print("HEAVY=" + ",".join(sorted(m for m in ("liger_kernel", "torch", "transformers") if m in sys.modules)))
"""


def test_a_second_run_reads_the_cache_and_imports_no_liger(cache):
    env = {**os.environ, view.CACHE_ENV: str(cache)}

    def run() -> tuple[list[dict], str]:
        proc = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out, heavy = proc.stdout.split("HEAVY=")
        return json.loads(out), heavy.strip()

    first, first_heavy = run()
    assert "liger_kernel" in first_heavy  # a miss reads the live registry
    second, second_heavy = run()
    assert second == first
    assert second_heavy == ""  # neither liger_kernel nor torch nor transformers
