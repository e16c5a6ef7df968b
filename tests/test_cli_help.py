"""The command line's help: plain flags, a repeatable --set, 80 columns, and no heavy import to show it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app

runner = CliRunner()
VERBS = ("families", "plan", "suggest", "check", "train", "smoke", "bench", "env")
HEAVY = ("torch", "transformers", "liger_kernel", "triton")


def _help(*verb: str) -> str:
    result = runner.invoke(app, [*verb, "--help"], prog_name="ligerkit", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("verb", [(), *((v,) for v in VERBS)], ids=["ligerkit", *VERBS])
def test_help_shows_flags_bare_and_fits_80_columns(verb):
    text = _help(*verb)
    assert "<bool>" not in text and "<str>" not in text and "{" not in text.splitlines()[0]
    assert re.search(r"^  --help +Show this message", text, re.M)  # a bare flag, no value
    assert not [line for line in text.splitlines() if len(line) > 80]
    if verb:
        assert re.search(r"^  --json +Print JSON", text, re.M)


def test_the_command_list_is_not_cut_short():
    text = _help()
    assert "..." not in text.split("Commands:")[1]
    for verb in VERBS:
        assert f"\n  {verb} " in text


@pytest.mark.parametrize("verb", ["train", "smoke", "bench", "suggest"])
def test_set_says_it_takes_key_value_and_repeats(verb):
    text = " ".join(_help(verb).split())  # unwrapped
    assert "--set KEY=VALUE" in text
    assert "repeat for several" in text


def test_usage_names_arguments_plainly():
    assert "Usage: ligerkit suggest [OPTIONS] MODULE\n" in _help("suggest")
    assert "Usage: ligerkit check [OPTIONS] [RECIPE]\n" in _help("check")


_PROBE = """
import json, sys
from ligerkit.cli import app
for argv in {argvs!r}:
    try:
        app(argv, prog_name="ligerkit", standalone_mode=False)
    except SystemExit:
        pass
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def test_help_of_every_verb_imports_neither_torch_nor_transformers_nor_liger():
    argvs = [["--help"], *([verb, "--help"] for verb in VERBS)]
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(argvs=argvs)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Usage: ligerkit") == len(argvs)  # every help really printed
    modules = set(json.loads(proc.stdout.split("MODULES=")[1]))
    assert not {name for name in modules if name.split(".")[0] in HEAVY}, sorted(
        name for name in modules if name.split(".")[0] in HEAVY)[:5]


def test_python_dash_m_help_imports_nothing_heavy():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ligerkit", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "families" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert "ligerkit" in imported and not imported & set(HEAVY)


def test_the_package_names_are_lazy_and_complete():
    script = ("import sys, ligerkit; light = not any(m in sys.modules for m in ('torch', 'liger_kernel')); "
              "names = sorted(ligerkit.__all__); listed = set(names) <= set(dir(ligerkit)); "
              "from ligerkit import LigerKernelKit, LigerPatch, LigerKernelReport, ScanResult, Swap, StaleBinding, "
              "Application, LOSS_MODULES, LigerKitError, __version__; import ligerkit.kit as k; "
              "same = LigerKernelKit is k.LigerKernelKit and LOSS_MODULES == k.LOSS_MODULES; "
              "print(light, listed, same, names)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" [")[0] == "True True True"
    assert proc.stdout.strip().endswith(str(sorted([
        "Application", "LOSS_MODULES", "LigerKernelKit", "LigerKernelReport", "LigerKitError", "LigerPatch",
        "ScanResult", "StaleBinding", "Swap", "__version__"])))


def test_an_unknown_package_name_is_an_attribute_error():
    import ligerkit

    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        ligerkit.NotAThing  # noqa: B018
