"""Timeline buckets at the end of a run: what is still in flight is pending, the miss rate counts
only starts whose outcome the run can show, and such buckets are marked partial."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.sim.metrics import EXPIRED, FINISHED, MetricsCollector
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, parse_scenario


def make_scenario(blocks: int = 300, expiration: int = 40, miss: float = 0.5) -> Scenario:
    data: dict[str, Any] = {
        "name": "timeline",
        "seed": 5,
        "blocks": blocks,
        "epoch_length": 100,
        "expiration_blocks": expiration,
        "arrivals_per_block": 3.0,
        "participants": [
            {"address": "a", "weight": 1000, "latency_blocks": [1, 3], "miss": [[0, miss]]},
            {"address": "b", "weight": 500, "latency_blocks": [1, 3], "miss": [[0, miss]]},
        ],
    }
    return parse_scenario(data, "test")


def test_last_buckets_are_partial_and_their_rate_is_not_biased_to_zero() -> None:
    s = make_scenario(blocks=300, expiration=40, miss=0.5)
    r = run_scenario(s, "none", store="memory").to_dict()
    buckets = r["timeline"]
    cutoff = s.blocks - s.expiration_blocks  # 260
    assert [b["partial"] for b in buckets] == [False, False, True]
    # complete buckets: every start resolved, the rate is over all of them, as before
    for b in buckets[:2]:
        assert b["pending"] == 0 and b["rate_end"] == b["end"]
        assert (b["rate_inferences"], b["rate_misses"]) == (b["inferences"], b["misses"])
        assert b["miss_rate"] == pytest.approx(b["misses"] / b["inferences"])
    last = buckets[-1]
    assert last["rate_end"] == cutoff and last["pending"] > 0
    assert sum(b["pending"] for b in buckets) == r["in_flight_at_end"]
    # the old rate (resolved starts of the bucket) is pulled down by the unseen misses ...
    old_rate = last["misses"] / last["inferences"]
    assert old_rate < 0.4
    # ... the new one, over starts up to the cut-off, is near the true 0.5
    assert last["miss_rate"] == pytest.approx(0.5, abs=0.1)
    assert last["rate_inferences"] < last["inferences"]
    # the totals outside the timeline are untouched by the cut-off
    assert sum(b["inferences"] for b in buckets) == r["inferences"]
    assert sum(b["misses"] for b in buckets) == r["misses"]


def test_a_bucket_wholly_past_the_cutoff_has_no_rate() -> None:
    s = make_scenario(blocks=250, expiration=60)  # buckets 1-100, 101-200, 201-250; cut-off 190
    buckets = run_scenario(s, "none", store="memory").to_dict()["timeline"]
    assert [b["partial"] for b in buckets] == [False, True, True]
    assert buckets[1]["rate_end"] == 190
    assert buckets[2]["rate_end"] is None and buckets[2]["miss_rate"] is None
    assert buckets[2]["rate_inferences"] == 0 and buckets[2]["inferences"] > 0


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.integers(1, 400),
    bucket=st.integers(1, 150),
    expiration=st.integers(1, 100),
    outcomes=st.lists(st.tuples(st.integers(1, 400), st.booleans()), max_size=200),
    pending=st.lists(st.integers(1, 400), max_size=30),
)
def test_collector_counts_every_start_once(
    blocks: int,
    bucket: int,
    expiration: int,
    outcomes: list[tuple[int, bool]],
    pending: list[int],
) -> None:
    s = make_scenario(blocks=blocks, expiration=expiration)
    m = MetricsCollector(s, bucket_blocks=bucket, expiration_blocks=expiration)
    outcomes = [(h, miss) for h, miss in outcomes if h <= blocks]
    pending = [h for h in pending if h <= blocks]
    for h in range(1, blocks + 1):
        m.record_block(h, frozenset())
    for h, miss in outcomes:
        m.record_outcome("a", h, EXPIRED if miss else FINISHED)
    m.record_pending(pending)
    timeline = m.compute()["timeline"]
    assert sum(b["inferences"] for b in timeline) == len(outcomes)
    assert sum(b["pending"] for b in timeline) == len(pending) == m.in_flight_at_end
    observable = [(h, miss) for h, miss in outcomes if h <= blocks - expiration]
    assert sum(b["rate_inferences"] for b in timeline) == len(observable)
    assert sum(b["rate_misses"] for b in timeline) == sum(miss for _, miss in observable)
    for b in timeline:
        short = b["end"] - b["start"] + 1 < bucket
        assert b["partial"] == (short or b["end"] > blocks - expiration)
        rate = b["miss_rate"]
        assert rate is None or 0.0 <= rate <= 1.0
