"""The what-if estimator: change-point segments (default) or windows with a fleet-centred Beta
prior, latency histograms, and the calibration note every report carries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import record_trace

from keepersim.replay.calibration import compute_calibration_note, get_calibration
from keepersim.replay.estimator import (
    DEFAULT_LATENCY_BLOCKS,
    BehaviourEstimator,
    BetaPrior,
    compute_change_points,
    estimate_trace,
)
from keepersim.types.messages import (
    EXPIRED,
    FINISHED,
    STARTED,
    Inference,
    InferenceStatus,
)


def inf(address: str, start: int, status: InferenceStatus.ValueType, end: int = 0) -> Inference:
    return Inference(
        inference_id=f"{address}-{start}-{status}",
        assigned_to=address,
        executed_by=address if status == FINISHED else "",
        status=status,
        start_block_height=start,
        end_block_height=end,
    )


def fill(est: BehaviourEstimator, address: str, start: int, misses: int, successes: int) -> None:
    for _ in range(misses):
        est.observe(inf(address, start, EXPIRED))
    for _ in range(successes):
        est.observe(inf(address, start, FINISHED, start + 3))


def test_posterior_formula() -> None:
    est = BehaviourEstimator(1, method="windows", window_blocks=100, prior=(1, 30))
    fill(est, "a", 10, misses=3, successes=7)  # window 0
    fill(est, "b", 20, misses=1, successes=89)
    # fleet window 0: N = 100, M = 4 -> mu = (4 + 1) / (100 + 31)
    mu = 5 / 131
    assert est.get_fleet_rate(0) == pytest.approx(mu)
    assert est.get_miss_probability("a", 50) == pytest.approx((3 + 31 * mu) / (10 + 31))
    assert est.get_miss_probability("b", 99) == pytest.approx((1 + 31 * mu) / (90 + 31))


def test_sparse_window_falls_back_to_the_fleet_then_the_prior() -> None:
    est = BehaviourEstimator(1, method="windows", window_blocks=100, prior=BetaPrior(1, 30))
    fill(est, "bad", 150, misses=40, successes=10)  # window 1: a fleet-wide bad window
    fill(est, "good", 150, misses=0, successes=50)
    # A participant with no samples in window 1 gets the fleet's rate of that window ...
    assert est.get_miss_probability("silent", 150) == pytest.approx(est.get_fleet_rate(1))
    assert est.get_fleet_rate(1) == pytest.approx(41 / 131)
    # ... and in a window without any traffic, the prior mean a / (a + b).
    assert est.get_miss_probability("silent", 250) == pytest.approx(1 / 31)
    assert est.get_miss_probability("bad", 50) == pytest.approx(1 / 31)
    # Many samples dominate the prior.
    fill(est, "heavy", 350, misses=500, successes=500)
    assert est.get_miss_probability("heavy", 350) == pytest.approx(0.5, abs=0.01)
    # Declines and unresolved inferences are not samples.
    est.observe(inf("x", 150, STARTED, 150))  # declined: STARTED, ended at the decline
    est.observe(inf("x", 150, STARTED))
    assert est.get_counts("x", 1) == (0, 0)
    assert est.to_dict()["participants"]["x"]["declines"] == 1


def test_latency_histogram_draws() -> None:
    est = BehaviourEstimator(1)
    assert est.draw_latency("nobody", 123) == DEFAULT_LATENCY_BLOCKS
    for latency, n in ((2, 3), (5, 1)):
        for _ in range(n):
            est.observe(inf("a", 10, FINISHED, 10 + latency))
    draws = [est.draw_latency("a", r) for r in range(8)]
    assert draws == [2, 2, 2, 5] * 2  # exact ranks: 3 of 4 at 2 blocks
    # A participant without finishes uses the fleet's histogram.
    fill(est, "b", 10, misses=2, successes=0)
    assert est.draw_latency("b", 3) == 5
    summary = est.to_dict()["participants"]["a"]["latency"]
    assert summary["count"] == 4 and summary["histogram"] == {"2": 3, "5": 1}
    assert summary["p50"] == 2 and summary["max"] == 5


def test_prior_must_be_positive() -> None:
    with pytest.raises(ValueError, match="a > 0 and b > 0"):
        BetaPrior(0, 1)


def test_estimate_trace_memory_is_participants_by_windows(tmp_trace: Path) -> None:
    path, _ = record_trace(tmp_trace, blocks=300, participants=3, arrivals=2.0, seed=6)
    header, est = estimate_trace(path, method="windows", window_blocks=50)
    assert header.last_height == 300
    assert est.windows == 6
    cells = sum(len(w) for w in est._counts.values())  # noqa: SLF001
    assert cells <= 3 * 6
    assert est.inferences > 200


def test_change_points_find_a_step_and_leave_a_constant_rate_whole() -> None:
    rng = random.Random(3)
    flags = bytearray(int(rng.random() < 0.02) for _ in range(300))
    flags += bytearray(int(rng.random() < 0.6) for _ in range(120))
    flags += bytearray(int(rng.random() < 0.02) for _ in range(300))
    cuts = compute_change_points(flags, penalty=1.0, min_segment=8)
    assert len(cuts) == 2
    assert abs(cuts[0] - 300) <= 8 and abs(cuts[1] - 420) <= 8
    steady = bytearray(int(rng.random() < 0.1) for _ in range(2000))
    assert compute_change_points(steady, penalty=1.0, min_segment=8) == []
    # A higher penalty keeps fewer change points.
    assert len(compute_change_points(flags, penalty=50.0, min_segment=8)) < len(cuts)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.booleans(), max_size=300),
    st.floats(min_value=0, max_value=5),
    st.integers(min_value=1, max_value=20),
)
def test_change_points_are_sorted_and_leave_long_enough_segments(
    bits: list[bool], penalty: float, min_segment: int
) -> None:
    flags = bytearray(int(b) for b in bits)
    cuts = compute_change_points(flags, penalty, min_segment)
    assert cuts == sorted(set(cuts))
    bounds = [0, *cuts, len(flags)]
    if cuts:
        assert all(b - a >= min_segment for a, b in zip(bounds, bounds[1:], strict=False))
    assert cuts == compute_change_points(bytes(flags), penalty, min_segment)  # deterministic


def test_segments_follow_an_outage_by_height() -> None:
    est = BehaviourEstimator(1)
    for h in range(1, 3001):
        down = 1000 <= h < 1400
        est.observe(inf("a", h, EXPIRED if down or h % 50 == 0 else FINISHED, h + 2))
        est.observe(inf("b", h, EXPIRED if h % 40 == 0 else FINISHED, h + 2))
    assert est.get_miss_probability("a", 1200) > 0.9
    assert est.get_miss_probability("a", 500) < 0.05
    assert est.get_miss_probability("a", 2500) < 0.05
    assert est.get_miss_probability("b", 1200) < 0.05
    segments = est.to_dict()["participants"]["a"]["segments"]
    assert len(segments) == 3
    # Heights 1000..1400 all miss (1400 is also a multiple of 50): the outage segment.
    assert [s["samples"] for s in segments] == [999, 401, 1600]
    # Before the first sample: the first segment; a participant never seen: the fleet's rate.
    assert est.get_miss_probability("a", -5) == est.get_miss_probability("a", 500)
    assert est.get_miss_probability("nobody", 10) == pytest.approx(est.get_global_rate())


def test_segments_do_not_shrink_a_small_participant_to_the_fleet() -> None:
    """The bias of 1000-block windows with a 31-sample fleet prior: a small, degraded
    participant (a few samples per window) looked healthy, so what-if understated exclusions."""
    kwargs = {"window_blocks": 1000, "prior": (1.0, 30.0)}
    windows = BehaviourEstimator(1, method="windows", **kwargs)  # type: ignore[arg-type]
    segments = BehaviourEstimator(1, **kwargs)  # type: ignore[arg-type]
    for est in (windows, segments):
        rng = random.Random(5)
        for h in range(1, 12001):
            est.observe(inf("big", h, EXPIRED if h % 100 == 0 else FINISHED, h + 1))
            if h % 100 == 0:  # 10 requests per 1000 blocks, 25% misses
                est.observe(inf("small", h, EXPIRED if rng.random() < 0.25 else FINISHED, h + 1))
    assert windows.get_miss_probability("small", 6000) < 0.12
    assert segments.get_miss_probability("small", 6000) == pytest.approx(0.25, abs=0.06)


def test_settings_are_checked_and_named() -> None:
    with pytest.raises(ValueError, match="method"):
        BehaviourEstimator(1, method="magic")
    with pytest.raises(ValueError, match="min_segment"):
        BehaviourEstimator(1, min_segment=0)
    with pytest.raises(ValueError, match="penalty"):
        BehaviourEstimator(1, penalty=-1)
    assert BehaviourEstimator(1).get_settings()["method"] == "segments"
    assert BehaviourEstimator(1, method="windows", window_blocks=7).get_settings() == {
        "method": "windows",
        "prior": [1.0, 30.0],
        "window_blocks": 7,
    }


def test_calibration_note_states_the_error_and_flags_what_it_does_not_cover() -> None:
    calibration = get_calibration()
    assert calibration is not None, "keepersim/replay/calibration.json must ship"
    default = BehaviourEstimator(1).get_settings()
    assert calibration["estimator"] == default  # the shipped figure is of the defaults
    note = compute_calibration_note(default, "windowed", "mainnet_like", 0)
    assert note["available"] and note["warnings"] == []
    error = note["per_policy"]["windowed"]
    assert 0 <= error["median_abs_relative_error"] <= error["p90_abs_relative_error"]
    other = BehaviourEstimator(1, method="windows").get_settings()
    assert any("differ" in w for w in compute_calibration_note(other, None, None, 0)["warnings"])
    for scenario, declines in (("overload", 0), ("mine", 3), ({"pushback": True}, 0)):
        warnings = compute_calibration_note(default, None, scenario, declines)["warnings"]
        assert any("capacity-limited" in w for w in warnings), scenario
    capped = {"name": "x", "participants": [{"address": "a", "capacity": 2}]}
    assert compute_calibration_note(default, None, capped, 0)["warnings"]
