"""windowed's suspicion weighting (issue 16): a participant in with recent misses keeps the
share of its weight that is its posterior probability of being healthy."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policy_helpers import NetFactory
from test_windowed import FLEET as FIVE
from test_windowed import exclude, make_w_params, overflow, reach_probe, weights

from keepersim.keeper.policies.windowed_evidence import compute_healthy_ppm, get_suspicion_pct
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import get_default_health_params, validate_params
from keepersim.types.pb.keepersim.v1.health_pb2 import WindowedEntry

FLEET = {"a": 100, "b": 100, "c": 100}
RULE = {"suspicion_prior_pct": 10, "suspicion_good_miss_pct": 1, "suspicion_bad_miss_pct": 15}


def make_entry(bits: str) -> WindowedEntry:
    """An entry whose outcomes, oldest first, are ``bits`` (1: a miss)."""
    return WindowedEntry(failure_bits=int(bits, 2) if bits else 0, outcome_seq=len(bits))


@given(
    st.integers(1, 99),
    st.integers(1, 98),
    st.integers(1, 99),
    st.integers(0, 64),
    st.integers(0, 64),
)
def test_healthy_ppm_is_bayes_rule(prior: int, good: int, bad: int, m: int, n: int) -> None:
    """The integer posterior is floor(PPM x P(healthy | m misses of n)), computed exactly."""
    good, bad = min(good, bad), max(good, bad)
    if good == bad:
        bad += 1
    m = min(m, n)
    h = Fraction(100 - prior) * Fraction(good, 100) ** m * Fraction(100 - good, 100) ** (n - m)
    d = Fraction(prior) * Fraction(bad, 100) ** m * Fraction(100 - bad, 100) ** (n - m)
    assert compute_healthy_ppm(m, n, prior, good, bad) == int(h / (h + d) * 1_000_000)


def test_suspicion_vectors() -> None:
    """The defaults, worked by hand: one miss on a newcomer leaves 90 x 1 / (90 x 1 + 10 x 15)
    = 37.5%, rounded 38; one in ten 70% (the bad/healthy odds 150/90 x (85/99)^9 = 0.4337);
    two of 32 79%, three 18%, five 0.4%, kept at 1 (the gate excludes on six); a miss among
    31 successes 99%."""
    w = get_default_health_params().windowed
    assert (w.suspicion_prior_pct, w.suspicion_good_miss_pct, w.suspicion_bad_miss_pct) == (
        10,
        1,
        15,
    )
    assert get_suspicion_pct(make_entry(""), w) == 100
    assert get_suspicion_pct(make_entry("0" * 32), w) == 100  # no miss: no suspicion
    assert get_suspicion_pct(make_entry("1"), w) == 38
    assert get_suspicion_pct(make_entry("1" + "0" * 9), w) == 70
    assert get_suspicion_pct(make_entry("11" + "0" * 30), w) == 79
    assert get_suspicion_pct(make_entry("111" + "0" * 29), w) == 18
    assert get_suspicion_pct(make_entry("1" * 5 + "0" * 27), w) == 1  # never below 1%
    assert get_suspicion_pct(make_entry("1" + "0" * 31), w) == 99
    assert get_suspicion_pct(make_entry("1" * 32), w) == 1
    w.suspicion_prior_pct = 0
    assert get_suspicion_pct(make_entry("1"), w) == 100  # off


@given(st.integers(0, 31), st.integers(0, 32))
def test_suspicion_moves_the_right_way(m: int, s: int) -> None:
    """A miss more never raises the weight kept; a success more never lowers it (all within
    a 64-outcome window, so nothing leaves it)."""
    w = get_default_health_params().windowed
    w.window = 64
    base = make_entry("1" * m + "0" * s)
    more_missed = make_entry("1" * m + "0" * s + "1")
    more_served = make_entry("1" * m + "0" * s + "0")
    assert get_suspicion_pct(more_missed, w) <= get_suspicion_pct(base, w)
    assert get_suspicion_pct(more_served, w) >= get_suspicion_pct(base, w)


def test_a_miss_down_weights_until_successes_clear_it(make_net: NetFactory) -> None:
    """On the chain: one miss takes a's table weight to 38 of 100 at once, with no exclusion;
    successes bring it back (1 miss of 13: 79%; once the miss leaves the 32-outcome window,
    100%); with the rule off the miss changes nothing."""
    for rule, expected in ((RULE, [38, 79, 100]), ({}, [100, 100, 100])):
        net = make_net(make_w_params(**rule), FLEET)
        net.succeed("b")
        net.miss("a")
        seen = [weights(net)["a"]]
        assert net.state("a")["state"] == "healthy"
        net.succeed_many("a", 12)
        seen.append(weights(net)["a"])
        net.succeed_many("a", 20)  # the miss is out of the 32-outcome window
        seen.append(weights(net)["a"])
        assert seen == expected, rule
        assert net.transitions("a") == []


def test_back_from_an_exclusion_it_is_judged_on_the_probe_evidence(make_net: NetFactory) -> None:
    """Re-admitted after clean probes, the misses that excluded it cost no suspicion weight
    (they cost the exclusion; the gate still reads them); a new miss does."""
    net = make_net(make_w_params(readmit_successes=3, ramp_blocks=0, **RULE), FLEET)
    exclude(net, "a", successes=0, misses=4)
    reach_probe(net, "a")
    for _ in range(3):
        net.succeed("a")
    assert net.state("a")["state"] == "healthy"
    assert net.state("a")["window_misses"] == 4
    assert weights(net)["a"] == 100
    assert net.state("a")["suspicion_pct"] == 100


def test_suspicion_is_held_while_the_fleet_is_saturated(make_net: NetFactory) -> None:
    """Down-weighting on a full fleet only moves traffic onto full nodes: once most of the
    fleet's misses are capacity misses, a suspect keeps its whole weight, and the flip alone
    (a's entry unchanged) re-asks its verdict."""
    net = make_net(make_w_params(min_samples=32, **RULE), FIVE)
    net.succeed_many("a", 20)
    net.miss("a", 2)
    assert not net.state("a")["fleet_saturated"]
    held = net.state("a")["suspicion_pct"]
    assert isinstance(held, int)
    assert weights(net)["a"] == held < 100
    for address in ("c", "d", "e"):
        overflow(net, address, 6)  # 18 capacity misses of the fleet's 20
    assert net.state("a")["fleet_saturated"]
    assert net.state("a")["suspicion_pct"] == held  # a's own evidence did not move
    assert weights(net) == dict.fromkeys(FIVE, 100)
    assert net.transitions() == []


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("suspicion_prior_pct", 100, "in [0, 99]"),
        ("suspicion_good_miss_pct", 0, "in [1, suspicion_bad_miss_pct)"),
        ("suspicion_good_miss_pct", 30, "in [1, suspicion_bad_miss_pct)"),
        ("suspicion_bad_miss_pct", 100, "in (suspicion_good_miss_pct, 99]"),
    ],
)
def test_invalid_suspicion_params_are_rejected(field: str, value: int, rule: str) -> None:
    params = make_w_params(**RULE)
    setattr(params.extension_params.health_params.windowed, field, value)
    with pytest.raises(InvalidParamsError, match=field) as err:
        validate_params(params)
    assert rule in str(err.value)


def test_off_needs_no_rates() -> None:
    """With suspicion_prior_pct 0 the rates are not read, so they need no value."""
    params = make_w_params(suspicion_good_miss_pct=0, suspicion_bad_miss_pct=0)
    validate_params(params)
