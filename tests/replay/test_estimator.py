"""The what-if estimator: Beta posterior with a fleet-centred prior, latency histograms."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_helpers import record_trace

from keepersim.replay.estimator import (
    DEFAULT_LATENCY_BLOCKS,
    BehaviourEstimator,
    BetaPrior,
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
    est = BehaviourEstimator(1, window_blocks=100, prior=(1, 30))
    fill(est, "a", 10, misses=3, successes=7)  # window 0
    fill(est, "b", 20, misses=1, successes=89)
    # fleet window 0: N = 100, M = 4 -> mu = (4 + 1) / (100 + 31)
    mu = 5 / 131
    assert est.get_fleet_rate(0) == pytest.approx(mu)
    assert est.get_miss_probability("a", 50) == pytest.approx((3 + 31 * mu) / (10 + 31))
    assert est.get_miss_probability("b", 99) == pytest.approx((1 + 31 * mu) / (90 + 31))


def test_sparse_window_falls_back_to_the_fleet_then_the_prior() -> None:
    est = BehaviourEstimator(1, window_blocks=100, prior=BetaPrior(1, 30))
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
    header, est = estimate_trace(path, window_blocks=50)
    assert header.last_height == 300
    assert est.windows == 6
    cells = sum(len(w) for w in est._counts.values())  # noqa: SLF001
    assert cells <= 3 * 6
    assert est.inferences > 200
