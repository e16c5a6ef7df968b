"""The measuring tools of the benchmarks: kernel time by kind, and the host-device synchronization counter."""

from __future__ import annotations

import warnings

import pytest

from ligerkit.proof.kernel_time import GAP_SIZES, exposed_us, idle_gaps, kind_of, summarize_kernels, union_us
from ligerkit.proof.syncs import SYNC_MESSAGE, SyncCounter


def test_kernels_are_sorted_into_kinds_by_name():
    assert kind_of("_rms_norm_forward_kernel") == "liger"
    assert kind_of("liger_cross_entropy_kernel") == "loss"  # Liger's loss kernel counts as loss, not as a swap
    assert kind_of("sm90_xmma_gemm_bf16") == "matmul"
    assert kind_of("flash_fwd_kernel") == "attention"
    assert kind_of("ncclDevKernel_AllGather") == "communication"
    assert kind_of("triton_poi_fused_add_0") == "inductor_fused"
    assert kind_of("something_else") == "other"


def test_union_and_exposed_time_count_overlap_once():
    assert union_us([(0, 10), (5, 15), (20, 30)]) == 25
    # communication 0-10 and 20-30, compute 5-25: 5 + 5 of the communication is not hidden
    assert exposed_us([(0, 10), (20, 30)], [(5, 25)]) == 10


def test_summary_splits_a_step_into_kernels_and_idle_time():
    kernels = [("sm90_gemm", 0.0, 4000.0), ("_rms_norm_forward", 4000.0, 5000.0), ("sm90_gemm", 10000.0, 14000.0)]
    out = summarize_kernels(kernels, steps=2, wall_ms=20.0)
    assert out["step_ms"] == 10.0
    assert out["kinds_ms"] == {"matmul": 4.0, "liger": 0.5}
    assert out["busy_ms"] == pytest.approx(4.5)
    assert out["no_kernel_ms"] == pytest.approx(5.5)
    assert out["top"][0] == {"kernel": "sm90_gemm", "kind": "matmul", "ms_per_step": 4.0, "calls_per_step": 1.0}
    with pytest.raises(ValueError, match="steps"):
        summarize_kernels(kernels, steps=0, wall_ms=1.0)


def test_idle_gaps_are_taken_apart_by_size_and_by_place():
    # two steps, each: a matmul, 5 us idle, a norm overlapped by a copy on another stream, then 2 ms
    # idle before the next step's matmul; the copy ends last, so the long gap comes after it
    kernels = []
    for step in range(2):
        t = step * 10_000.0
        kernels += [("sm90_gemm", t, t + 1000), ("_rms_norm_forward", t + 1005, t + 1100),
                    ("memcpy", t + 1050, t + 1200)]
    out = idle_gaps(kernels + [("sm90_gemm", 20_000.0, 20_100.0)], steps=2)
    # per step: one 5 us gap and one of 8.8 ms (the last step's gap runs into the extra kernel)
    assert out["gap_ms"] == pytest.approx((5 + 8800) / 1e3)
    assert list(out["by_size"]) == [GAP_SIZES[0], GAP_SIZES[-1]]
    assert out["by_size"][GAP_SIZES[0]] == {"gaps_per_step": 1.0, "ms_per_step": pytest.approx(0.005)}
    assert out["by_size"][GAP_SIZES[-1]]["gaps_per_step"] == 1.0
    longest, shortest = out["by_place"]
    assert (longest["after"], longest["before"]) == ("memcpy", "sm90_gemm")
    assert longest["ms_per_step"] == pytest.approx(8.8)
    assert (shortest["after"], shortest["before"]) == ("sm90_gemm", "_rms_norm_forward")
    # overlapping kernels leave no gap, and the order they are given in does not matter
    assert idle_gaps(list(reversed(kernels[:3])), steps=1)["by_place"] == [
        {"after": "sm90_gemm", "before": "_rms_norm_forward", "gaps_per_step": 1.0, "ms_per_step": pytest.approx(0.005)}]
    assert idle_gaps([("a", 0.0, 10.0), ("b", 5.0, 20.0)], steps=1)["gap_ms"] == 0.0
    with pytest.raises(ValueError, match="steps"):
        idle_gaps(kernels, steps=0)


def _sync_here() -> None:
    warnings.warn(SYNC_MESSAGE, UserWarning)  # what CUDA's debug mode raises at a synchronizing operation


def test_sync_counter_counts_each_step_and_names_the_source():
    modes = []
    with SyncCounter(set_mode=modes.append) as syncs:
        _sync_here()
        _sync_here()
        warnings.warn("an unrelated warning")
        assert syncs.step() == 2
        assert syncs.step() == 0
        _sync_here()
        syncs.discard()  # a warm-up that is not measured
        _sync_here()
        syncs.step()
    assert modes == ["warn", "default"]
    assert syncs.per_step == [2, 0, 1]
    (where, per_step), = syncs.sources().items()
    assert where.endswith("test_measure.py:" + str(_sync_here.__code__.co_firstlineno + 1))
    assert per_step == pytest.approx(1.0)  # 3 synchronizations over 3 steps
    assert syncs.sources(skip=1) == {where: 0.5}


def test_sync_counter_restores_the_mode_when_the_body_raises():
    modes = []
    with pytest.raises(RuntimeError), SyncCounter(set_mode=modes.append):
        raise RuntimeError("boom")
    assert modes == ["warn", "default"]
    with warnings.catch_warnings(record=True) as caught:  # the counter's filter is gone again
        warnings.simplefilter("default")
        warnings.warn("after")
    assert len(caught) == 1
