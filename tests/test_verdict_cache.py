"""The verdict cache: a warm entry answers without building a model; any change of the key, a broken
entry or one of another schema is recomputed, never trusted.

Each test gets its own cache folder (``LIGERKIT_CACHE_DIR``) and a cold in-memory state: the
in-process caches of the in-place check, the official probe and the whole-model builder are emptied
for the test and put back after it.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from liger_kernel.transformers.rms_norm import LigerRMSNorm, LigerRMSNormForOlmo2

import ligerkit.probe.probe as probe_module
from ligerkit.kit import official_probe
from ligerkit.naming import qualified_name
from ligerkit.probe import aliasing, runnable, top_model
from ligerkit.probe import verdict_cache as V
from ligerkit.probe.aliasing import BACKWARD, AliasingResult, in_place_hazard
from ligerkit.probe.catalog import by_name
from ligerkit.probe.probe import kept_probe

TOYS = Path(__file__).parent / "toy_models"


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """An empty cache folder of the test's own and empty in-process caches (restored after)."""
    monkeypatch.setenv(V.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(V.SWITCH_ENV, raising=False)
    for module, name in [(aliasing, "_CACHE"), (official_probe, "_CACHE"), (runnable, "_TRIALS"),
                         (top_model, "_TOPS")]:
        monkeypatch.setattr(module, name, {})
    monkeypatch.setattr(V, "COUNTS", V.Counter())
    return tmp_path / "cache" / "verdicts"


def _forget(monkeypatch):
    """A new process's in-memory state: nothing computed yet (the disk cache stays)."""
    for module, name in [(aliasing, "_CACHE"), (official_probe, "_CACHE"), (runnable, "_TRIALS"),
                         (top_model, "_TOPS")]:
        monkeypatch.setattr(module, name, {})


def _no_builds(monkeypatch):
    """Any model build or check computation raises."""
    def refuse(*args, **kwargs):
        raise AssertionError("SENTINEL: a model was built or a check computed")

    for module, name in [(top_model, "make_model"), (runnable, "make_model"), (runnable, "build_model_class"),
                         (aliasing, "_detect"), (probe_module, "probe")]:
        monkeypatch.setattr(module, name, refuse)


def _summary(report):
    return [(a.family, a.modules, a.left_off, a.probed, a.differences, a.unproven, len(a.patched))
            for a in report.applications]


# --- a warm cache answers apply ---------------------------------------------------------------------

def test_a_warm_cache_answers_apply_without_building_a_model(cold, kit, monkeypatch):
    cold_report = _summary(kit.apply(model_family="qwen3"))
    kit.revert()
    assert V.COUNTS["computed"] >= 4 and V.COUNTS["written"] == V.COUNTS["computed"]  # 2 in-place, 3 probes
    _forget(monkeypatch)
    _no_builds(monkeypatch)
    monkeypatch.setattr(V, "COUNTS", V.Counter())
    assert _summary(kit.apply(model_family="qwen3")) == cold_report
    kit.revert()
    assert V.COUNTS["read"] >= 4 and V.COUNTS["computed"] == 0


def test_with_the_cache_off_the_same_apply_builds(cold, kit, monkeypatch):
    kit.apply(model_family="qwen3")
    kit.revert()
    _forget(monkeypatch)
    _no_builds(monkeypatch)
    monkeypatch.setenv(V.SWITCH_ENV, "off")
    with pytest.raises(Exception, match="SENTINEL"):
        kit.apply(model_family="qwen3")


# --- the in-place verdict: every key field --------------------------------------------------------

@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A copy of the layouts toy as its own module, in a file the test may edit."""
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(TOYS / "modeling_layouts.py", folder / "vc_layouts.py")
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("vc_layouts")
    yield module
    sys.modules.pop("vc_layouts", None)


@pytest.fixture
def detections(monkeypatch):
    """Every computed in-place check, recorded; the verdict is the real one."""
    calls = []
    real = aliasing._detect
    monkeypatch.setattr(aliasing, "_detect", lambda *args: calls.append(args) or real(*args))
    return calls


def _ask(toy, monkeypatch, config=None, replacement=LigerRMSNorm):
    _forget(monkeypatch)
    return in_place_hazard(toy.LayoutRMSNorm, toy, config or toy.LayoutConfig(layout="post"), BACKWARD,
                           replacement=replacement)


def _bump(package):
    real = V.versions()
    assert real[package], package
    return lambda: {**real, package: f"{real[package]}+changed"}


CHANGES = {
    "config value": lambda toy, mp: {"config": toy.LayoutConfig(layout="post", intermediate_size=96)},
    "modeling source": lambda toy, mp: Path(toy.__file__).write_text(Path(toy.__file__).read_text() + "\n# edit\n"),
    "module binding": lambda toy, mp: mp.setattr(toy, "rotate_half", lambda x: x),
    "replacement": lambda toy, mp: {"replacement": LigerRMSNormForOlmo2},
    "checker version": lambda toy, mp: mp.setattr(V, "checker_version", lambda: "another checker"),
    "torch version": lambda toy, mp: mp.setattr(V, "versions", _bump("torch")),
    "transformers version": lambda toy, mp: mp.setattr(V, "versions", _bump("transformers")),
    "liger-kernel version": lambda toy, mp: mp.setattr(V, "versions", _bump("liger-kernel")),
    "ligerkit version": lambda toy, mp: mp.setattr(V, "versions", _bump("ligerkit")),
    "parameter budget": lambda toy, mp: mp.setattr(runnable, "CPU_PARAMETER_BUDGET", 10**8),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_of_the_key_is_a_miss(cold, toy, detections, monkeypatch, change):
    first = _ask(toy, monkeypatch)
    assert first.checked and first.hazard, first.reason  # post-norm: the real verdict
    assert _ask(toy, monkeypatch) == first and len(detections) == 1  # the same key: read back
    asked = CHANGES[change](toy, monkeypatch)
    again = _ask(toy, monkeypatch, **(asked if isinstance(asked, dict) else {}))
    assert len(detections) == 2, f"a change of {change} was answered from the cache"
    assert again.checked and V.COUNTS["read"] == 1 and V.COUNTS["written"] == 2


def test_the_probe_result_is_kept_and_keyed_on_the_config(cold, toy, monkeypatch):
    calls = []
    real = probe_module.probe
    monkeypatch.setattr(probe_module, "probe", lambda *a: calls.append(a) or real(*a))
    entry = by_name("LigerRMSNorm")
    first = kept_probe(toy.LayoutRMSNorm, entry, toy.LayoutConfig(), toy)
    assert first.verdict == "match" and kept_probe(toy.LayoutRMSNorm, entry, toy.LayoutConfig(), toy) == first
    assert len(calls) == 1
    kept_probe(toy.LayoutRMSNorm, entry, toy.LayoutConfig(hidden_size=48), toy)
    kept_probe(toy.LayoutRMSNorm, by_name("LigerRMSNormForGemma2"), toy.LayoutConfig(), toy)
    assert len(calls) == 3


# --- broken and untrustworthy entries -------------------------------------------------------------

def _entry(folder: Path) -> Path:
    (path,) = folder.glob("in-place-*.json")
    return path


BROKEN = {
    "empty": lambda text: "",
    "truncated": lambda text: text[: len(text) // 2],
    "garbage": lambda text: "\x00\xff not json at all",
    "a list": lambda text: "[]",
    "null": lambda text: "null",
}


@pytest.mark.parametrize("damage", list(BROKEN))
def test_a_broken_entry_is_ignored_recomputed_and_rewritten(cold, toy, detections, monkeypatch, damage):
    first = _ask(toy, monkeypatch)
    path = _entry(cold)
    good = path.read_text()
    path.write_text(BROKEN[damage](good))
    assert _ask(toy, monkeypatch) == first
    assert len(detections) == 2 and V.COUNTS["rejected"] == 1
    assert json.loads(path.read_text()) == json.loads(good)  # rewritten
    assert _ask(toy, monkeypatch) == first and len(detections) == 2  # and read back
    assert not list(cold.glob(".*.tmp"))  # no temporary file left


def _tampered(stored):
    verdict = stored["verdict"]
    return {
        "hazard as text": {**stored, "verdict": {**verdict, "hazard": "no"}},
        "checked as a number": {**stored, "verdict": {**verdict, "checked": 1}},
        "a field missing": {**stored, "verdict": {k: v for k, v in verdict.items() if k != "reason"}},
        "a field added": {**stored, "verdict": {**verdict, "code": "print('hi')"}},
        "affected not a list": {**stored, "verdict": {**verdict, "affected": "x.weight"}},
        "another symbol": {**stored, "verdict": {**verdict, "source": "a.B"}},
        "a hazard never checked": {**stored, "verdict": {**verdict, "hazard": True, "checked": False, "model": None}},
        "another format": {**stored, "format": V.FORMAT + 1},
        "another key": {**stored, "key": {**stored["key"], "writes": "forward+backward"}},
        "no verdict": {k: v for k, v in stored.items() if k != "verdict"},
    }


@pytest.mark.parametrize("tamper", list(_tampered({"verdict": {}, "key": {}})))
def test_an_entry_that_does_not_validate_is_never_trusted(cold, toy, detections, monkeypatch, tamper):
    first = _ask(toy, monkeypatch)
    path = _entry(cold)
    stored = json.loads(path.read_text())
    stored["verdict"]["hazard"] = not first.hazard  # what a trusted tampered entry would answer
    stored["verdict"]["affected"] = [] if first.hazard else ["x.weight"]
    path.write_text(json.dumps(_tampered(stored)[tamper]))
    assert _ask(toy, monkeypatch) == first
    assert len(detections) == 2 and V.COUNTS["rejected"] == 1


# --- switch, place and what is never kept ---------------------------------------------------------

def test_the_cache_can_be_turned_off(cold, toy, detections, monkeypatch):
    monkeypatch.setenv(V.SWITCH_ENV, "off")
    _ask(toy, monkeypatch)
    _ask(toy, monkeypatch)
    assert len(detections) == 2 and not cold.exists()


def test_the_cache_lives_with_the_families_view(monkeypatch, tmp_path):
    from ligerkit.cli import families_view

    monkeypatch.setenv(V.CACHE_ENV, str(tmp_path / "mine"))
    assert V.cache_dir() == tmp_path / "mine" / "verdicts" and V.cache_dir().parent == families_view.cache_dir()
    monkeypatch.delenv(V.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert V.cache_dir() == tmp_path / "xdg" / "ligerkit" / "verdicts"


def test_a_symbol_not_found_by_its_name_is_checked_every_time(cold, toy, detections, monkeypatch):
    class LayoutRMSNorm(toy.LayoutRMSNorm):  # a local class: its name leads nowhere
        pass

    for _ in range(2):
        _forget(monkeypatch)
        in_place_hazard(LayoutRMSNorm, toy, toy.LayoutConfig(layout="post"), BACKWARD)
    assert len(detections) == 2 and not cold.exists()


def test_a_folder_that_cannot_be_written_still_gives_the_verdict(cold, toy, detections, monkeypatch):
    cold.parent.parent.mkdir(parents=True, exist_ok=True)
    cold.parent.write_text("a file where the folder should be")
    assert _ask(toy, monkeypatch).hazard and len(detections) == 1 and V.COUNTS["written"] == 0


def test_the_stored_verdict_is_plain_json_of_the_result(cold, toy, monkeypatch):
    result = _ask(toy, monkeypatch)
    stored = json.loads(_entry(cold).read_text())
    assert stored["verdict"] == {"source": qualified_name(toy.LayoutRMSNorm), "checked": True, "hazard": True,
                                 "reason": result.reason, "affected": list(result.affected), "model": result.model}
    assert stored["key"]["replacement"]["name"].startswith(qualified_name(LigerRMSNorm))
    assert isinstance(result, AliasingResult)


def test_the_folder_keeps_the_most_recently_used_verdicts(cold, monkeypatch):
    import os
    import time

    monkeypatch.setattr(V, "MAX_ENTRIES", 3)
    for i in range(3):  # three verdicts, written a second apart
        V.cached("test", lambda i=i: {"n": i}, lambda i=i: i, lambda r: {"n": r}, lambda d: d["n"])
        paths = sorted(V.cache_dir().glob("test-*.json"), key=lambda p: p.stat().st_mtime)
        os.utime(paths[-1], (time.time() - 10 + i, time.time() - 10 + i))
    assert V.cached("test", lambda: {"n": 0}, lambda: -1, lambda r: {"n": r}, lambda d: d["n"]) == 0  # read: used now
    V.cached("test", lambda: {"n": 3}, lambda: 3, lambda r: {"n": r}, lambda d: d["n"])  # a fourth: one must go
    kept = {json.loads(p.read_text())["verdict"]["n"] for p in V.cache_dir().glob("test-*.json")}
    assert kept == {0, 2, 3}  # the least recently used (1) went; 0 stayed because it was just read
