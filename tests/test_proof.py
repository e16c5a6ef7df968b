"""smoke and bench harness logic with fake runs (CPU): arm isolation, tolerances, ratios, outputs,
and the no-GPU exit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ligerkit.cli import app
from ligerkit.errors import LigerKitError
from ligerkit.proof import bench as B
from ligerkit.proof import bench_output as BO
from ligerkit.proof import bench_options as BOpt
from ligerkit.train.config import arms as A
from ligerkit.proof import arm_runs, smoke

ROOT = Path(__file__).resolve().parents[1]
GPU_CONFIG = ROOT / "recipes" / "qwen3" / "configs" / "gpu.yaml"


class FakeRunner:
    """Records each call (one per arm = one process) and returns a synthetic run."""

    def __init__(self, make):
        self.calls = []
        self.make = make

    def __call__(self, config, overrides, nproc=1):
        self.calls.append((Path(config), list(overrides), nproc))
        return self.make(overrides)


def run(losses, grad_norms, tokens_per_s, peak, mfu=0.3):
    steps = [{"loss": l_, "grad_norm": g, "tokens_per_s": t, "tokens_per_s_per_device": t, "peak_mem_gib": peak,
              "mfu": mfu, "step_time_s": 1000.0 / t} for l_, g, t in zip(losses, grad_norms, tokens_per_s, strict=True)]
    return {"steps": steps, "report": None}


def test_smoke_runs_each_arm_in_its_own_process_and_passes_within_bf16_tolerance():
    def make(overrides):
        on = "model.liger_kernel.enabled=true" in overrides
        return run([5.0, 4.0 + (0.005 if on else 0), 3.0], [2.0, 1.5, 1.2 * (1.05 if on else 1)], [1, 1, 1], 1.0)

    runner = FakeRunner(make)
    result = smoke.smoke(GPU_CONFIG, 3, ["train.optim.lr=0.001"], runner)
    assert len(runner.calls) == 2
    (_, off_sets, _), (_, on_sets, _) = runner.calls
    assert "model.liger_kernel.enabled=false" in off_sets and "model.liger_kernel.enabled=true" in on_sets
    assert "train.steps=3" in off_sets and "train.optim.lr=0.001" in on_sets
    assert result.dtype == "bfloat16" and result.loss_tolerance == 1e-2
    assert result.passed
    assert max(result.loss_gaps) == pytest.approx(0.005)


@pytest.mark.parametrize("loss_gap, gn_factor, passed", [(0.02, 1.0, False), (0.0, 1.2, False), (0.009, 1.09, True)])
def test_smoke_tolerances(loss_gap, gn_factor, passed):
    def make(overrides):
        on = "model.liger_kernel.enabled=true" in overrides
        return run([5.0 + (loss_gap if on else 0)], [2.0 * (gn_factor if on else 1)], [1], 1.0)

    assert smoke.smoke(GPU_CONFIG, 1, [], FakeRunner(make)).passed is passed


def test_float32_configs_get_the_tight_tolerance():
    make = lambda overrides: run([5.0 + (2e-4 if "model.liger_kernel.enabled=true" in overrides else 0)],  # noqa: E731
                                 [1.0], [1], 1.0)
    result = smoke.smoke(GPU_CONFIG, 1, ["model.dtype=float32"], FakeRunner(make))
    assert result.loss_tolerance == 1e-4 and not result.passed


def test_smoke_writes_json_and_a_png(tmp_path):
    make = lambda overrides: run([5.0, 4.0], [2.0, 1.0], [1, 1], 1.0)  # noqa: E731
    result = smoke.smoke(GPU_CONFIG, 2, [], FakeRunner(make))
    files = smoke.write_outputs(result, tmp_path)
    assert [f.name for f in files] == ["smoke.json", "smoke.png"]
    assert json.loads(files[0].read_text())["passed"] is True
    assert files[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = result.table().splitlines()
    assert table[2].startswith("| 1 | 5.0000 | 5.0000 |")  # steps count from 1, as the log and the plot
    assert table[3].startswith("| 2 | 4.0000 | 4.0000 |") and len(table) == 4


def test_bench_ratios_against_eager_measured_in_the_same_run(tmp_path):
    speed = {"eager": 100.0, "liger": 150.0, "liger_fused": 160.0}
    memory = {"eager": 40.0, "liger": 30.0, "liger_fused": 15.0}

    def make(overrides):
        arm = next(a for a, sets in A.ARMS.items() if all(s in overrides for s in sets))
        # warm-up steps are slow; the median of the rest is the arm's speed
        losses = [1.0, 0.9, 0.8, 0.7, 0.6] if arm != "liger" else [1.0, 0.9, 0.8, 0.7, 0.65]
        return run(losses, [1.0] * 5, [1.0, 1.0, speed[arm], speed[arm], speed[arm]], memory[arm])

    runner = FakeRunner(make)
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(BOpt.parse_arms("liger_fused,liger"), steps=5, warmup=2),
                     overrides=[], runner=runner)
    assert [c[1][-2] for c in runner.calls] == ["train.steps=5"] * 3 and len(runner.calls) == 3
    assert list(result["arms"]) == ["eager", "liger_fused", "liger"]
    assert result["arms"]["liger"]["tokens_per_s_vs_eager"] == pytest.approx(1.5)
    assert result["arms"]["liger_fused"]["peak_mem_vs_eager"] == pytest.approx(0.375)
    files = BO.write_outputs(result, tmp_path)
    table = files[1].read_text()
    assert result["arms"]["liger"]["max_loss_gap_vs_eager"] == pytest.approx(0.05)
    assert result["arms"]["liger"]["first_loss_gap_vs_eager"] == 0.0
    assert result["arms"]["liger"]["step_time_s"] == pytest.approx(1000.0 / 150)
    assert "| liger | 6666.7 | 150 | 1.50x | 150 | 30.0 | 0.750x | 30.0% | 0.0e+00 | 5.0e-02 |" in table
    assert json.loads(files[0].read_text())["arms"]["eager"]["tokens_per_s"] == 100.0


def _arm_of(overrides):
    """The arm a bench process runs (the bench passes train.arm=<arm>)."""
    return [o for o in overrides if o.startswith("train.arm=")][-1].partition("=")[2]


def test_bench_recommends_the_fastest_arm_within_tolerance_in_json_and_markdown(tmp_path):
    from dataclasses import dataclass

    speed = {"eager": 100.0, "liger": 150.0, "liger_fused": 160.0, "liger_compile_fused": 200.0}

    def make(overrides):
        arm = _arm_of(overrides)
        assert overrides[-len(A.ARMS[arm]) - 3:-3] == list(A.ARMS[arm])  # the arm's lines, after the user's
        return run([1.0, 0.9, 0.8], [1.0] * 3, [speed[arm]] * 3, 10.0)

    @dataclass
    class Grads:
        errors: dict
        changed: tuple = ()

    asked = []

    def gradients(names):
        asked.append(list(names))
        # the fastest arm writes twice eager's error + more than the slack: it fails its gradients
        errors = {"compile": 0.02, "liger_compile_fused": 0.2}
        return {"float32": Grads({"w": 0.0}), **{n: Grads({"w": errors.get(n, 0.01)}) for n in names}}

    runner = FakeRunner(make)
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(BOpt.parse_arms("liger,liger_fused,liger_compile_fused"), steps=3, warmup=1),
                     overrides=["train.optim.lr=0.001"], runner=runner, gradients=gradients)
    assert [_arm_of(c[1]) for c in runner.calls] == ["eager", "liger", "liger_fused", "liger_compile_fused"]
    assert all(c[1][0] == "train.optim.lr=0.001" for c in runner.calls)
    assert asked == [["eager", "compile", "liger", "liger_fused", "liger_compile_fused"]]  # compile: the reference
    pick = result["recommendation"]
    assert pick["arm"] == "liger_fused" and pick["grads_checked"] is True
    assert pick["config_lines"] == ["train.arm: liger_fused"]
    assert pick["equivalent_lines"] == ["model.liger_kernel.enabled: true", "train.loss.path: fused",
                                        "train.compile: off"]
    assert pick["verdicts"]["liger_compile_fused"]["grads_ok"] is False
    assert result["gradients"]["arms"]["liger_compile_fused"]["reference"] == "compile"
    record, table, _ = BO.write_outputs(result, tmp_path)
    assert json.loads(record.read_text())["recommendation"] == pick
    text = table.read_text()
    assert "**Recommendation: liger_fused** (1.60x eager tokens/s)" in text and "`train.arm: liger_fused`" in text
    assert "| liger_compile_fused | 2.00x | 0.0e+00 | pass | FAIL |" in text


def test_bench_without_gradients_says_the_recommendation_used_the_loss_rule_only(tmp_path):
    make = lambda overrides: run([1.0, 0.9], [1.0, 1.0], [200.0 if "liger" in _arm_of(overrides) else 100.0] * 2,  # noqa: E731
                                 1.0)
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0, loss_tolerance=1e-3),
                     overrides=[], runner=FakeRunner(make))
    assert result["gradients"] is None and result["loss_tolerance"] == 1e-3
    assert result["recommendation"]["arm"] == "liger" and result["recommendation"]["grads_checked"] is False
    _, table, _ = BO.write_outputs(result, tmp_path)
    assert "Gradients were not checked (--no-grads): only the loss rule was applied." in table.read_text()
    with pytest.raises(LigerKitError, match="--loss-tolerance"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager"], steps=2, warmup=0, loss_tolerance=-1),
                overrides=[], runner=FakeRunner(make))


def test_bench_repeats_runs_rounds_and_reports_medians_of_per_round_ratios(tmp_path):
    # round speeds: eager 100, 120, 90; liger 150, 150, 150 -> per-round ratios 1.5, 1.25, 1.667 -> 1.5
    eager_speeds, liger_speeds = iter([100.0, 120.0, 90.0]), iter([150.0, 180.0, 150.0])
    liger_losses = iter([[1.0, 0.9], [1.0, 0.905], [1.0, 0.9]])  # round 2 drifts most

    def make(overrides):
        if _arm_of(overrides) == "eager":
            return run([1.0, 0.9], [1.0, 1.0], [next(eager_speeds)] * 2, 40.0)
        return run(next(liger_losses), [1.0, 1.0], [next(liger_speeds)] * 2, 30.0)

    runner = FakeRunner(make)
    seen = []
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0, repeats=3),
                     overrides=[], runner=runner, on_arm=seen.append)
    assert [_arm_of(c[1]) for c in runner.calls] == ["eager", "liger"] * 3 and seen == ["eager", "liger"] * 3
    liger = result["arms"]["liger"]
    assert result["repeats"] == 3
    assert [r["tokens_per_s_vs_eager"] for r in liger["runs"]] == pytest.approx([1.5, 1.5, 5 / 3])
    assert liger["tokens_per_s_vs_eager"] == pytest.approx(1.5) and liger["tokens_per_s"] == 150.0
    assert result["arms"]["eager"]["tokens_per_s"] == 100.0  # median of 100, 120, 90
    assert liger["max_loss_gap_vs_eager"] == pytest.approx(0.005)  # the worst round
    assert [r["max_loss_gap_vs_eager"] for r in liger["runs"]] == pytest.approx([0.0, 0.005, 0.0])
    assert result["recommendation"]["arm"] == "liger"
    assert result["recommendation"]["tokens_per_s_vs_eager"] == pytest.approx(1.5)
    text = BO.write_outputs(result, tmp_path)[1].read_text()
    assert "3 rounds" in text and "- liger: 1.500x, 1.500x, 1.667x" in text
    with pytest.raises(LigerKitError, match="--repeats"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager"], steps=2, warmup=0, repeats=0), overrides=[], runner=runner)


def test_bench_ranks_arms_by_the_median_of_per_round_ratios_not_a_ratio_of_medians():
    # eager runs at 100, 200, 100; liger at 1.5x in every round; liger_fused at 1.4x, 1.45x, 1.6x:
    # its median speed (160) over eager's (100) says 1.6x, its median round says 1.45x
    speeds = {"eager": [100.0, 200.0, 100.0], "liger": [150.0, 300.0, 150.0], "liger_fused": [140.0, 290.0, 160.0]}
    counters = {arm: iter(v) for arm, v in speeds.items()}

    def make(overrides):
        return run([1.0, 0.9], [1.0, 1.0], [next(counters[_arm_of(overrides)])] * 2, 1.0)

    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger", "liger_fused"], steps=2, warmup=0, repeats=3),
                     overrides=[], runner=FakeRunner(make))
    fused = result["arms"]["liger_fused"]
    assert fused["tokens_per_s"] / result["arms"]["eager"]["tokens_per_s"] == pytest.approx(1.6)
    assert fused["tokens_per_s_vs_eager"] == pytest.approx(1.45)
    assert result["recommendation"]["arm"] == "liger"  # 1.5x every round beats a median round of 1.45x
    assert result["recommendation"]["tokens_per_s_vs_eager"] == pytest.approx(1.5)


def test_bench_hands_out_the_speed_results_before_the_gradient_pass_and_keeps_them_when_it_fails(tmp_path):
    make = lambda overrides: run([1.0, 0.9], [1.0, 1.0], [200.0 if "liger" in _arm_of(overrides) else 100.0] * 2,  # noqa: E731
                                 1.0)

    def gradients(names):
        raise LigerKitError("out of memory")

    with pytest.raises(LigerKitError, match="out of memory"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0),
                overrides=[], runner=FakeRunner(make), gradients=gradients, on_speed=lambda partial: BO.write_outputs(partial, tmp_path))
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["complete"] is False and record["recommendation"] is None
    assert record["arms"]["liger"]["tokens_per_s_vs_eager"] == pytest.approx(2.0)
    assert "no recommendation" in (tmp_path / "bench.md").read_text()


def test_bench_gradient_pass_uses_one_sample_and_turns_out_of_memory_into_advice(monkeypatch):
    import torch

    from ligerkit.proof import arm_grads

    seen = {}

    def fake(config, overrides, arms_, device, calls=1):
        seen["overrides"], seen["arms"] = list(overrides), dict(arms_)
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
        except torch.OutOfMemoryError as exc:  # as torch.compile re-raises it: wrapped
            raise RuntimeError("backend='inductor' raised: OutOfMemoryError") from exc

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", fake)
    with pytest.raises(LigerKitError, match="--no-grads"):
        B.recipe_gradients(GPU_CONFIG, ["train.micro_batch_size=4"], "cuda")(["eager", "liger_compile"])
    assert seen["overrides"] == ["train.micro_batch_size=4", "train.micro_batch_size=1", "data.pad_every=1",
                                 "train.arm=null"]
    assert seen["arms"]["liger_compile"].compiled and not seen["arms"]["eager"].compiled
    # the lines load, and the one sample they leave is right-padded
    from ligerkit.train.recipe.loading import load_engine

    engine = load_engine(GPU_CONFIG, seen["overrides"])
    batch = engine.make_batch(0, engine.config.train.micro_batch_size, 151936)
    assert batch["input_ids"].shape[0] == 1 and int(batch["attention_mask"].sum()) < batch["input_ids"].shape[1]

    def other(*args, **kwargs):
        raise ValueError("not a memory problem")

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", other)
    with pytest.raises(ValueError, match="not a memory problem"):
        B.recipe_gradients(GPU_CONFIG, [], "cuda")(["eager"])


def test_bench_help_shows_the_recommendation_options():
    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "80"})
    text = " ".join(result.stdout.split())
    assert result.exit_code == 0
    for option in ("--loss-tolerance X", "--repeats N", "--no-grads", "--grad-factor X", "--grad-slack X", "liger_compile_fused",
                   "train.arm: NAME", "--loss-reference eager|float32"):
        assert option in text, option


def test_bench_refuses_a_bad_loss_tolerance_before_looking_for_a_gpu(monkeypatch):
    monkeypatch.setattr(arm_runs, "accelerator", lambda: None)
    result = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--loss-tolerance", "nan"])
    assert result.exit_code == 1 and "--loss-tolerance" in result.stderr
    result = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--loss-reference", "fp32"])
    assert result.exit_code == 1 and "--loss-reference 'fp32': choose eager or float32" in result.stderr


def test_bench_rejects_unknown_arms_and_a_warmup_longer_than_the_run():
    with pytest.raises(LigerKitError, match="unknown arm"):
        BOpt.parse_arms("eager,turbo")
    with pytest.raises(LigerKitError, match="warmup"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager"], steps=3, warmup=3),
                overrides=[], runner=FakeRunner(lambda o: {}))


@pytest.mark.parametrize("verb", ["smoke", "bench"])
def test_without_a_gpu_the_verbs_say_so_and_exit_3(verb, monkeypatch):
    monkeypatch.setattr(arm_runs, "accelerator", lambda: None)
    result = CliRunner().invoke(app, [verb, "recipes/qwen3"])
    assert result.exit_code == arm_runs.NO_GPU_EXIT
    assert "no CUDA GPU or NPU here" in result.stderr


def test_a_recipe_folder_resolves_to_its_gpu_config():
    assert arm_runs.resolve_config(ROOT / "recipes" / "qwen3") == GPU_CONFIG
    with pytest.raises(LigerKitError):
        arm_runs.resolve_config(ROOT / "nope")


def test_compile_flag_compiles_each_decoder_layer():
    from ligerkit.train import Trainer, set_up_model
    from ligerkit.train.recipe.loading import load_engine
    import torch

    engine = load_engine(ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml",
                         ["train.compile=ops", "model.liger_kernel.enabled=false"])
    model = set_up_model(engine, torch.device("meta"))
    compiled = Trainer(engine).compile_model(model)
    assert compiled == ["model.layers.0", "model.layers.1"]
    assert model.model.layers[0]._compiled_call_impl is not None


def test_the_bench_arms_compile_as_operators_without_an_opt_in():
    from ligerkit.train.config import ConfigError, load_recipe_config

    assert load_recipe_config(GPU_CONFIG, ["train.compile=ops"]).train.compile == "ops"
    assert load_recipe_config(GPU_CONFIG, ["train.compile=trace"]).train.compile == "trace"  # the named opt-in
    # the bench's liger_compile arm relies on the default, not on the opt-in
    assert not any(line == "train.compile=trace" for lines in A.ARMS.values() for line in lines)
    liger_compile = load_recipe_config(GPU_CONFIG, A.ARMS["liger_compile"])
    assert liger_compile.train.compile == "ops" and liger_compile.model.liger_kernel.enabled
    with pytest.raises(ConfigError, match="sets train.compile=off; --set train.compile=trace sets it to trace"):
        load_recipe_config(GPU_CONFIG, ["train.arm=liger", "train.compile=trace"])
    for arm, sets in A.ARMS.items():  # every bench arm is a valid config
        assert load_recipe_config(GPU_CONFIG, sets), arm


def test_kit_against_the_helper_alternates_pairs_under_one_trainer():
    from ligerkit.proof.helper_speed import compare_kit_to_helper, helper_prelude, to_markdown

    calls = []

    def runner(config, overrides, prelude=None):
        calls.append(("direct" if prelude else "kit" if "model.liger_kernel.enabled=true" in overrides else "eager"))
        speed = {"eager": 1.0, "kit": 2.0, "direct": 2.0 + 0.01 * len(calls)}[calls[-1]]
        out = run([5.0, 4.0], [1.0, 1.0], [speed, speed], 1.0)
        out["report"] = {"patched": [], "applications": [{"family": "qwen3", "modules": {"rope": True}}]}
        return out

    result = compare_kit_to_helper(GPU_CONFIG, [], steps=2, warmup=0, repeats=3, runner=runner)
    assert calls == ["eager", "kit", "direct", "kit", "direct", "kit", "direct"]
    assert result["tokens_per_s_kit_over_direct"] == pytest.approx(2.0 / 2.05)  # median of the pair ratios
    assert "MODEL_TYPE_TO_APPLY_LIGER_FN" in helper_prelude("qwen3", {"rope": True})
    assert "alternating pairs" in to_markdown(result)


def test_a_prelude_runs_before_the_trainer_in_the_arm_process():
    from ligerkit.proof.arm_runs import run_arm
    from ligerkit.proof.helper_speed import helper_prelude

    config = ROOT / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    flags = dict.fromkeys(("rope", "rms_norm", "swiglu", "cross_entropy", "fused_linear_cross_entropy"), False)
    prelude = helper_prelude("qwen3", flags) + "\nprint('prelude ran', file=__import__('sys').stderr)"
    result = run_arm(config, ["train.steps=1", "train.run.progress=false"], prelude=prelude)
    assert len(result["steps"]) == 1 and result["report"] is None


def test_bench_grad_set_lines_come_last_in_the_gradient_pass_and_the_table_says_so(monkeypatch, tmp_path):
    from ligerkit.proof import arm_grads

    seen = {}

    def fake(config, overrides, arms_, device, calls=1):
        seen["overrides"] = list(overrides)
        raise ValueError("stop here")

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", fake)
    with pytest.raises(ValueError, match="stop here"):
        B.recipe_gradients(GPU_CONFIG, ["train.steps=3"], "cuda", ["data.seq_len=1024"])(["eager"])
    assert seen["overrides"] == ["train.steps=3", *B.GRADIENT_PASS_LINES, "data.seq_len=1024"]

    make = lambda overrides: run([1.0, 0.9], [1.0, 1.0], [100.0, 100.0], 1.0)  # noqa: E731
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0, grad_overrides=["data.seq_len=1024"]),
                     overrides=[], runner=FakeRunner(make), gradients=lambda names: {n: type("G", (), {"errors": {"w": 0.01}, "changed": ()})()
                                              for n in ["float32", *names]})
    assert result["gradients"]["overrides"] == ["data.seq_len=1024"]
    assert "Step-1 gradients checked with data.seq_len=1024" in BO.to_markdown(result)


def test_bench_grad_set_is_checked_before_looking_for_a_gpu(monkeypatch):
    monkeypatch.setattr(arm_runs, "accelerator", lambda: None)
    both = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--grad-set", "data.seq_len=1024", "--no-grads"])
    assert both.exit_code == 1 and "--no-grads" in both.stderr
    typo = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--grad-set", "data.seq_lenn=1024"])
    assert typo.exit_code == 1 and "seq_len" in typo.stderr
    assert "--grad-set 'data.seq_lenn=1024'" in typo.stderr  # the option is named, not only the file
    bare = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--grad-set", "noequals"])
    assert bare.exit_code == 1 and "--grad-set 'noequals'" in bare.stderr and "--set 'noequals'" not in bare.stderr
    arm = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--grad-set", "train.arm=nope"])
    assert arm.exit_code == 1 and "--grad-set train.arm=nope:" in arm.stderr and "--set train.arm" not in arm.stderr


def test_bench_resume_with_nothing_to_continue_is_said_before_looking_for_a_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(arm_runs, "accelerator", lambda: None)
    missing = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--out", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "does not exist; run the bench without --resume" in missing.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bench_runs.jsonl").write_text("[1, 2]\n")
    garbage = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--out", str(tmp_path / "bad")])
    assert garbage.exit_code == 1 and "does not start with a bench's identity" in garbage.stderr
    (tmp_path / "bad" / "bench_runs.jsonl").write_text('{"identity": {}}\n{"round": 0}\n')
    row = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--out", str(tmp_path / "bad")])
    assert row.exit_code == 1 and "other" in row.stderr  # another bench's identity (an empty one here)
    from ligerkit.proof.bench_log import bench_identity

    ours = bench_identity(GPU_CONFIG, [], list(A.DEFAULT_ARMS), 20, 5, 1, 1,
                          "eager", {"device": "H200", "torch": "2.11"})
    (tmp_path / "bad" / "bench_runs.jsonl").write_text(json.dumps({"identity": ours}) + '\n{"round": 0}\n')
    row = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--out", str(tmp_path / "bad")])
    assert row.exit_code == 1 and "holds a line that is not a bench run" in row.stderr, row.stderr
    (tmp_path / "bad" / "bench_runs.jsonl").write_text(json.dumps({"identity": ours}) + "\n")
    other = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--steps", "7", "--out", str(tmp_path / "bad")])
    assert other.exit_code == 1 and "other steps" in other.stderr  # compared before the GPU check, machine aside
    same = CliRunner().invoke(app, ["bench", "recipes/qwen3", "--resume", "--out", str(tmp_path / "bad")])
    assert same.exit_code == 3  # the same bench: on to the GPU check, which this machine fails


def test_an_arm_out_of_memory_is_a_result_of_the_bench_not_a_crash(tmp_path):
    from ligerkit.proof.arm_runs import ArmFailedError

    calls = {"n": 0}

    def make(overrides):
        arm = _arm_of(overrides)
        calls["n"] += 1
        if arm == "liger" and calls["n"] > 2:  # fits in round 1, out of memory in round 2
            raise ArmFailedError("train failed (1):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5 GiB")
        return run([1.0, 0.9], [1.0, 1.0], [150.0 if arm != "eager" else 100.0] * 2, 10.0)

    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger", "liger_fused"], steps=2, warmup=0, repeats=2),
                     overrides=[], runner=FakeRunner(make))
    assert result["out_of_memory"] == {"liger": "out of memory (round 2; asked for 5.00 GiB)"}
    assert list(result["arms"]) == ["eager", "liger_fused"] and len(result["arms"]["liger_fused"]["runs"]) == 2
    assert result["recommendation"]["arm"] == "liger_fused"
    assert "Did not fit, so not in the table nor recommended: liger: out of memory (round 2; asked for 5.00 GiB)." \
        in BO.to_markdown(result)
    BO.write_outputs(result, tmp_path)  # the table and the plot hold the arms that fit

    def eager_too_big(overrides):
        raise ArmFailedError("ConfigError: this config needs at least 200.0 GiB per GPU")

    with pytest.raises(LigerKitError, match="train.activation_checkpointing=true"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0),
                overrides=[], runner=FakeRunner(eager_too_big))

    def broken(overrides):
        raise ArmFailedError("ValueError: a bug, not a size")

    with pytest.raises(ArmFailedError, match="a bug"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0),
                overrides=[], runner=FakeRunner(broken))


def _float32_bench(tmp_path, make, **kwargs):
    runner = FakeRunner(make)
    result = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "compile_fused", "liger"], steps=2, warmup=0, loss_reference="float32"),
                     overrides=["train.optim.lr=1e-3"], runner=runner, **kwargs)
    return runner, result, BO.write_outputs(result, tmp_path)[1].read_text()


def test_the_float32_loss_reference_accepts_an_arm_nearer_float32_than_eager_and_no_other(tmp_path):
    """With LoRA on the H200, bf16 eager drifted 0.037 from float32 while compile stayed 0.003 from it:
    against eager alone the compiled arm fails the loss rule; against float32 it is the better one."""
    losses = {"float32": [2.0, 1.500], "eager": [2.0, 1.537], "compile_fused": [2.0, 1.503], "liger": [2.0, 1.600]}
    speed = {"eager": 100.0, "compile_fused": 190.0, "liger": 150.0}

    def make(overrides):
        name = "float32" if "model.dtype=float32" in overrides else _arm_of(overrides)
        return run(losses[name], [1.0, 1.0], [speed.get(name, 50.0)] * 2, 1.0)

    runner, result, text = _float32_bench(tmp_path, make)
    (_, last, _) = runner.calls[-1]  # after the rounds: the eager arm's lines, then float32 with autocast off
    assert last[-2:] == ["model.dtype=float32", "train.autocast_bf16=false"] and "train.optim.lr=1e-3" in last
    assert _arm_of(last) == "eager" and len(runner.calls) == 4
    assert result["float32_reference"] == {"lines": ["model.dtype=float32", "train.autocast_bf16=false"],
                                           "losses": [2.0, 1.5]}
    arms_ = result["arms"]
    assert arms_["eager"]["max_loss_gap_vs_float32"] == pytest.approx(0.037)
    assert arms_["compile_fused"]["max_loss_gap_vs_eager"] == pytest.approx(0.034)  # fails against eager alone
    pick = result["recommendation"]
    assert pick["arm"] == "compile_fused"
    assert pick["verdicts"]["compile_fused"]["loss_ok"] and "0.003 to float32 against eager's 0.037" in (
        pick["verdicts"]["compile_fused"]["reason"])
    assert not pick["verdicts"]["liger"]["loss_ok"]  # 0.1 from float32: further than eager + 0.01
    assert "no further from a float32 run's than eager's" in pick["reason"]
    assert "Largest per-step loss gap to a float32 run of eager" in text and "compile_fused 3.0e-03" in text
    plain = B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "compile_fused"], steps=2, warmup=0),
                    overrides=[], runner=FakeRunner(make))
    assert plain["recommendation"]["arm"] == "eager" and plain["float32_reference"] is None


def test_a_float32_reference_that_does_not_fit_is_retried_recomputed_then_said_and_the_rule_stays(tmp_path):
    from ligerkit.proof.arm_runs import ArmFailedError

    fits_recomputed = [False]

    def make(overrides):
        if "model.dtype=float32" in overrides and not (fits_recomputed[0] and
                                                        "train.activation_checkpointing=true" in overrides):
            raise ArmFailedError("train failed (1):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9 GiB")
        if "model.dtype=float32" in overrides:
            return run([2.0, 1.5], [1.0, 1.0], [50.0] * 2, 1.0)
        return run([2.0, 1.537 if _arm_of(overrides) == "eager" else 1.503], [1.0, 1.0],
                   [100.0 if _arm_of(overrides) == "eager" else 190.0] * 2, 1.0)

    seen = []
    runner, result, text = _float32_bench(tmp_path, make, on_arm=seen.append)
    tries = [c[1] for c in runner.calls if "model.dtype=float32" in c[1]]
    assert len(tries) == 2 and tries[1][-1] == "train.activation_checkpointing=true"
    assert result["float32_reference"]["did_not_fit"] == "out of memory, also with train.activation_checkpointing=true"
    assert seen[-1] == "float32" and result["recommendation"]["arm"] == "eager"  # against eager alone: 0.034 > 0.01
    assert "The float32 loss reference did not fit" in text
    fits_recomputed[0] = True  # recomputing the layers computes the same numbers: the second try is the reference
    _, result, _ = _float32_bench(tmp_path, make)
    assert result["float32_reference"]["lines"][-1] == "train.activation_checkpointing=true"
    assert result["recommendation"]["arm"] == "compile_fused"
    with pytest.raises(LigerKitError, match="--loss-reference 'fp32'"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager"], steps=2, warmup=0, loss_reference="fp32"),
                overrides=[], runner=FakeRunner(make))


def test_a_float32_reference_that_fails_for_another_reason_raises_after_the_speed_results_are_written(tmp_path):
    from ligerkit.proof.arm_runs import ArmFailedError

    def make(overrides):
        if "model.dtype=float32" in overrides:
            raise ArmFailedError("train failed (1):\nValueError: a bug, not a size")
        return run([2.0, 1.5], [1.0, 1.0], [100.0] * 2, 1.0)

    written = []
    with pytest.raises(LigerKitError, match="float32 loss reference .* failed: ValueError: a bug, not a size"):
        B.bench(GPU_CONFIG, BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0, loss_reference="float32"),
                overrides=[], runner=FakeRunner(make), on_speed=written.append)
    assert written and written[0]["complete"] is False and set(written[0]["arms"]) == {"eager", "liger"}


def test_a_stopped_bench_resumes_without_running_again_what_it_finished(tmp_path):
    """A device call's time limit stopped the 8B bench during its gradient pass; with the runs kept as they
    end, the next invocation reads them back and runs only what is left, and gets the same table."""
    from ligerkit.proof.bench_log import LOG_NAME, BenchLog, bench_identity

    speeds = {"eager": 100.0, "liger": 150.0}
    make = lambda overrides: run([2.0, 1.5] if "model.dtype=float32" in overrides else [2.0, 1.502], [1.0, 1.0],  # noqa: E731
                                 [speeds.get(_arm_of(overrides), 50.0)] * 2, 1.0)
    identity = bench_identity(GPU_CONFIG, [], ["eager", "liger"], 2, 0, 2, 1, "float32", {"device": "H200", "torch": "2.11"})

    class Stop(Exception):
        pass

    calls = []

    def stopping(config, overrides, nproc=1):
        if len(calls) == 3:  # round 2's liger run is cut off
            raise Stop
        calls.append(_arm_of(overrides))
        return make(overrides)

    options = BOpt.BenchOptions(["eager", "liger"], steps=2, warmup=0, repeats=2, loss_reference="float32")
    with pytest.raises(Stop):
        B.bench(GPU_CONFIG, options, [], runner=stopping, log=BenchLog(tmp_path, identity, resume=False))
    assert calls == ["eager", "liger", "eager"]
    with (tmp_path / LOG_NAME).open("a") as f:
        f.write('{"round": 1, "arm": "li')  # a line cut off mid-write is ignored
    runner = FakeRunner(make)
    resumed = B.bench(GPU_CONFIG, options, [], runner=runner, log=BenchLog(tmp_path, identity, resume=True))
    assert [_arm_of(c[1]) for c in runner.calls] == ["liger", "eager"]  # round 2's liger, then the float32 run
    assert "model.dtype=float32" in runner.calls[-1][1]
    whole = B.bench(GPU_CONFIG, options, [], runner=FakeRunner(make))
    assert resumed["arms"] == whole["arms"] and resumed["recommendation"] == whole["recommendation"]
    again = FakeRunner(make)  # everything is kept now: nothing runs again, the float32 reference included
    assert B.bench(GPU_CONFIG, options, [], runner=again, log=BenchLog(tmp_path, identity, resume=True))[
        "float32_reference"] == whole["float32_reference"]
    assert again.calls == []


def test_a_resume_with_another_config_or_machine_is_refused_naming_what_changed(tmp_path):
    from ligerkit.proof.bench_log import BenchLog, bench_identity

    def identity(**change):
        base = dict(config=GPU_CONFIG, overrides=[], arms=["eager"], steps=2, warmup=0, repeats=1, nproc=1,
                    loss_reference="eager", machine={"device": "H200", "torch": "2.11"})
        return bench_identity(**{**base, **change})

    with pytest.raises(LigerKitError, match="does not exist; run the bench without --resume"):
        BenchLog(tmp_path, identity(), resume=True)
    BenchLog(tmp_path, identity(), resume=False)
    with pytest.raises(LigerKitError, match=r"other machine, overrides \(machine: .*'H100'.*; overrides: \[\] then"):
        BenchLog(tmp_path, identity(overrides=["data.seq_len=1024"], machine={"device": "H100", "torch": "2.11"}),
                 resume=True)
    with pytest.raises(LigerKitError, match="other steps"):
        BenchLog(tmp_path, identity(steps=3), resume=True)
    import ligerkit.proof.bench_log as bench_log

    with pytest.MonkeyPatch.context() as mp:  # ligerkit changed between the two invocations (a new default)
        mp.setattr(bench_log, "code_version", lambda: "another ligerkit")
        with pytest.raises(LigerKitError, match="other ligerkit_code"):
            BenchLog(tmp_path, identity(), resume=True)
    assert BenchLog(tmp_path, identity(), resume=True).done == {}
    with (tmp_path / "bench_runs.jsonl").open("a") as f:
        f.write('{"round": 0, "arm": "eager", "summary": {"tokens_per_s": 1}}\n')
    with pytest.raises(LigerKitError, match="holds a line that is not a bench run"):
        BenchLog(tmp_path, identity(), resume=True)


def test_a_resume_after_the_recipe_code_changed_is_refused(tmp_path):
    """The recipe's own model code lies outside the package: a change to it between the two invocations
    is a difference; a change to its tests is not."""
    import shutil

    from ligerkit.proof.bench_log import BenchLog, bench_identity

    recipe = tmp_path / "custom_lm"
    shutil.copytree(ROOT / "recipes" / "custom_lm", recipe, ignore=shutil.ignore_patterns("__pycache__"))
    config = recipe / "configs" / "gpu.yaml"

    def identity():
        return bench_identity(config, [], ["eager"], 2, 0, 1, 1, "eager", {"device": "H200", "torch": "2.11"})

    first = identity()
    assert first["recipe_code"] is not None
    BenchLog(tmp_path / "out", first, resume=False)
    tests = next((recipe / "tests").rglob("*.py"))
    tests.write_text(tests.read_text() + "\n# a note\n")
    installed = recipe / ".venv" / "lib" / "site-packages" / "pkg.py"  # a virtual environment inside the folder
    installed.parent.mkdir(parents=True)
    installed.write_text("x = 1\n")
    assert BenchLog(tmp_path / "out", identity(), resume=True).done == {}  # neither is the recipe's code
    (recipe / "model" / "dangling.py").symlink_to(tmp_path / "nowhere.py")  # unreadable: a difference, not a crash
    with pytest.raises(LigerKitError, match="other recipe_code"):
        BenchLog(tmp_path / "out", identity(), resume=True)
    (recipe / "model" / "dangling.py").unlink()
    assert BenchLog(tmp_path / "out", identity(), resume=True).done == {}
    model = next(p for p in (recipe / "model").rglob("*.py") if p.stat().st_size)
    model.write_text(model.read_text() + "\n# changed\n")
    with pytest.raises(LigerKitError, match="other recipe_code"):
        BenchLog(tmp_path / "out", identity(), resume=True)


@pytest.mark.parametrize("form", [[], ["train.activation_checkpointing=true"],
                                  ["train.lora={rank: 4, alpha: 8, target_modules: all-linear}",
                                   "train.activation_checkpointing=true"]], ids=["as-built", "checkpointed", "lora"])
def test_the_gradient_proof_holds_one_model_at_a_time(monkeypatch, form):
    """Each arm is built after the float32 model and the arm before it are gone: at 8B the float32 copy
    alone is 32 GiB, and an arm built beside it does not fit an 80 GB card."""
    import weakref

    import torch

    from ligerkit.proof import arm_grads

    built: list[weakref.ref] = []
    real = arm_grads.set_up_model

    def watched(engine, device):  # no gc.collect() here: the proof itself must have let go
        alive = [ref() for ref in built if ref() is not None]
        assert not alive, f"{len(alive)} model(s) still held when the next one is built"
        model = real(engine, device)
        built.append(weakref.ref(model))
        return model

    monkeypatch.setattr(arm_grads, "set_up_model", watched)
    cpu = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    off = arm_grads.Arm(arm_grads.LIGER_OFF)
    out = arm_grads.recipe_arm_grads(cpu, ["train.micro_batch_size=1", "data.seq_len=16", *form],
                                     {"a": off, "b": off}, torch.device("cpu"))
    assert len(built) == 3 and list(out) == ["float32", "a", "b"]
    assert out["a"].errors and all(e < 1e-2 for e in out["a"].errors.values())


def test_an_arm_starts_after_this_process_gives_its_cached_cuda_blocks_back(monkeypatch):
    import subprocess
    import types

    import torch

    events = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: events.append("synchronize"))
    # cuBLAS's workspaces (CUDA builds only) would keep the segments they were cut from
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: events.append("workspaces"), raising=False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: events.append("arm") or types.SimpleNamespace(
        returncode=0, stdout='{"losses": [1.0]}', stderr=""))
    assert arm_runs.run_arm(GPU_CONFIG, ["train.steps=1"]) == {"losses": [1.0]}
    assert events == ["synchronize", "workspaces", "empty_cache", "arm"]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # CUDA never used here: nothing to give back
    events.clear()
    arm_runs.run_arm(GPU_CONFIG, ["train.steps=1"])
    assert events == ["arm"]
