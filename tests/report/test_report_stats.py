"""Statistics and table formatting of comparisons."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepersim.report.stats import (
    compute_bootstrap_interval,
    compute_oracle_efficiency,
    compute_t_interval,
    compute_wilson_interval,
    get_t_quantile,
    mean_or_none,
)
from keepersim.report.tables import format_summary_table, format_table


def test_t_quantiles() -> None:
    assert get_t_quantile(1) == pytest.approx(12.7062, abs=1e-4)
    assert get_t_quantile(2) == pytest.approx(4.3027, abs=1e-4)
    assert get_t_quantile(30) == pytest.approx(2.0423, abs=1e-4)
    assert get_t_quantile(31) == pytest.approx(2.0395, abs=1e-4)
    assert get_t_quantile(60) == pytest.approx(2.0003, abs=1e-4)
    assert get_t_quantile(10_000) == pytest.approx(1.9602, abs=1e-4)
    with pytest.raises(ValueError):
        get_t_quantile(0)


def test_t_interval() -> None:
    values = [0.10, 0.12, 0.14]
    mean, lo, hi = compute_t_interval(values)
    half = 4.302653 * float(np.std(values, ddof=1)) / math.sqrt(3)
    assert mean == pytest.approx(0.12)
    assert lo == pytest.approx(0.12 - half)
    assert hi == pytest.approx(0.12 + half)
    assert compute_t_interval([0.5]) == (0.5, None, None)
    assert compute_t_interval([]) == (None, None, None)
    assert compute_t_interval([math.nan, None, 1.0, 1.0]) == (1.0, 1.0, 1.0)


def test_oracle_efficiency_is_nan_safe() -> None:
    assert compute_oracle_efficiency(100, 60, 20) == pytest.approx(0.5)
    assert compute_oracle_efficiency(100, 100, 20) == 0.0
    assert compute_oracle_efficiency(100, 20, 20) == 1.0
    assert math.isnan(compute_oracle_efficiency(50, 40, 50))
    # The oracle worse than no policy (overload): nothing avoidable, no efficiency.
    assert math.isnan(compute_oracle_efficiency(100, 200, 110))
    assert mean_or_none([math.nan, None]) is None
    assert mean_or_none([1.0, math.nan, 3.0]) == 2.0


def test_tables_are_aligned() -> None:
    text = format_table(["a", "bb"], [["xyz", "1"], ["q", "12345"]], [False, True])
    lines = text.split("\n")
    assert lines[0] == "a       bb"
    assert lines[2] == "xyz      1"
    assert lines[3] == "q    12345"
    row = {
        "scenario": "s",
        "policy": "gonka",
        "runs": 3,
        "miss_rate_mean": 0.1,
        "miss_rate_ci_low": 0.05,
        "miss_rate_ci_high": 0.15,
        "oracle_efficiency_mean": None,
    }
    table = format_summary_table([row, {**row, "scenario": "t"}])
    assert "10.00% [5.00%, 15.00%]" in table
    assert "" in table.split("\n")  # a blank line between scenarios
    widths = {len(line) for line in table.split("\n")[:2]}
    assert len(widths) == 1


@given(total=st.integers(0, 2**53), data=st.data())
def test_wilson_interval_is_within_0_1_and_holds_the_estimate(total: int, data: Any) -> None:
    successes = data.draw(st.integers(0, total))
    rate, low, high = compute_wilson_interval(successes, total)
    if total == 0:
        assert (rate, low, high) == (None, None, None)
        return
    assert rate is not None and low is not None and high is not None
    assert 0.0 <= low <= rate <= high <= 1.0
    assert rate == successes / total
    if 0 < successes < total:  # a real interval: it has width
        assert low < high


def test_wilson_interval_known_values() -> None:
    # Textbook values (Newcombe 1998): 0/10 -> [0, 0.2775], 1/10 -> [0.0179, 0.4042].
    _, low, high = compute_wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    _, low, high = compute_wilson_interval(1, 10)
    assert low == pytest.approx(0.0179, abs=1e-4) and high == pytest.approx(0.4042, abs=1e-4)
    assert compute_wilson_interval(10, 10)[2] == 1.0
    with pytest.raises(ValueError):
        compute_wilson_interval(3, 2)


@given(
    counts=st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=12
    )
)
def test_bootstrap_of_per_seed_rates_is_within_0_1(counts: list[tuple[int, int]]) -> None:
    rates = [min(a, b) / max(a, b) if max(a, b) else 0.0 for a, b in counts]
    mean, low, high = compute_bootstrap_interval(rates)
    assert mean is not None
    if len(rates) == 1:
        assert low is None and high is None
        return
    assert low is not None and high is not None
    assert 0.0 <= min(rates) <= low <= high <= max(rates) <= 1.0
    assert low <= mean + 1e-12 and mean - 1e-12 <= high
    # seeded: the same values give the same interval
    assert compute_bootstrap_interval(rates) == (mean, low, high)


def test_two_seed_rate_intervals_stay_above_zero() -> None:
    """The case that went below zero with t-intervals: two small, different rates."""
    rates = [0.001, 0.02]
    assert compute_t_interval(rates)[1] < 0  # type: ignore[operator]
    _, low, high = compute_bootstrap_interval(rates)
    assert low == pytest.approx(0.001) and high == pytest.approx(0.02)
