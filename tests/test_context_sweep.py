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


def test_nothing_fitting_at_the_start_ends_the_search_and_the_limit_caps_it():
    assert [t.seq_len for t in sweep(100)] == [4096]
    capped = sweep(10**9, limit=20000)
    assert [t.seq_len for t in capped] == [4096, 8192, 16384, 20000] and all(t.fits for t in capped)
    with pytest.raises(LigerKitError, match="precision"):
        next_length([], 4096, 1000)


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


def test_the_recommendation_names_the_longest_arm_and_its_tokens_per_second_beside_eagers():
    from ligerkit.proof.context_sweep import recommendation

    trials = [Trial("eager+ckpt", 8192, True, tokens_per_s=900.0), Trial("eager+ckpt", 16384, False, "out of memory"),
              Trial("liger_fused+offload", 98304, True, tokens_per_s=610.0),
              Trial("liger_fused+offload", 131072, False, "out of memory"),
              Trial("liger_fused", 65536, True, tokens_per_s=800.0), Trial("liger_fused", 98304, False, "oom")]
    result = summary(trials, ["eager+ckpt", "liger_fused", "liger_fused+offload"], reference="eager+ckpt")
    assert recommendation(result, "eager+ckpt") == (
        "longest: liger_fused+offload fits 98,304 tokens (12.00x eager+ckpt's 8,192), at 610 tokens/s there "
        "(eager+ckpt: 900 tokens/s at its longest)")
    assert recommendation(summary([Trial("eager", 4096, False, "oom")], ["eager"])) == \
        "no arm fit at the start length"
