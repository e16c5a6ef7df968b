"""``benchmarks/suggest_sweep.py``: resume, deadline, limit, summary counts and the in-place audit over
both generations of ``suggest --json`` (fabricated lines), plus one real run over one small family."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = "transformers.models.qwen3.modeling_qwen3"
LLAMA = "transformers.models.llama.modeling_llama"
MOE = "transformers.models.fakemoe.modeling_fakemoe"
ROPE = "transformers.models.fakerope.modeling_fakerope"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suggest_sweep", ROOT / "benchmarks" / "suggest_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sw = _load()


def _candidate(symbol: str, replacement: str | None, reason: str, verdict: str = "match",
               **extra: Any) -> dict[str, Any]:
    return {"symbol": symbol, "kind": "norm", "verdict": verdict, "replacement": replacement, "reason": reason,
            "module": "rms_norm", "probes": [], **extra}


def _record(module: str, candidates: list[dict[str, Any]], *, gpu: bool = False, exit_code: int = 0,
            gradients: Any = None, tops: list[str] | None = None, official: bool = False) -> dict[str, Any]:
    data = {"module": module, "config": "C", "official_helper": {"family": "x"} if official else None,
            "candidates": candidates, "custom_patches": "", "gradients": gradients}
    return {"module": module, "family": module.split(".")[2], "gpu": gpu, "exit_code": exit_code,
            "timed_out": False, "seconds": 7.0, "json": data, "top_model_classes": tops or []}


def _failed(module: str, stderr: str, exit_code: int | None = 1, timed_out: bool = False,
            gpu: bool = False) -> dict[str, Any]:
    return {"module": module, "family": module.split(".")[2], "gpu": gpu, "exit_code": exit_code,
            "timed_out": timed_out, "seconds": 3.0, "json": None, "stderr_tail": stderr, "top_model_classes": []}


OLD_SAFE_WHOLE = "computes what LigerRMSNorm computes; its in-place write is safe here (in Qwen3ForCausalLM, nothing else shares what it writes)"
OLD_SAFE_BLOCK = "computes what LigerRMSNorm computes; its in-place write is safe here (in FakemoeSparseMoeBlock, nothing else shares what it writes)"
OLD_NOT_CHECKED = "computes what liger_rotary_pos_emb computes; its in-place write was not checked: FakeropeForCausalLM runs but never uses it"
OLD_TWIN = "computes what LigerRMSNorm computes; out of place: LigerRMSNorm writes in place (backward) and in X, another consumer ..."


def _write(path: Path, records: list[dict[str, Any]], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")


# ---------------------------------------------------------------- modules


def test_enumerate_and_select() -> None:
    targets = sw.enumerate_modules()
    modules = {t.module for t in targets}
    assert QWEN3 in modules and "transformers.models.qwen3_moe.modeling_qwen3_moe" in modules
    assert all(t.module.startswith(f"transformers.models.{t.family}.modeling_") for t in targets)
    assert [t.module for t in sw.select(targets, "qwen3")] == [QWEN3]
    picked = {t.module for t in sw.select(targets, "modeling_qwen3_moe, llama")}
    assert picked == {"transformers.models.qwen3_moe.modeling_qwen3_moe", LLAMA}
    assert sw.select(targets, None) == targets
    with pytest.raises(SystemExit, match="no_such_family"):
        sw.select(targets, "qwen3,no_such_family")


def test_top_model_classes_rank() -> None:
    assert sw.top_of(["XModel", "XForCausalLM", "XForConditionalGeneration", "XPreTrainedModel"]) == ["XForCausalLM"]
    assert sw.top_of(["XModel", "XForConditionalGeneration", "XLMHeadModel"]) == ["XForConditionalGeneration"]
    assert sw.top_of(["XModel", "XLMHeadModel", "XPreTrainedModel"]) == ["XLMHeadModel"]
    assert sw.top_of(["XModel", "XTextModel", "XVisionModel", "XPreTrainedModel"]) == ["XModel"]
    assert sw.top_of(["XDecoderLayer", "XRMSNorm"]) == []


def test_top_model_classes_of_a_real_module() -> None:
    module = importlib.import_module(QWEN3)
    assert sw.top_model_classes(module) == ["Qwen3ForCausalLM"]


# ---------------------------------------------------------------- resume, deadline, limit


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``run_module`` and ``import_module`` replaced: records what would run, runs nothing."""
    ran: list[str] = []

    def run_module(target: Any, options: Any, hard_stop: float | None, tops: list[str]) -> dict[str, Any]:
        ran.append(target.module)
        return _record(target.module, [], gpu=options.gpu, tops=tops)

    def import_module(target: Any) -> tuple[Any, str | None]:
        if "broken" in target.module:
            return None, "ModuleNotFoundError: No module named 'timm'"
        return ModuleType(target.module), None

    monkeypatch.setattr(sw, "run_module", run_module)
    monkeypatch.setattr(sw, "import_module", import_module)
    return ran


def _targets(*families: str) -> list[Any]:
    return [sw.Target(f"transformers.models.{f}.modeling_{f}", f) for f in families]


def test_resume_skips_done_modules_and_repairs_a_partial_line(tmp_path: Path, fake_run: list[str]) -> None:
    out = tmp_path / "sweep.jsonl"
    _write(out, [_record("transformers.models.a.modeling_a", [])], tail='{"module": "transformers.models.b.mod')
    result = sw.sweep(_targets("a", "b", "c", "broken"), out, sw.Options(), log=io.StringIO())
    assert fake_run == ["transformers.models.b.modeling_b", "transformers.models.c.modeling_c"]
    assert (result.ran, result.skipped_import, result.left) == (2, 1, 0)
    records = sw.read_records(out)
    assert [r["module"].split(".")[2] for r in records] == ["a", "b", "c", "broken"]
    assert records[-1]["skipped"] == "import" and "timm" in records[-1]["error"]
    assert all(line.startswith("{") for line in out.read_text().splitlines())  # the partial line is gone
    fake_run.clear()
    again = sw.sweep(_targets("a", "b", "c", "broken"), out, sw.Options(), log=io.StringIO())
    assert fake_run == [] and again.ran == 0 and again.left == 0


def test_limit_deadline_and_retry_timeouts(tmp_path: Path, fake_run: list[str]) -> None:
    out = tmp_path / "sweep.jsonl"
    first = sw.sweep(_targets("a", "b", "c"), out, sw.Options(), limit=1, log=io.StringIO())
    assert (first.ran, first.left, first.stopped_by) == (1, 2, "limit")
    late = sw.sweep(_targets("a", "b", "c"), out, sw.Options(), deadline=0, log=io.StringIO())
    assert (late.ran, late.left, late.stopped_by) == (0, 2, "deadline")
    with out.open("a") as handle:
        handle.write(json.dumps(_failed("transformers.models.b.modeling_b", "", None, timed_out=True)) + "\n")
    fake_run.clear()
    sw.sweep(_targets("a", "b", "c"), out, sw.Options(), log=io.StringIO())
    assert fake_run == ["transformers.models.c.modeling_c"]  # a timeout counts as done
    fake_run.clear()
    sw.sweep(_targets("a", "b", "c"), out, sw.Options(), retry_timeouts=True, log=io.StringIO())
    assert fake_run == ["transformers.models.b.modeling_b"]
    assert sw.latest(sw.read_records(out))["transformers.models.b.modeling_b"]["timed_out"] is False


def test_gpu_and_cpu_runs_do_not_mix(tmp_path: Path, fake_run: list[str]) -> None:
    out = tmp_path / "sweep.jsonl"
    _write(out, [_record("transformers.models.a.modeling_a", [])])
    with pytest.raises(SystemExit, match="without --gpu"):
        sw.sweep(_targets("a", "b"), out, sw.Options(gpu=True), log=io.StringIO())


def test_each_line_keeps_its_versions_and_a_file_of_other_versions_is_refused_untouched(
        tmp_path: Path, fake_run: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    here = {"torch": "2.13.0", "transformers": "5.25.0", "liger-kernel": "0.8.5"}
    monkeypatch.setattr(sw, "stack_now", lambda: dict(here))
    out = tmp_path / "sweep.jsonl"
    _write(out, [_record("transformers.models.a.modeling_a", [])])  # from before lines kept versions: taken as it is
    sw.sweep(_targets("a", "b", "broken"), out, sw.Options(), log=io.StringIO())
    assert fake_run == ["transformers.models.b.modeling_b"]
    assert [r.get("stack") for r in sw.read_records(out)] == [None, here, here]  # a run and a module that did not import
    kept = out.read_bytes()

    monkeypatch.setattr(sw, "stack_now", lambda: {**here, "transformers": "5.26.0"})
    with pytest.raises(SystemExit, match="other versions \\(transformers.models.b.modeling_b: transformers: '5.25.0' there, '5.26.0' here\\)"
                       ".*nothing was run"):
        sw.sweep(_targets("a", "b", "c"), out, sw.Options(), log=io.StringIO())
    assert fake_run == ["transformers.models.b.modeling_b"] and out.read_bytes() == kept
    fresh = tmp_path / "fresh.jsonl"
    with pytest.raises(SystemExit, match=f"{out.name} holds runs with other versions"):
        sw.resume_from(out, fresh)  # nor copied into a new file
    assert not fresh.exists()
    with pytest.raises(SystemExit, match="other versions"):
        sw.main(["--only", "qwen3", "--out", str(out), "--dry-run"])


def test_resume_from_copies_earlier_lines(tmp_path: Path, fake_run: list[str]) -> None:
    earlier, out = tmp_path / "earlier.jsonl", tmp_path / "out" / "sweep.jsonl"
    _write(earlier, [_record("transformers.models.a.modeling_a", [], gpu=True),
                     _record("transformers.models.b.modeling_b", [], gpu=True)])
    assert sw.resume_from(earlier, out) == 2
    assert sw.resume_from(earlier, out) == 0  # already there
    sw.sweep(_targets("a", "b", "c"), out, sw.Options(gpu=True), log=io.StringIO())
    assert fake_run == ["transformers.models.c.modeling_c"]
    assert len(sw.read_records(out)) == 3


def test_module_timeout_and_call_deadline(tmp_path: Path) -> None:
    slow = tmp_path / "slow_python"
    slow.write_text("#!/bin/sh\necho '{\"partial\": ' ; sleep 20\n")
    slow.chmod(0o755)
    target = sw.Target(QWEN3, "qwen3")
    start = time.monotonic()
    record = sw.run_module(target, sw.Options(timeout=0.5, python=str(slow)), None, ["Qwen3ForCausalLM"])
    assert record is not None and record["timed_out"] and record["exit_code"] is None
    assert sw.outcome(record) == "timeout"
    left = sw.run_module(target, sw.Options(timeout=30, python=str(slow)), time.monotonic() + 0.5, [])
    assert left is None  # killed by the call's deadline: not recorded, runs again next call
    assert time.monotonic() - start < 10


def test_failed_command_keeps_the_stderr_tail(tmp_path: Path) -> None:
    fake = tmp_path / "fake_python"
    fake.write_text("#!/bin/sh\necho 'error: SuggestError: nothing to probe in x' >&2\nexit 1\n")
    fake.chmod(0o755)
    record = sw.run_module(sw.Target(QWEN3, "qwen3"), sw.Options(python=str(fake)), None, [])
    assert record["exit_code"] == 1 and record["json"] is None
    assert "nothing to probe" in record["stderr_tail"] and sw.outcome(record) == "error: SuggestError"



def test_parallel_jobs_share_the_cores_unless_the_caller_set_the_threads(tmp_path: Path) -> None:
    assert sw.threads_per_job(4, {}, cores=16) == 4
    assert sw.threads_per_job(3, {}, cores=2) == 1
    assert sw.threads_per_job(1, {}, cores=16) is None  # one job: torch's own default
    assert sw.threads_per_job(4, {"OMP_NUM_THREADS": "2"}, cores=16) is None  # the caller's, inherited
    echo = tmp_path / "echo_threads"
    echo.write_text('#!/bin/sh\necho "{\\"threads\\": \\"$OMP_NUM_THREADS\\"}"\n')
    echo.chmod(0o755)
    record = sw.run_module(sw.Target(QWEN3, "qwen3"), sw.Options(python=str(echo), threads=3), None, [])
    assert record is not None and record["json"] == {"threads": "3"}


# ---------------------------------------------------------------- classification and summary


def test_in_place_replacements_come_from_the_catalog() -> None:
    assert sw.in_place_replacements() == {"LigerRMSNorm", "liger_rotary_pos_emb", "liger_multimodal_rotary_pos_emb"}


def test_classify_old_generation() -> None:
    tops = ["Qwen3ForCausalLM"]
    assert sw.classify(_candidate("Qwen3RMSNorm", "LigerRMSNorm", OLD_SAFE_WHOLE), tops)[:3] == \
        (sw.WHOLE, "Qwen3ForCausalLM", "old")
    assert sw.classify(_candidate("Qwen3RMSNorm", "LigerRMSNorm", OLD_SAFE_WHOLE), ["Qwen3ForConditionalGeneration"])[0] \
        == sw.SMALLER  # a causal LM under a conditional-generation model is smaller
    assert sw.classify(_candidate("N", "LigerRMSNorm", OLD_SAFE_BLOCK), ["FakemoeForCausalLM"])[:2] == \
        (sw.SMALLER, "FakemoeSparseMoeBlock")
    assert sw.classify(_candidate("apply_rotary_pos_emb", "liger_rotary_pos_emb", OLD_NOT_CHECKED), [])[0] == \
        sw.NOT_CHECKED
    assert sw.classify(_candidate("N", "LigerRMSNorm", "computes what LigerRMSNorm computes"), [])[0] == sw.UNKNOWN


def test_classify_new_generation() -> None:
    def new(verdict: str, whole: bool, model: str | None = "XForCausalLM") -> dict[str, Any]:
        return _candidate("N", "LigerRMSNorm", OLD_SAFE_WHOLE, in_place={
            "writes": "backward", "verdict": verdict, "model": model, "whole_model": whole, "reason": "r"})

    assert sw.classify(new("safe", True), [])[:3] == (sw.WHOLE, "XForCausalLM", "new")  # the field wins over the text
    assert sw.classify(new("safe", False, "XMoE"), ["XForCausalLM"])[0] == sw.SMALLER
    assert sw.classify(new("unproven", False, None), [])[0] == sw.NOT_CHECKED
    assert sw.classify(new("hazard", True), [])[0] == sw.HAZARD
    assert sw.classify(_candidate("N", "LigerRMSNorm", "x", in_place=None), [])[0] == sw.NOT_CHECKED


def _fabricated_old() -> list[dict[str, Any]]:
    return [
        _record(QWEN3, [_candidate("Qwen3RMSNorm", "LigerRMSNorm", OLD_SAFE_WHOLE),
                        _candidate("Qwen3MLP", "LigerSwiGLUMLP", "computes what LigerSwiGLUMLP computes")],
                tops=["Qwen3ForCausalLM"], official=True),
        _record(MOE, [_candidate("FakemoeRMSNorm", "LigerRMSNorm", OLD_SAFE_BLOCK),
                      _candidate("FakemoeOtherNorm", "LigerRMSNormForOlmo2", OLD_TWIN)],
                tops=["FakemoeForCausalLM"]),
        _record(ROPE, [_candidate("apply_rotary_pos_emb", "liger_rotary_pos_emb", OLD_NOT_CHECKED),
                       _candidate("FakeropeMLP", None, "left off: x", verdict="leave_off")],
                tops=["FakeropeForCausalLM"]),
        _record("transformers.models.empty.modeling_empty",
                [_candidate("EmptyNorm", None, "not LigerRMSNorm: x", verdict="leave_off")]),
        _failed("transformers.models.bert.modeling_bert", "error: SuggestError: nothing to probe in bert\n"),
        _failed("transformers.models.slow.modeling_slow", "", None, timed_out=True),
        {"module": "transformers.models.broken.modeling_broken", "family": "broken", "gpu": False,
         "skipped": "import", "error": "ModuleNotFoundError: timm", "exit_code": None, "seconds": 0.1, "json": None},
    ]


def test_summary_counts_old_generation() -> None:
    records = _fabricated_old()
    records.append(_failed(QWEN3, "error: SuggestError: stale\n"))  # an earlier line of qwen3 ...
    records.append(records[0])  # ... replaced by its latest line
    summary = sw.summarize(records, "old.jsonl")
    assert (summary.records, summary.swept, summary.skipped_import) == (7, 6, 1)
    assert (summary.maps, summary.maps_official) == (3, 1)
    assert summary.exit_codes == {"0": 4, "1": 1, "timeout": 1}
    assert summary.outcomes["map"] == 3 and summary.outcomes["no match"] == 1
    assert summary.outcomes["error: SuggestError"] == 1 and summary.outcomes["timeout"] == 1
    assert summary.outcomes["import: ModuleNotFoundError"] == 1
    by = {a.symbol: a for a in summary.audits}
    assert set(by) == {"Qwen3RMSNorm", "FakemoeRMSNorm", "apply_rotary_pos_emb"}  # the twin is out of place
    assert (by["Qwen3RMSNorm"].category, by["FakemoeRMSNorm"].category, by["apply_rotary_pos_emb"].category) == \
        (sw.WHOLE, sw.SMALLER, sw.NOT_CHECKED)
    assert not summary.gpu and not summary.gradients
    text = sw.render(summary)
    assert "smaller model" in text and "FakemoeSparseMoeBlock" in text and "fakerope" in text
    markdown = sw.render(summary, markdown=True)
    assert "| where its in-place check ran | swaps | families | modules | swaps (no helper) |" in markdown
    assert "| whole model | 1 | 1 | 1 | 0 | 0 |" in markdown and "| not checked | 1 | 1 | 1 | 1 | 1 |" in markdown


def test_summary_gpu_verdicts_new_and_old() -> None:
    coverage = {"model": "XForCausalLM", "compared": 3, "total": 40, "share": 0.01, "not_compared": ["lm_head.weight"]}
    new_in_place = {"writes": "backward", "verdict": "safe", "model": "XForCausalLM", "whole_model": True, "reason": "r"}
    records = [
        _record(QWEN3, [_candidate("N", "LigerRMSNorm", "x", in_place=new_in_place)], gpu=True,
                gradients={"verdict": "PASS", "coverage": {**coverage, "compared": 40, "share": 1.0}}),
        _record(MOE, [_candidate("N", "LigerRMSNorm", "x", in_place={**new_in_place, "verdict": "unproven",
                                                                       "whole_model": False})],
                gpu=True, exit_code=4, gradients={"verdict": "PARTIAL", "coverage": coverage}),
        _record(ROPE, [_candidate("N", "LigerRMSNorm", "x", in_place=None)], gpu=True, exit_code=1,
                gradients={"verdict": "FAIL", "coverage": coverage}),
        _record(LLAMA, [_candidate("LlamaRMSNorm", "LigerRMSNorm", OLD_SAFE_WHOLE)], gpu=True,
                gradients={"passed": True}, tops=["Qwen3ForCausalLM"]),  # old: passed -> PASS
        _failed("transformers.models.nogpu.modeling_nogpu", "no CUDA GPU", 3, gpu=True),
        _failed("transformers.models.nomap.modeling_nomap",
                "error: InvalidOptionError: suggest --gpu: no candidate matched\n", gpu=True),
        _failed("transformers.models.crash.modeling_crash",
                "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory\n", gpu=True),
    ]
    summary = sw.summarize(records, "gpu.jsonl")
    assert summary.gpu
    assert summary.gradients == {"PASS": 2, "PARTIAL": 1, "FAIL": 1, "not run: no GPU": 1,
                                 "not run: error: InvalidOptionError": 1, "not run: crash: OutOfMemoryError": 1}
    assert summary.exit_codes == {"0": 2, "1": 3, "3": 1, "4": 1}
    assert [a.category for a in summary.audits] == [sw.WHOLE, sw.NOT_CHECKED, sw.NOT_CHECKED, sw.WHOLE]
    text = sw.render(summary, markdown=True)
    assert "| PARTIAL | 1 |" in text and "| 4 (PARTIAL) | 1 |" in text and "3 / 40" in text
    assert summary.generations == {"new": 3, "old": 1}


def test_summary_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old.jsonl"
    _write(path, _fabricated_old())
    assert sw.main(["--summary", str(path), "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert "| modules with a map (>= 1 match) | 3 |" in printed


# ---------------------------------------------------------------- one real run


def test_real_run_over_one_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.jsonl"
    assert sw.main(["--only", "qwen3", "--out", str(out), "--timeout", "120"]) == 0
    assert "sweep complete" in capsys.readouterr().err
    (record,) = sw.read_records(out)
    assert record["module"] == QWEN3 and record["exit_code"] == 0 and not record["timed_out"], record
    assert record["top_model_classes"] == ["Qwen3ForCausalLM"]
    assert {c["replacement"] for c in sw.matched(record)} >= {"LigerSwiGLUMLP"}
    summary = sw.summarize([record])
    in_place = [c for c in sw.matched(record) if c["replacement"] in sw.in_place_replacements()]
    assert summary.maps == 1 and len(summary.audits) == len(in_place)  # each in-place match is audited
    assert all(a.category in sw.AUDIT_ORDER for a in summary.audits)
    assert sw.main(["--only", "qwen3", "--out", str(out)]) == 0  # resumes: nothing left to run
    assert "1 already in" in capsys.readouterr().err and len(sw.read_records(out)) == 1
