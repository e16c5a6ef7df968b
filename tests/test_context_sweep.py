"""The context sweep's search (double, then bisect) and how it reads a run that did not fit."""

from __future__ import annotations

import pytest

from ligerkit.errors import LigerKitError
from ligerkit.proof.context_sweep import Trial, next_length, summary, to_markdown
from ligerkit.proof.fits import does_not_fit


def sweep(capacity: int, start: int = 4096, limit: int = 1 << 20, precision: float = 0.10) -> list[Trial]:
    """Run the search against an arm that fits exactly up to ``capacity`` tokens."""
    trials: list[Trial] = []
    while (length := next_length(trials, start, limit, precision)) is not None:
        assert length not in {t.seq_len for t in trials}, "a length is never tried twice"
        trials.append(Trial("a", length, length <= capacity, "" if length <= capacity else "out of memory"))
        assert len(trials) < 40
    return trials


def sweep_script(name: str):
    """``benchmarks/context_sweep_gpu.py`` loaded as a module of its own (``name``)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" /
                                                  "context_sweep_gpu.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def timed_trials(script, monkeypatch, fits=lambda length: True, card: str = "card A") -> list[int]:
    """Stand in for ``script``'s trials (a step takes (length / 4096)^2 seconds; ``fits`` says which lengths
    fit), its config lookup and its setting (measured on ``card``); returns the lengths run, in order, as
    they are run."""
    from pathlib import Path

    ran: list[int] = []

    def trial(config, arm, length, steps, extra):
        ran.append(length)
        step = (length / 4096) ** 2
        ok = fits(length)
        return Trial(arm, length, ok, "" if ok else "out of memory", tokens_per_s=1.0, seconds=10 + steps * step,
                     step_s=step)

    monkeypatch.setattr(script, "run_trial", trial)
    monkeypatch.setattr(script, "resolve_config", lambda target: Path(target))
    monkeypatch.setattr(script, "this_setting", lambda config, extra, steps: {"device": card, "steps": steps})
    return ran


@pytest.mark.parametrize("capacity", [5000, 35000, 110336, 300000])
def test_the_search_doubles_then_bisects_to_within_the_precision(capacity):
    trials = sweep(capacity)
    lengths = [t.seq_len for t in trials]
    doubling = [4096 * 2**i for i in range(len(lengths)) if 4096 * 2**i <= capacity * 2]
    assert lengths[:len(doubling)] == doubling[:len(lengths)]  # doubled from the start first
    longest = max(t.seq_len for t in trials if t.fits)
    miss = min(t.seq_len for t in trials if not t.fits and t.seq_len > longest)
    assert longest <= capacity < miss and miss <= longest * 1.10 + 256
    assert all(t.seq_len % 256 == 0 for t in trials)


def test_a_start_that_does_not_fit_is_halved_then_bisected_and_the_limit_caps_it():
    assert [t.seq_len for t in sweep(100)] == [4096, 2048, 1024, 512, 256]  # nothing fits even at 256
    trials = sweep(60160, start=106496, precision=0.05)
    assert [t.seq_len for t in trials[:2]] == [106496, 53248]
    longest = max(t.seq_len for t in trials if t.fits)
    miss = min(t.seq_len for t in trials if not t.fits and t.seq_len > longest)
    assert longest <= 60160 < miss <= longest * 1.05 + 256
    capped = sweep(10**9, limit=20000)
    assert [t.seq_len for t in capped] == [4096, 8192, 16384, 20000] and all(t.fits for t in capped)
    with pytest.raises(LigerKitError, match="--limit at least --start"):
        next_length([], 4096, 1000)
    with pytest.raises(LigerKitError, match="--precision takes a fraction"):
        next_length([], 4096, 8192, 1.5)


def test_a_run_that_did_not_fit_is_told_from_a_run_that_failed():
    assert does_not_fit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.51 GiB") == "out of memory"
    assert does_not_fit("ConfigError: this config needs at least 150.0 GiB per GPU") == \
        "refused by the footprint check"
    assert does_not_fit("ValueError: shapes do not match") is None


def test_the_summary_gives_each_arms_longest_fit_against_eager():
    trials = [Trial("eager", 4096, True, peak_mem_gib=10.0), Trial("eager", 8192, False, "out of memory"),
              Trial("fused", 4096, True), Trial("fused", 16384, True, peak_mem_gib=30.0, tokens_per_s=5.0),
              Trial("fused", 32768, False, "out of memory")]
    result = summary(trials, ["eager", "fused"])
    assert result["eager"]["longest_fit"] == 4096 and result["eager"]["shortest_miss"] == 8192
    assert result["fused"]["vs_eager"] == 4.0 and result["fused"]["peak_mem_gib"] == 30.0
    assert "| fused | 16384 | 4.00x | 32768 | out of memory | 30.0 | 5 |" in to_markdown(result)


def test_a_sweep_arm_is_a_bench_arm_with_memory_variants_and_a_bad_one_names_the_choices():
    from ligerkit.proof.context_sweep import arm_spec

    assert arm_spec("eager") == ("eager", ())
    assert arm_spec("liger_fused+offload") == ("liger_fused", ("train.activation_checkpointing=offload",))
    assert arm_spec("eager+ckpt") == ("eager", ("train.activation_checkpointing=true",))
    with pytest.raises(LigerKitError, match="the arms are eager, liger"):
        arm_spec("ligr+offload")
    assert arm_spec("liger_fused+offload+tiled")[1] == ("train.activation_checkpointing=offload",
                                                        "model.liger_kernel.tiled_mlp=true")
    with pytest.raises(LigerKitError, match="the variants are ckpt, offload, tiled"):
        arm_spec("liger_fused+offlaod")
    with pytest.raises(LigerKitError, match="sets train.activation_checkpointing twice"):
        arm_spec("liger_fused+ckpt+offload")


def _three_arms() -> dict:
    """A sweep of eager+ckpt (8,192), liger_fused (65,536) and liger_fused+offload (98,304), against eager+ckpt."""
    trials = [Trial("eager+ckpt", 8192, True, tokens_per_s=900.0), Trial("eager+ckpt", 16384, False, "out of memory"),
              Trial("liger_fused+offload", 98304, True, tokens_per_s=610.0),
              Trial("liger_fused+offload", 131072, False, "out of memory"),
              Trial("liger_fused", 65536, True, tokens_per_s=800.0), Trial("liger_fused", 98304, False, "oom")]
    return summary(trials, ["eager+ckpt", "liger_fused", "liger_fused+offload"], reference="eager+ckpt")


def test_the_recommendation_names_the_longest_arm_and_its_tokens_per_second_beside_eagers():
    from ligerkit.proof.context_sweep import recommendation

    result = _three_arms()
    assert recommendation(result, "eager+ckpt") == (
        "longest: liger_fused+offload fits 98,304 tokens (12.00x eager+ckpt's 8,192), at 610 tokens/s there "
        "(eager+ckpt: 900 tokens/s at its longest)")
    assert recommendation(summary([Trial("eager", 4096, False, "oom")], ["eager"])) == \
        "no arm fit at the start length"


def test_a_trials_lines_are_the_users_then_the_variants_then_the_length_then_the_arms():
    from ligerkit.proof.context_sweep import trial_overrides

    lines = trial_overrides("liger_fused+offload", 65536, ["train.lora.rank=8"], steps=2)
    assert lines[0] == "train.lora.rank=8"
    assert lines.index("train.activation_checkpointing=offload") < lines.index("data.seq_len=65536")
    assert lines.index("data.seq_len=65536") < lines.index("model.liger_kernel.enabled=true")
    assert "train.steps=2" in lines and "train.arm=liger_fused" in lines
    assert "model.config.max_position_embeddings=65536" in lines


def test_the_breakdown_table_has_a_column_per_arm_the_kinds_of_every_arm_and_names_what_was_not_measured():
    from ligerkit.proof.context_sweep import breakdown_markdown

    table = breakdown_markdown({
        "eager+ckpt": {"seq_len": 8192, "weights_gib": 15.0, "optimizer_states_gib": 0.1, "grads_gib": 0.0,
                       "saved_by_forward_gib": 2.5, "host_offloaded_gib": 0.0, "micro_batch_peak_gib": 40.25,
                       "saved_by_kind": {"checkpointed layer inputs": {"gib": 2.25}, "loss and the top model": {"gib": 0.25}}},
        "liger_fused+offload": {"seq_len": 98304, "workspace_gib": 0.0322, "weights_gib": 15.0,
                                "optimizer_states_gib": 0.1, "grads_gib": 0.0,
                                "saved_by_forward_gib": 1.0, "host_offloaded_gib": 27.0, "micro_batch_peak_gib": 60.0,
                                "saved_by_kind": {"norm": {"gib": 0.5}}},
        "liger_fused": {"seq_len": 65536, "error": "torch.OutOfMemoryError: CUDA out of memory"},
    })
    lines = table.splitlines()
    assert lines[0] == "| GiB | eager+ckpt at 8,192 | liger_fused+offload at 98,304 | liger_fused at 65,536 |"
    assert "| in host memory (offload) | 0.00 | 27.00 | - |" in lines
    assert "| cuBLAS workspaces | - | 0.03 | - |" in lines  # a line from before memory_gpu.py reported them: "-"
    assert "| peak of the step | 40.25 | 60.00 | - |" in lines
    assert "| forward keeps: checkpointed layer inputs | 2.25 | 0.00 | - |" in lines
    assert "| forward keeps: norm | 0.00 | 0.50 | - |" in lines
    assert lines[-1] == "not measured: liger_fused: torch.OutOfMemoryError: CUDA out of memory"


def test_the_sweeps_breakdown_runs_memory_gpu_with_the_trials_lines_and_keeps_its_error(monkeypatch):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = sweep_script("context_sweep_gpu")
    path = Path(script.__file__)
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if len(calls) == 1:
            return subprocess.CompletedProcess(cmd, 0, "log line\n" + json.dumps({"weights_gib": 1.5}) + "\n", "")
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory\n")

    monkeypatch.setattr(script.subprocess, "run", run)
    ok = script.breakdown(Path("cfg.yaml"), "liger_fused+offload", 4096, ["train.seed=1"])
    assert ok == {"seq_len": 4096, "weights_gib": 1.5}
    cmd = calls[0]
    assert cmd[:4] == [sys.executable, str(path.with_name("memory_gpu.py")), "cfg.yaml", "--saved"]
    sets = [cmd[i + 1] for i, part in enumerate(cmd) if part == "--set"]
    assert sets[0] == "train.seed=1" and "train.activation_checkpointing=offload" in sets and "data.seq_len=4096" in sets
    # the step that makes the optimizer states runs short: never longer than the measured length
    assert cmd[cmd.index("--first-step-tokens") + 1] == str(min(4096, script.BREAKDOWN_FIRST_STEP))
    assert script.breakdown(Path("cfg.yaml"), "eager", 4096, []) == {
        "seq_len": 4096, "error": "torch.OutOfMemoryError: CUDA out of memory"}
    script.breakdown(Path("cfg.yaml"), "eager", 10 * script.BREAKDOWN_FIRST_STEP, [])
    cmd = calls[-1]
    assert cmd[cmd.index("--first-step-tokens") + 1] == str(script.BREAKDOWN_FIRST_STEP)
    assert f"data.seq_len={10 * script.BREAKDOWN_FIRST_STEP}" in cmd


def test_each_sweep_arms_step1_gradients_are_judged_against_the_reference_arm_on_the_cpu():
    from pathlib import Path

    import torch

    from ligerkit.proof.context_sweep import sweep_gradients

    config = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    checks = sweep_gradients(config, ["eager+ckpt"], "eager", 32, ["model.dtype=bfloat16"], torch.device("cpu"))
    assert list(checks) == ["eager", "eager+ckpt"]
    assert checks["eager"].passed and checks["eager"].reason == "the reference"
    assert checks["eager+ckpt"].passed and checks["eager+ckpt"].reference == "eager"
    # checkpointing changes no bit: the arm's worst error is the reference's
    assert checks["eager+ckpt"].max_error == checks["eager"].max_error > 0


def test_a_gradient_check_out_of_gpu_memory_says_to_shorten_it_and_no_trial_runs(monkeypatch, tmp_path, capsys):
    import sys

    import torch

    from ligerkit.proof import arm_grads
    from ligerkit.proof.context_sweep import sweep_gradients

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 192.00 MiB.")

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", out_of_memory)
    with pytest.raises(LigerKitError, match="at 2,048 tokens .* ran out of GPU memory .*give --grads a shorter length"):
        sweep_gradients("cfg.yaml", ["liger_fused+offload"], "eager+ckpt", 2048, [], torch.device("cuda"))

    def broken(*args, **kwargs):
        raise ValueError("not a memory problem")

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", broken)
    with pytest.raises(ValueError, match="not a memory problem"):  # anything else is raised as it is
        sweep_gradients("cfg.yaml", ["liger_fused+offload"], "eager+ckpt", 2048, [], torch.device("cuda"))

    monkeypatch.setattr(arm_grads, "recipe_arm_grads", out_of_memory)
    script = sweep_script("context_sweep_gpu_grads_oom")
    ran = timed_trials(script, monkeypatch)
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    out = tmp_path / "sweep.jsonl"
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager+ckpt,liger_fused",
                                      "--grads", "2048", "--deadline", "1e9"])
    with pytest.raises(SystemExit, match="give --grads a shorter length"):
        script.main()
    assert ran == [] and not out.exists() and not out.with_suffix(".grads.json").exists()


def test_an_arm_whose_gradients_failed_or_were_not_checked_is_left_out_of_the_recommendation():
    from ligerkit.proof.context_sweep import recommendation
    from ligerkit.proof.recommend import GradCheck

    result = _three_arms()
    checks = {"eager+ckpt": GradCheck("eager+ckpt", "eager+ckpt", True, "the reference"),
              "liger_fused+offload": GradCheck("liger_fused+offload", "eager+ckpt", False, "3 of 310 gradients over")}
    assert recommendation(result, "eager+ckpt", checks) == (
        "longest: eager+ckpt fits 8,192 tokens, at 900 tokens/s there; left out: liger_fused (step-1 gradients: "
        "not checked); liger_fused+offload (step-1 gradients: 3 of 310 gradients over)")
    checks["liger_fused"] = GradCheck("liger_fused", "eager+ckpt", True, "every gradient within")
    assert recommendation(result, "eager+ckpt", checks).startswith(
        "longest: liger_fused fits 65,536 tokens (8.00x eager+ckpt's 8,192)")


def test_check_gradients_takes_references_by_name_and_judges_references_first():
    from ligerkit.proof.recommend import check_gradients

    class Errors:
        def __init__(self, errors, changed=()):
            self.errors, self.changed, self.not_compared = errors, list(changed), []

    grads = {"float32": Errors({"w": 0.0}), "b+x": Errors({"w": 0.05}), "a+ckpt": Errors({"w": 0.01})}
    checks = check_gradients(grads, references={"a+ckpt": "a+ckpt", "b+x": "a+ckpt"})
    assert list(checks) == ["b+x", "a+ckpt"] and checks["a+ckpt"].reason == "the reference"
    assert not checks["b+x"].passed and "over 2 x a+ckpt" in checks["b+x"].reason
    with pytest.raises(ValueError, match="no gradients of 'c'"):
        check_gradients(grads, references={"c": "a+ckpt"})


def test_a_trials_time_is_predicted_from_the_longest_timed_fit_with_steps_growing_as_the_square():
    from ligerkit.proof.context_sweep import predicted_seconds

    assert predicted_seconds([Trial("a", 4096, True)], 8192, 2) is None  # untimed (an older record)
    trials = [Trial("a", 4096, True, seconds=50.0, step_s=5.0), Trial("a", 8192, True, seconds=80.0, step_s=20.0),
              Trial("a", 16384, False, "out of memory", seconds=30.0)]
    # start-up 80 - 2 x 20 = 40 s, then each step 20 s x (16384 / 8192)^2
    assert predicted_seconds(trials, 16384, 2) == 40.0 + 2 * 80.0
    assert Trial(**{"arm": "a", "seq_len": 1, "fits": True}).seconds is None  # records before the times load


def test_an_arm_bounded_by_time_says_so_in_the_recommendation():
    from ligerkit.proof.context_sweep import TOO_SLOW, recommendation

    trials = [Trial("eager", 8192, True, tokens_per_s=900.0), Trial("eager", 16384, False, "out of memory"),
              Trial("fused", 65536, True, tokens_per_s=500.0),
              Trial("fused", 131072, False, f"{TOO_SLOW}: about 1,200 s a trial, over --deadline 540 s")]
    result = summary(trials, ["eager", "fused"])
    assert recommendation(result).endswith("its longest is bounded by the sweep's time limit, not by memory")
    assert f"| fused | 65536 | 8.00x | 131072 | {TOO_SLOW}: about 1,200 s" in to_markdown(result)


def test_the_sweep_skips_a_length_no_command_could_measure_and_keeps_it_out_of_its_record(monkeypatch, tmp_path):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_loop")
    ran = timed_trials(script, monkeypatch)  # every length fits
    out = tmp_path / "sweep.jsonl"
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096",
                                      "--limit", "65536", "--deadline", "100", "--precision", "0.3"])
    script.main()
    # 4096 (12 s), 8192 (18 s), 16384 (42 s), 32768 predicted 10 + 2 x 64 = 138 s > 100: not run; bisected below
    assert ran[:3] == [4096, 8192, 16384] and 32768 not in ran
    recorded = [json.loads(line)["seq_len"] for line in out.read_text().splitlines()]
    assert recorded == ran  # the prediction is not a measurement: not in the record
    row = json.loads(out.with_suffix(".summary.json").read_text())["arms"]["eager"]
    assert row["longest_fit"] == max(ran) and row["miss_reason"].startswith("too slow to measure")


def test_a_run_naming_fewer_arms_keeps_the_records_other_arms_in_its_summary(monkeypatch, tmp_path, capsys):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_fewer_arms")
    timed_trials(script, monkeypatch, fits=lambda length: length <= 8192)
    out = tmp_path / "sweep.jsonl"

    def run(arms: str, limit: int = 65536) -> dict:
        monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", arms, "--start", "4096",
                                          "--limit", str(limit), "--precision", "0.3"])
        script.main()
        return json.loads(out.with_suffix(".summary.json").read_text())

    everything = run("eager,liger_fused,liger_fused+ckpt")
    capsys.readouterr()
    later = run("liger_fused,eager", limit=4096)  # two arms, a shorter limit: nothing new runs for them
    assert later["searched"] == ["liger_fused", "eager"]
    assert list(later["arms"]) == ["liger_fused", "eager", "liger_fused+ckpt"]
    kept, earlier = later["arms"]["liger_fused+ckpt"], everything["arms"]["liger_fused+ckpt"]
    assert {k: v for k, v in kept.items() if k != "vs_liger_fused"} == \
        {k: v for k, v in earlier.items() if k != "vs_eager"}  # the reference is this run's first arm
    assert kept["longest_fit"] == 8192 and kept["shortest_miss"] == 9728
    assert "| liger_fused+ckpt | 8192 |" in capsys.readouterr().out


def test_a_trial_limit_above_the_deadline_stops_the_run_instead_of_calling_the_length_too_slow(monkeypatch, tmp_path,
                                                                                                 capsys):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_limit")
    ran = timed_trials(script, monkeypatch)  # every length fits
    out = tmp_path / "sweep.jsonl"
    argv = ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096", "--limit", "65536",
            "--deadline", "100", "--precision", "0.3", "--trial-limit", "1000"]
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    # 32768 (predicted 138 s) fits a 1000 s trial but not this run's 100 s: the run stops, nothing is called too slow
    assert ran == [4096, 8192, 16384]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["complete"] is False and summary["arms"]["eager"]["shortest_miss"] is None
    # no run of 100 s can start it: the run says what it waits for and what --deadline would let it start
    assert summary["next_trial"] == {"arm": "eager", "seq_len": 32768, "predicted_s": 138.0}
    said = capsys.readouterr().out
    assert "the next trial, eager at 32,768 tokens, takes about 138 s" in said and "--deadline above" in said
    monkeypatch.setattr(sys, "argv", [*argv[:-6], "--deadline", "150", "--precision", "0.3", "--trial-limit", "1000"])
    script.main()  # one that can: the search goes on where the record left it
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert ran[3:] == [32768] and summary["next_trial"]["seq_len"] == 65536
    monkeypatch.setattr(sys, "argv", [*argv[:-2], "--trial-limit", "0"])
    with pytest.raises(SystemExit):
        script.main()


def test_a_run_stopped_at_the_deadline_still_says_which_lengths_no_trial_could_reach_for_every_arm(monkeypatch,
                                                                                                      tmp_path):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_settle")
    ran = timed_trials(script, monkeypatch)
    out = tmp_path / "sweep.jsonl"
    lines = [Trial("eager", 4096, True, seconds=12.0, step_s=1.0, tokens_per_s=1.0),
             Trial("liger_fused", 16384, True, seconds=42.0, step_s=16.0, tokens_per_s=1.0)]
    out.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in lines))
    before = out.read_bytes()
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager,liger_fused",
                                      "--start", "4096", "--limit", "65536", "--precision", "0.3",
                                      "--trial-limit", "100", "--deadline", "10"])
    script.main()
    # eager's next trial (8192, about 18 s) outlasts the 10 s run: it stops there, before liger_fused's search; its
    # 32768 (about 138 s, over the 100 s a trial may take) is still a miss of its search, its 24576 the next to run
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert ran == [] and out.read_bytes() == before
    assert summary["complete"] is False and summary["next_trial"]["arm"] == "eager"
    fused = summary["arms"]["liger_fused"]
    assert fused["longest_fit"] == 16384 and fused["shortest_miss"] == 32768
    assert fused["miss_reason"].startswith("too slow to measure")
    assert summary["arms"]["eager"]["shortest_miss"] is None


def test_a_probed_fit_above_the_bisected_one_raises_that_arms_search(monkeypatch, tmp_path):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_probe")
    ran = timed_trials(script, monkeypatch, lambda length: length <= 55552 or length == 65536)  # the allocator
    out = tmp_path / "sweep.jsonl"
    argv = ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "106496", "--precision", "0.05",
            "--deadline", "1e9"]
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    assert json.loads(out.with_suffix(".summary.json").read_text())["arms"]["eager"]["longest_fit"] == 55552
    monkeypatch.setattr(sys, "argv", [*argv, "--probe", "eager=65536"])
    script.main()  # the probe runs once, then the search goes on above it
    assert ran.count(65536) == 1 and ran[ran.index(65536) + 1] > 65536
    row = json.loads(out.with_suffix(".summary.json").read_text())["arms"]["eager"]
    assert row["longest_fit"] == 65536 and row["shortest_miss"] <= 65536 * 1.05 + 256
    script.main()
    assert ran.count(65536) == 1  # a probe already in the record is not run again
    monkeypatch.setattr(sys, "argv", [*argv, "--probe", "eager=200704", "--trial-limit", "1000"])
    script.main()  # predicted at 10 + 2 x 2401 s: said, neither run nor recorded
    assert 200704 not in ran and "200704" not in out.read_text()
    monkeypatch.setattr(sys, "argv", [*argv, "--probe", "liger=65536"])
    with pytest.raises(SystemExit):
        script.main()


@pytest.mark.parametrize("args, said", [
    (["--start", "0"], "--start takes tokens above 0"),
    (["--limit", "100"], "--limit at least --start"),
    (["--precision", "2"], "--precision takes a fraction between 0 and 1"),
    (["--steps", "1"], "--steps takes 2 or more"),
    (["--arms", "eager,bogus"], "unknown arm 'bogus'"),
    (["--arms", "eager+huge"], "unknown variant 'huge'"),
    (["--reference", "liger"], "--reference takes one of --arms"),
    (["--recipe", "no_such_recipe"], "neither a config file nor a recipe folder"),
    (["--probe", "eager=-5"], "--probe takes ARM=LENGTH"),
    (["--record", "{\"arm\": 1, \"size\": 2}"], "line 1, is not a trial of this sweep"),
    (["--record", "not json"], "line 1, is not a trial of this sweep"),
    (["--work", "elsewhere"], "give --split with it"),
    (["--split", "--work", "pyproject.toml"], "--work takes a folder, and pyproject.toml is a file"),
])
def test_bad_sweep_arguments_are_refused_by_name_before_any_trial(monkeypatch, tmp_path, capsys, args, said):
    import sys

    from ligerkit.proof.arm_runs import resolve_config

    script = sweep_script("context_sweep_gpu_bad")
    ran = timed_trials(script, monkeypatch)
    monkeypatch.setattr(script, "resolve_config", resolve_config)  # the real lookup: a recipe that is not there
    out = tmp_path / "sweep.jsonl"
    if args[0] == "--record":
        out.write_text(args[1] + "\n")
        args = []
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--deadline",
                                      "1e9", *args])
    with pytest.raises(SystemExit):
        script.main()
    assert said in capsys.readouterr().err and ran == []


@pytest.mark.parametrize("suffix, content, option", [
    (".grads.json", "not json", ["--grads", "1024"]),
    (".grads.json", "not json", []),  # read without --grads too: the summary reports a kept check
    (".grads.json", "[1, 2]", ["--grads", "1024"]),
    (".grads.json", '{"seq_len": 1024}', ["--grads", "1024"]),
    (".grads.json", '{"checks": [{"seq_len": 1024, "reference": "eager"}]}', ["--grads", "1024"]),
    (".grads.json", '{"checks": [{"seq_len": "1024", "reference": "eager", "arms": {}}]}', ["--grads", "1024"]),
    (".grads.json", '{"checks": [{"seq_len": 1024, "reference": "eager", "arms": {"eager": {"arm": "eager"}}}]}',
     ["--grads", "1024"]),
    (".breakdown.json", '{"eager": {"seq_len": -4096}}', ["--breakdown"]),
    (".breakdown.json", '{"eager": 5}', ["--breakdown"]),
    (".breakdown.json", '{"eager": {"peak_gib": 5}}', ["--breakdown"]),
    (".part.json", '{"parts": [{"arm": "eager", "seq_len": 4096}]}', []),
    (".part.json", '{"parts": [{"arm": "eager", "seq_len": 4096, "run_dir": "r", "seconds": -1, "step_s": 1, '
                   '"peak_mem_gib": null, "setting": null}]}', ["--split"]),
])
def test_a_kept_check_or_breakdown_file_this_sweep_did_not_write_is_refused_by_name_and_left(monkeypatch, tmp_path,
                                                                                           capsys, suffix, content,
                                                                                           option):
    import sys

    script = sweep_script("context_sweep_gpu_kept_bad")
    ran = timed_trials(script, monkeypatch)
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "sweep_gradients", lambda *a, **k: pytest.fail("a gradient check ran"))
    out = tmp_path / "sweep.jsonl"
    kept = out.with_suffix(suffix)
    kept.write_text(content)
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096",
                                      "--limit", "4096", *option])
    with pytest.raises(SystemExit):
        script.main()
    said = capsys.readouterr().err
    assert f"{kept} is not the" in said and "an earlier run of this sweep wrote" in said and "move it aside" in said
    assert ran == [] and kept.read_text() == content and not out.exists()


def test_a_trial_off_a_cuda_gpu_is_refused_before_it_starts(monkeypatch):
    from pathlib import Path

    script = sweep_script("context_sweep_gpu_cpu")
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(script, "default_runner", lambda: pytest.fail("a trial started off the GPU"))
    with pytest.raises(LigerKitError, match="on a CUDA GPU, and this machine has none"):
        script.run_trial(Path("recipes/qwen3/configs/gpu.yaml"), "eager+ckpt", 4096, 2, [])


OUT_OF_MEMORY_TAIL = (
    "  File \"/site/torch/nn/functional.py\", line 2900, in silu\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.27 GiB. GPU 0 has a total capacity of\n"
    "79.19 GiB of which 3.06 GiB is free. Including non-PyTorch memory, this process has 76.12 GiB memory in use.\n"
    "Of the allocated memory 68.50 GiB is allocated by PyTorch, and 7.10 GiB is reserved by PyTorch but\n"
    "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=\n"
    "expandable_segments:True to avoid fragmentation.")


def test_the_allocators_out_of_memory_message_is_read_in_gib_whatever_its_units_and_line_breaks():
    from ligerkit.proof.fits import allocator_state, describe_allocator

    state = allocator_state(OUT_OF_MEMORY_TAIL)
    assert state == pytest.approx({"tried_gib": 6.27, "capacity_gib": 79.19, "free_gib": 3.06, "in_use_gib": 76.12,
                                   "allocated_gib": 68.50, "reserved_unallocated_gib": 7.10})
    said = describe_allocator(state)
    assert "asked for 6.27 GiB with 3.06 GiB free" in said and "68.5 GiB held by tensors" in said
    assert "7.10 GiB reserved but not handed out" in said
    # other units, no "Including non-PyTorch memory" clause; the last message counts when a log holds two
    short = allocator_state("CUDA out of memory. Tried to allocate 1 GiB. ...\nCUDA out of memory. Tried to allocate "
                            "20.00 MiB. GPU 0 has a total capacity of 8.00 GiB of which 0 bytes is free. Of the "
                            "allocated memory 512.00 KiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch "
                            "but unallocated.")
    assert short == pytest.approx({"tried_gib": 20 / 1024, "capacity_gib": 8.0, "free_gib": 0.0,
                                   "allocated_gib": 512 / 2**20, "reserved_unallocated_gib": 0.0})
    assert allocator_state("ConfigError: this config needs at least 150.0 GiB per GPU") is None
    assert allocator_state("ValueError: shapes do not match") is None
    assert describe_allocator(None) == ""


def test_an_out_of_memory_trial_keeps_what_the_allocator_held_into_its_record_summary_and_table(monkeypatch):
    from pathlib import Path

    from ligerkit.proof.arm_runs import ArmFailedError

    script = sweep_script("context_sweep_gpu_allocator")
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)

    def runner(config, overrides):
        raise ArmFailedError(f"python -m ligerkit train failed (1):\n{OUT_OF_MEMORY_TAIL}")

    monkeypatch.setattr(script, "default_runner", lambda: runner)
    miss = script.run_trial(Path("recipes/qwen3/configs/gpu.yaml"), "liger_fused+offload", 273664, 2, [])
    assert not miss.fits and miss.reason == "out of memory"
    assert miss.allocator["reserved_unallocated_gib"] == pytest.approx(7.10)
    assert Trial(**miss.to_dict()) == miss  # the record line loads back as it was
    result = summary([Trial("liger_fused+offload", 262144, True, peak_mem_gib=65.4), miss], ["liger_fused+offload"],
                     reference="liger_fused+offload")
    assert result["liger_fused+offload"]["miss_allocator"] == miss.allocator
    row = next(line for line in to_markdown(result, "liger_fused+offload").splitlines()
               if line.startswith("| liger_fused+offload |"))
    assert "| 273664 | out of memory (asked for 6.27 GiB with 3.06 GiB free;" in row
    assert "7.10 GiB reserved but not handed out) |" in row

    def refused(config, overrides):  # the footprint check's refusal says nothing of the allocator
        raise ArmFailedError("ConfigError: this config needs at least 150.0 GiB per GPU")

    monkeypatch.setattr(script, "default_runner", lambda: refused)
    trial = script.run_trial(Path("recipes/qwen3/configs/gpu.yaml"), "eager", 4096, 2, [])
    assert trial.reason == "refused by the footprint check" and trial.allocator is None
    assert "(" not in to_markdown(summary([trial], ["eager"])).splitlines()[-1].split("|")[5]


def test_the_sweep_prints_what_the_allocator_held_beside_an_out_of_memory_trial(monkeypatch, tmp_path, capsys):
    import json
    import sys

    from ligerkit.proof.fits import allocator_state

    script = sweep_script("context_sweep_gpu_allocator_print")
    monkeypatch.setattr(script, "resolve_config", lambda target: target)
    monkeypatch.setattr(script, "this_setting", lambda config, extra, steps: {"device": "card"})

    def trial(config, arm, length, steps, extra):
        if length <= 8192:
            return Trial(arm, length, True, tokens_per_s=1.0, seconds=1.0, step_s=0.1)
        return Trial(arm, length, False, "out of memory", seconds=1.0, allocator=allocator_state(OUT_OF_MEMORY_TAIL))

    monkeypatch.setattr(script, "run_trial", trial)
    out = tmp_path / "sweep.jsonl"
    monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096",
                                      "--limit", "16384", "--precision", "0.9"])
    script.main()
    printed = capsys.readouterr().out
    assert "eager 16384: out of memory (asked for 6.27 GiB with 3.06 GiB free; 68.5 GiB held by tensors; 7.10 GiB " \
           "reserved but not handed out)" in printed
    assert json.loads(out.read_text().splitlines()[-1])["allocator"]["tried_gib"] == pytest.approx(6.27)


def test_a_bench_arm_that_did_not_fit_is_a_result_with_the_allocators_account_and_the_reference_is_an_error():
    from ligerkit.proof.arm_runs import ArmFailedError
    from ligerkit.proof.fits import unfit_reason

    said = unfit_reason("liger", 1, ArmFailedError(OUT_OF_MEMORY_TAIL))
    assert said.startswith("out of memory (round 2; asked for 6.27 GiB with 3.06 GiB free;")
    assert said.endswith("7.10 GiB reserved but not handed out)")
    assert unfit_reason("liger", 0, ArmFailedError("ConfigError: this config needs at least 150.0 GiB per GPU")) == \
        "refused by the footprint check (round 1)"
    with pytest.raises(LigerKitError, match="eager, which every ratio is against, does not fit"):
        unfit_reason("eager", 0, ArmFailedError(OUT_OF_MEMORY_TAIL))
    failure = ArmFailedError("ValueError: shapes do not match")
    with pytest.raises(ArmFailedError) as raised:
        unfit_reason("liger", 0, failure)
    assert raised.value is failure


def test_a_sweep_setting_is_the_trained_config_the_card_the_stack_and_the_allocator(monkeypatch):
    from pathlib import Path

    from ligerkit.errors import ConfigError
    from ligerkit.proof.record_setting import ALLOC_CONF, sweep_setting

    config = Path(__file__).resolve().parents[1] / "recipes" / "qwen3" / "configs" / "cpu.yaml"
    versions = {"torch": "2.11.0", "transformers": "5.25.0", "liger-kernel": "0.8.5", "peft": None, "trl": "1.0"}
    monkeypatch.delenv(ALLOC_CONF, raising=False)
    base = sweep_setting(config, [], 2, "NVIDIA H200", 139.8, versions)
    assert base == {"config_sha256": base["config_sha256"], "steps": 2, "device": "NVIDIA H200", "device_gib": 140,
                    "torch": "2.11.0", "transformers": "5.25.0", "liger-kernel": "0.8.5", "peft": None,
                    "alloc_conf": ""}
    # the same config reached by another path or a --set that changes nothing is the same setting
    monkeypatch.chdir(config.parent)
    assert sweep_setting("cpu.yaml", [], 2, "NVIDIA H200", 139.8, versions) == base
    steps_in_file = __import__("yaml").safe_load(config.read_text())["train"]["steps"]
    assert sweep_setting(config, [f"train.steps={steps_in_file}"], 2, "NVIDIA H200", 139.8, versions) == base
    # what changes the trials changes the setting
    other = sweep_setting(config, ["train.optim.lr=0.5"], 2, "NVIDIA H200", 139.8, versions)
    assert other["config_sha256"] != base["config_sha256"]
    assert sweep_setting(config, [], 3, "NVIDIA H200", 139.8, versions)["steps"] == 3
    monkeypatch.setenv(ALLOC_CONF, "expandable_segments:True")
    assert sweep_setting(config, [], 2, "NVIDIA H200", 139.8, versions)["alloc_conf"] == "expandable_segments:True"
    with pytest.raises(ConfigError, match="train.stepz"):
        sweep_setting(config, ["train.stepz=3"], 2, "NVIDIA H200", 139.8, versions)


def test_a_setting_conflict_names_each_difference_and_older_trials_are_taken_as_they_are():
    from ligerkit.proof.record_setting import recorded_settings, setting_conflict

    here = {"device": "NVIDIA H200", "transformers": "5.25.0", "alloc_conf": ""}
    there = {"device": "NVIDIA H100 80GB HBM3", "transformers": "5.25.0", "alloc_conf": "expandable_segments:True"}
    assert setting_conflict([None, here, None], here) is None
    assert setting_conflict([here, there], here) == ("device: 'NVIDIA H100 80GB HBM3' there, 'NVIDIA H200' here; "
                                                    "alloc_conf: 'expandable_segments:True' there, '' here")
    assert setting_conflict([{**here, "peft": "0.21.2"}], here) == "peft: '0.21.2' there, None here"
    trials = [Trial("a", 1, True), Trial("a", 2, True, setting=here), Trial("b", 2, True, setting=there),
              Trial("b", 4, True, setting=here)]
    assert recorded_settings(trials) == [here, there]


def test_a_record_measured_in_another_setting_is_refused_before_any_trial_and_left_as_it_was(monkeypatch, tmp_path):
    import json
    import sys

    out = tmp_path / "sweep.jsonl"
    out.write_text(json.dumps(Trial("eager", 2048, True, tokens_per_s=1.0, seconds=10.0, step_s=0.25).to_dict()) + "\n")

    def argv(limit: int, *more: str) -> list[str]:
        return ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096", "--limit", str(limit),
                "--deadline", "1e9", *more]

    card_a = {"device": "card A", "steps": 2}
    script = sweep_script("context_sweep_gpu_setting")
    ran = timed_trials(script, monkeypatch, card="card A")
    monkeypatch.setattr(sys, "argv", argv(8192))
    script.main()  # a line from before records kept a setting is taken as it is; the new lines carry theirs
    assert ran == [4096, 8192]
    assert [json.loads(line)["setting"] for line in out.read_text().splitlines()] == [None, card_a, card_a]
    assert json.loads(out.with_suffix(".summary.json").read_text())["settings"] == [card_a]
    kept = out.read_bytes()

    script = sweep_script("context_sweep_gpu_setting_b")
    ran = timed_trials(script, monkeypatch, card="card B")
    monkeypatch.setattr(sys, "argv", argv(16384))
    with pytest.raises(SystemExit, match="measured in another setting than this run's \\(device: 'card A' there, "
                                         "'card B' here\\).*nothing was run or written.*Give --out a new file"):
        script.main()
    assert ran == [] and out.read_bytes() == kept
    monkeypatch.setattr(sys, "argv", argv(8192))
    script.main()  # a run that measures nothing (the search is complete) needs no setting: its summary is written
    assert ran == [] and out.read_bytes() == kept

    # a gradient check from another card is neither reused nor overwritten, even beside an empty record
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "sweep_gradients", lambda *a, **k: pytest.fail("a gradient check ran"))
    for record in (out, tmp_path / "new.jsonl"):
        grads = record.with_suffix(".grads.json")
        grads.write_text(json.dumps({"seq_len": 1024, "reference": "eager", "setting": card_a, "arms": {}}))
        monkeypatch.setattr(sys, "argv", [*argv(8192, "--grads", "1024")[:2], str(record), *argv(8192)[3:],
                                          "--grads", "1024"])
        with pytest.raises(SystemExit, match=f"{record.name if record == out else grads.name} was measured in "
                                             "another setting"):
            script.main()
        assert json.loads(grads.read_text())["setting"] == card_a
    assert ran == [] and out.read_bytes() == kept and not (tmp_path / "new.jsonl").exists()

    script = sweep_script("context_sweep_gpu_setting_a")
    ran = timed_trials(script, monkeypatch, card="card A")
    monkeypatch.setattr(sys, "argv", argv(16384))
    script.main()  # the record's own setting goes on where it stopped
    assert ran == [16384]

    # a breakdown measured in another setting is not added to
    breakdown = out.with_suffix(".breakdown.json")
    breakdown.write_text(json.dumps({"eager": {"seq_len": 8192, "setting": {"device": "card B", "steps": 2}}}))
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "breakdown", lambda *a, **k: pytest.fail("a breakdown was measured"))
    monkeypatch.setattr(sys, "argv", argv(16384, "--breakdown"))
    with pytest.raises(SystemExit, match=f"{breakdown.name} was measured in another setting .*no breakdown was "
                                         "measured or written into it"):
        script.main()
    assert json.loads(breakdown.read_text())["eager"]["seq_len"] == 8192


def test_every_gradient_check_is_kept_by_length_and_arms_and_one_covering_the_run_is_reused(monkeypatch, tmp_path):
    import json
    import sys

    from ligerkit.proof.recommend import GradCheck

    script = sweep_script("context_sweep_gpu_grads_kept")
    timed_trials(script, monkeypatch)
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    calls: list[tuple[int, tuple[str, ...]]] = []

    def checked(config, arms, reference, seq_len, extra, device):
        calls.append((seq_len, tuple(arms)))
        return {a: GradCheck(a, reference, True, "within bound", (), seq_len / 1e5)
                for a in dict.fromkeys([reference, *arms])}

    monkeypatch.setattr(script, "sweep_gradients", checked)
    out = tmp_path / "sweep.jsonl"
    grads = out.with_suffix(".grads.json")

    def run(arms: str, length: int) -> dict:
        monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", arms, "--start", "4096",
                                          "--limit", "4096", "--grads", str(length)])
        script.main()
        return json.loads(out.with_suffix(".summary.json").read_text())["gradients"]

    run("eager,liger_fused", 1024)
    first = json.loads(grads.read_text())["checks"]
    run("eager,liger_fused", 2048)  # another length: measured and added, the first check kept as it was
    kept = json.loads(grads.read_text())["checks"]
    assert len(calls) == 2 and kept[0] == first[0] and [c["seq_len"] for c in kept] == [1024, 2048]
    said = run("eager", 1024)  # arms a kept check covers: reused, with the record's other arm the check has
    assert len(calls) == 2 and said == {"seq_len": 1024, "arms": kept[0]["arms"]}
    run("eager,liger_fused+ckpt", 1024)  # an arm no check at this length has: a new check beside the others
    assert len(calls) == 3 and len(json.loads(grads.read_text())["checks"]) == 3

    # a file of one check, as written before checks were kept side by side, is read as one and kept on adding
    old = {"seq_len": 512, "reference": "eager", "setting": {"device": "card A", "steps": 2}, "arms": kept[0]["arms"]}
    grads.write_text(json.dumps(old))
    run("eager,liger_fused", 512)
    assert len(calls) == 3 and json.loads(grads.read_text()) == old
    run("eager,liger_fused", 256)
    assert len(calls) == 4 and json.loads(grads.read_text())["checks"][0] == old


def test_a_run_without_grads_reports_the_newest_kept_check_of_its_arms_measured_in_the_records_setting(
        monkeypatch, tmp_path, capsys):
    import json
    import sys

    from ligerkit.proof.recommend import GradCheck

    script = sweep_script("context_sweep_gpu_grads_read")
    ran = timed_trials(script, monkeypatch)
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    measured: list[int] = []

    def checked(config, arms, reference, seq_len, extra, device):
        measured.append(seq_len)
        return {a: GradCheck(a, reference, a != "liger", "within bound" if a != "liger" else "over the bound",
                             () if a != "liger" else ("w",), seq_len / 1e5) for a in dict.fromkeys([reference, *arms])}

    monkeypatch.setattr(script, "sweep_gradients", checked)
    out = tmp_path / "sweep.jsonl"

    def run(arms: str, *extra: str) -> dict:
        monkeypatch.setattr(sys, "argv", ["context_sweep_gpu.py", "--out", str(out), "--arms", arms, "--start",
                                          "4096", "--limit", "8192", *extra])
        script.main()
        return json.loads(out.with_suffix(".summary.json").read_text())

    assert run("eager,liger,liger_fused")["gradients"] is None  # nothing kept: none reported, none measured
    run("eager,liger,liger_fused", "--grads", "1024")
    run("eager,liger_fused", "--grads", "2048")
    kept = json.loads(out.with_suffix(".grads.json").read_text())["checks"]
    capsys.readouterr()
    summary = run("eager,liger_fused")  # the newest check covering the arms, read: nothing measured or rewritten
    assert measured == [1024, 2048] and json.loads(out.with_suffix(".grads.json").read_text())["checks"] == kept
    assert summary["gradients"] == {"seq_len": 2048, "arms": {a: kept[1]["arms"][a] for a in ("eager", "liger_fused")}}
    assert "kept: step-1 gradients at 2,048 tokens, liger_fused: PASS" in capsys.readouterr().out
    summary = run("eager,liger,liger_fused")  # only the first check covers liger, and it failed there
    assert summary["gradients"]["seq_len"] == 1024 and not summary["gradients"]["arms"]["liger"]["passed"]
    assert "left out: liger (step-1 gradients: over the bound)" in summary["recommendation"]

    # a check kept from another setting than the record's trials is not the record's: not reported
    settings = {json.dumps(json.loads(line)["setting"]) for line in out.read_text().splitlines()}
    assert settings == {json.dumps({"device": "card A", "steps": 2})} and ran
    other = [{**c, "setting": {"device": "card B", "steps": 2}} for c in kept]
    out.with_suffix(".grads.json").write_text(json.dumps({"checks": other}))
    assert run("eager,liger_fused")["gradients"] is None
    # ... also when the record was empty before this run measured its trials in its own setting
    out = tmp_path / "fresh.jsonl"
    out.with_suffix(".grads.json").write_text(json.dumps({"checks": other}))
    assert run("eager,liger_fused")["gradients"] is None and out.read_text()


def test_the_sweeps_kept_files_are_written_whole_or_not_at_all(monkeypatch, tmp_path):
    import json
    from pathlib import Path

    script = sweep_script("context_sweep_gpu_whole")
    kept = tmp_path / "sweep.grads.json"
    kept.write_text('{"checks": []}')

    def torn(self, text, *args, **kwargs):  # an interrupt halfway through the write
        with open(self, "w") as f:
            f.write(text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(KeyboardInterrupt):
        script.write_json(kept, {"checks": [{"seq_len": 1024}]})
    assert kept.read_text() == '{"checks": []}'
    monkeypatch.undo()
    script.write_json(kept, {"checks": [{"seq_len": 1024}]})
    assert json.loads(kept.read_text()) == {"checks": [{"seq_len": 1024}]}
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]  # the torn write's piece is gone with the next


def test_the_record_readers_take_what_the_sweep_wrote_and_refuse_the_rest(tmp_path):
    import json

    from ligerkit.proof.sweep_record import read_breakdowns, read_grad_checks, read_trials

    out = tmp_path / "sweep.jsonl"
    assert read_trials(out) == [] and read_grad_checks(out.with_suffix(".grads.json")) == []
    assert read_breakdowns(out.with_suffix(".breakdown.json")) == {}
    trial = Trial("eager", 4096, True, peak_mem_gib=3.5)
    out.write_text(json.dumps(trial.to_dict()) + "\n\n")
    assert read_trials(out) == [trial]
    check = {"arm": "liger", "reference": "eager", "passed": True, "reason": "ok", "failures": [], "max_error": 0.01}
    one = {"seq_len": 2048, "reference": "eager", "arms": {"liger": check}}
    grads = out.with_suffix(".grads.json")
    grads.write_text(json.dumps(one))  # one check, as the sweep wrote before it kept them all
    assert read_grad_checks(grads) == [one]
    grads.write_text(json.dumps({"checks": [one, {**one, "seq_len": 4096}]}))
    assert [c["seq_len"] for c in read_grad_checks(grads)] == [2048, 4096]
    grads.write_text(json.dumps({"checks": [{**one, "arms": {"liger": {**check, "passed": "yes"}}}]}))
    with pytest.raises(LigerKitError, match="is not the gradient checks"):
        read_grad_checks(grads)
    breakdowns = out.with_suffix(".breakdown.json")
    breakdowns.write_text(json.dumps({"liger": {"seq_len": 8192, "weights_gib": 1.0}}))
    assert read_breakdowns(breakdowns) == {"liger": {"seq_len": 8192, "weights_gib": 1.0}}
    breakdowns.write_text(json.dumps({"liger": {"seq_len": True}}))  # a bool is not a length
    with pytest.raises(LigerKitError, match="is not the breakdowns"):
        read_breakdowns(breakdowns)
    out.write_text('{"arm": "eager"}\n')
    with pytest.raises(LigerKitError, match="line 1, is not a trial"):
        read_trials(out)


def split_runs(script, monkeypatch, out_of_memory_at: int | None = None) -> list[dict]:
    """Stand in for ``ligerkit train`` behind ``script``'s trials, on a clock of its own: a process takes 10 s
    to start and (length / 4096)^2 x 10 s a step; one given ``train.run.stop_after_steps=1`` writes step 1's
    row and a checkpoint into its ``train.run.output_dir`` and exits as stopped, one given ``resume`` runs the
    other step (it needs that folder); a length of ``out_of_memory_at`` runs out of memory in step 1. Returns
    each call, in order."""
    import json
    import types
    from pathlib import Path

    from ligerkit.proof.arm_runs import ArmFailedError

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(script, "time", types.SimpleNamespace(monotonic=lambda: clock.now, time_ns=lambda: 7))
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "resolve_config", lambda target: Path(target))
    monkeypatch.setattr(script, "this_setting", lambda config, extra, steps: {"device": "card", "steps": steps})
    calls: list[dict] = []

    def row(step: int, length: int, peak: float) -> dict:
        seconds = (length / 4096) ** 2 * 10
        return {"step": step, "loss": 1.0, "grad_norm": 1.0, "tokens_per_s": length / seconds,
                "tokens_per_s_per_device": length / seconds, "step_time_s": seconds, "peak_mem_gib": peak,
                "mfu": None}

    def runner(config, overrides, resume=None):
        lines = dict(line.split("=", 1) for line in overrides)
        length, folder = int(lines["data.seq_len"]), lines.get("train.run.output_dir")
        stop = lines.get("train.run.stop_after_steps")
        calls.append({"length": length, "resume": resume, "stop": stop, "folder": folder})
        clock.now += 10
        if length == out_of_memory_at:
            clock.now += 5
            raise ArmFailedError(f"python -m ligerkit train failed (1):\n{OUT_OF_MEMORY_TAIL}")
        if resume is not None:
            assert resume == folder and (Path(folder) / "checkpoints").is_dir()
            clock.now += (length / 4096) ** 2 * 10
            return {"steps": [row(2, length, 7.0)], "report": None}
        if stop == "1":
            Path(folder, "checkpoints").mkdir(parents=True)
            Path(folder, "metrics.jsonl").write_text(json.dumps(row(1, length, 5.0)) + "\n")
            clock.now += (length / 4096) ** 2 * 10
            raise ArmFailedError("python -m ligerkit train failed (75):\nstopped after step 1 of 2")
        clock.now += 2 * (length / 4096) ** 2 * 10
        return {"steps": [row(1, length, 5.0), row(2, length, 6.0)], "report": None}

    monkeypatch.setattr(script, "default_runner", lambda: runner)
    return calls


def test_a_trial_past_the_trial_limit_runs_in_parts_across_commands_with_split(monkeypatch, tmp_path, capsys):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_split")
    calls = split_runs(script, monkeypatch)
    out, work = tmp_path / "sweep.jsonl", tmp_path / "work"
    argv = ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096", "--limit", "16384",
            "--precision", "0.3", "--trial-limit", "200", "--deadline", "400", "--split", "--work", str(work)]
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    # 4096 (30 s) and 8192 (90 s) whole; 16384 whole is predicted at 10 + 2 x 160 = 330 s, over the trial limit:
    # step 1 (170 s) runs, the other step (170 s) would end past the deadline, so it waits for the next command
    assert [(c["length"], c["stop"], c["resume"]) for c in calls] == [(4096, None, None), (8192, None, None),
                                                                      (16384, "1", None)]
    folder = calls[-1]["folder"]
    assert [json.loads(line)["seq_len"] for line in out.read_text().splitlines()] == [4096, 8192]
    parts = json.loads(out.with_suffix(".part.json").read_text())["parts"]
    assert [(p["arm"], p["seq_len"], p["run_dir"], p["peak_mem_gib"]) for p in parts] == [
        ("eager", 16384, folder, 5.0)]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["complete"] is False and summary["next_trial"]["part"] == "steps 2-2"
    assert f"resumes step 1's checkpoint in {folder}" in capsys.readouterr().out
    script.main()  # the next command resumes it: one trial over two processes, nothing waits
    assert calls[-1]["length"] == 16384 and calls[-1]["resume"] == folder and calls[-1]["stop"] is None
    last = Trial(**json.loads(out.read_text().splitlines()[-1]))
    assert (last.seq_len, last.fits, last.processes, last.peak_mem_gib) == (16384, True, 2, 7.0)  # the higher peak
    assert last.step_s == 160.0 and last.tokens_per_s == 16384 / 160.0 and last.seconds == 340.0
    assert json.loads(out.with_suffix(".part.json").read_text())["parts"] == []
    assert json.loads(out.with_suffix(".summary.json").read_text())["complete"] is True


def test_a_trial_in_parts_whose_first_step_s_folder_is_gone_starts_over_and_one_out_of_memory_is_a_miss(
        monkeypatch, tmp_path, capsys):
    import json
    import shutil
    import sys

    script = sweep_script("context_sweep_gpu_split_over")
    calls = split_runs(script, monkeypatch)
    out, work = tmp_path / "sweep.jsonl", tmp_path / "work"

    def argv(out, deadline):
        return ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096", "--limit", "16384",
                "--precision", "0.3", "--trial-limit", "200", "--deadline", deadline, "--split", "--work", str(work)]

    monkeypatch.setattr(sys, "argv", argv(out, "400"))
    script.main()
    shutil.rmtree(calls[-1]["folder"])  # another machine: step 1's checkpoint is not there
    monkeypatch.setattr(sys, "argv", argv(out, "600"))  # time for both parts
    script.main()
    assert "is not here (another machine?); the trial starts over" in capsys.readouterr().out
    assert [(c["length"], c["stop"], c["resume"] is not None) for c in calls[3:]] == [(16384, "1", False),
                                                                                      (16384, None, True)]
    assert Trial(**json.loads(out.read_text().splitlines()[-1])).processes == 2

    script = sweep_script("context_sweep_gpu_split_oom")
    split_runs(script, monkeypatch, out_of_memory_at=16384)
    out = tmp_path / "oom.jsonl"
    monkeypatch.setattr(sys, "argv", argv(out, "600"))
    script.main()
    miss = next(t for t in map(lambda line: Trial(**json.loads(line)), out.read_text().splitlines())
                if t.seq_len == 16384)  # step 1 out of memory: a miss, and the search bisects below it
    assert (miss.seq_len, miss.fits, miss.reason) == (16384, False, "out of memory") and miss.allocator
    assert json.loads(out.with_suffix(".part.json").read_text())["parts"] == []


def test_a_part_predicted_past_the_trial_limit_is_too_slow_and_without_split_the_whole_trial_is():
    from ligerkit.proof.context_sweep import predicted_seconds

    base = Trial("a", 8192, True, seconds=90.0, step_s=40.0)  # start-up 10 s
    assert predicted_seconds([base], 16384, 2) == 10 + 2 * 160.0
    assert predicted_seconds([base], 16384, 2, of=1) == 10 + 160.0
    parted = Trial("a", 16384, True, seconds=340.0, step_s=160.0, processes=2)  # two start-ups of 10 s
    assert predicted_seconds([base, parted], 32768, 2, of=1) == 10 + 640.0


def test_a_trial_in_parts_trains_the_same_two_steps_as_one_process_bit_for_bit(monkeypatch, tmp_path):
    """The parts are real ``ligerkit train`` processes (the CPU config, Liger off): step 1 stops with a
    checkpoint, the resumed process trains step 2, and the run folder's losses equal a whole run's."""
    from pathlib import Path

    from ligerkit.proof.arm_runs import run_arm
    from ligerkit.proof.context_sweep import trial_overrides
    from ligerkit.train.run.folder import metrics_rows

    script = sweep_script("context_sweep_gpu_parts_cpu")
    monkeypatch.setattr(script, "require_cuda", lambda: None)
    config, extra, folder = Path("recipes/qwen3/configs/cpu.yaml"), ["train.loss.path=standard"], tmp_path / "run"
    part = script.first_step(config, "eager", 256, 2, extra, folder)
    assert part["run_dir"] == str(folder) and part["step_s"] > 0 and [r["step"] for r in metrics_rows(folder, 9)] == [1]
    trial = script.other_steps(config, "eager", 256, 2, extra, part)
    assert trial.fits and trial.processes == 2 and trial.seconds > part["seconds"] and trial.tokens_per_s > 0
    whole = run_arm(config, trial_overrides("eager", 256, extra, 2))
    assert [r["loss"] for r in metrics_rows(folder, 9)] == [s["loss"] for s in whole["steps"]]


def test_a_length_measured_in_parts_gets_its_breakdown_and_one_past_the_deadline_is_said(monkeypatch, tmp_path,
                                                                                          capsys):
    import json
    import sys

    script = sweep_script("context_sweep_gpu_split_breakdown")
    split_runs(script, monkeypatch)
    measured = []

    def breakdown(config, arm, seq_len, extra):
        measured.append((arm, seq_len))
        return {"seq_len": seq_len, "weights_gib": 1.0}

    monkeypatch.setattr(script, "breakdown", lambda *a: pytest.fail("a breakdown ran past the deadline"))
    out = tmp_path / "sweep.jsonl"
    argv = ["context_sweep_gpu.py", "--out", str(out), "--arms", "eager", "--start", "4096", "--limit", "16384",
            "--precision", "0.3", "--trial-limit", "200", "--split", "--work", str(tmp_path / "work"), "--breakdown"]
    monkeypatch.setattr(sys, "argv", [*argv, "--deadline", "400"])
    script.main()  # step 1 of 16384
    monkeypatch.setattr(sys, "argv", [*argv, "--deadline", "300"])
    script.main()  # the other step (170 s); the breakdown, a step at 16384 in a process: 10 + 160 s, past 300
    said = capsys.readouterr().out
    assert "breakdown stopped at the deadline: rerun the same command to continue" in said
    assert json.loads(out.with_suffix(".summary.json").read_text())["complete"] is True
    assert not out.with_suffix(".breakdown.json").exists()
    monkeypatch.setattr(sys, "argv", [*argv, "--deadline", "100"])
    script.main()  # a deadline no rerun of this command can meet: said, not left for a rerun
    said = capsys.readouterr().out
    assert "no breakdown of eager at 16,384 tokens: it takes about 170 s" in said and "rerun" not in said
    assert not out.with_suffix(".breakdown.json").exists()
    monkeypatch.setattr(script, "breakdown", breakdown)
    monkeypatch.setattr(sys, "argv", [*argv, "--deadline", "300"])
    script.main()  # the rerun: the search is complete, the breakdown fits
    assert measured == [("eager", 16384)]
    assert json.loads(out.with_suffix(".breakdown.json").read_text())["eager"]["seq_len"] == 16384
