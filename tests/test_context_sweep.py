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
