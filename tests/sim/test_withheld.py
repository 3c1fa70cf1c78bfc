"""withheld_weight_share: the healthy weight the selection table does not give (docs/metrics.md),
next to false_exclusion_weight_share, which sees only the healthy weight kept out."""

from __future__ import annotations

from typing import Any

import pytest

from keepersim.keeper.policies.base import Health
from keepersim.keeper.selection import (
    Candidate,
    PipelineRules,
    compute_selection_table,
    compute_weight_factors,
    get_kept_out,
)
from keepersim.sim.metrics import MetricsCollector
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, parse_scenario

RULES = PipelineRules(cap_pct=100, panic_pct=0, fallback_allowed=True, shadow=False)


def make_scenario(**overrides: Any) -> Scenario:
    """Four participants, total weight 2800; "b" degrades to 90% misses in [60, 180), "d" is
    degraded (p = 0.3) throughout, "a" and "c" are healthy throughout."""
    data: dict[str, Any] = {
        "name": "withheld",
        "seed": 3,
        "blocks": 240,
        "epoch_length": 100,
        "expiration_blocks": 20,
        "arrivals_per_block": 2.0,
        "participants": [
            {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
            {"address": "b", "weight": 600, "miss": [[0, 0.0], [60, 0.9], [180, 0.0]]},
            {"address": "c", "weight": 400, "miss": [[0, 0.02]]},
            {"address": "d", "weight": 800, "miss": [[0, 0.3]]},
        ],
    }
    data.update(overrides)
    return parse_scenario(data, "test")


CANDIDATES = [Candidate("a", 1000), Candidate("b", 600), Candidate("c", 400), Candidate("d", 800)]
WEIGHTS = {c.address: c.weight for c in CANDIDATES}


def table_of(healths: list[Health], rules: PipelineRules = RULES) -> Any:
    return compute_selection_table(CANDIDATES, healths, height=10, model="", rules=rules)


def shares(collector: MetricsCollector) -> tuple[float, float]:
    out = collector.compute()
    return out["false_exclusion_weight_share"], out["withheld_weight_share"]


# the table's given fractions -----------------------------------------------------------------


def test_factors_are_the_draw_weight_against_the_candidate_weight() -> None:
    half = Health(True, factor_num=1, factor_den=2)
    table = table_of([half, Health(True), Health(True, 1, 3), Health(False)])
    assert get_kept_out(table) == ("d",)
    # a: 1000 // 2 = 500 of 1000; c: 400 // 3 = 133 of 400; b at full weight, d kept out.
    assert compute_weight_factors(table, WEIGHTS) == {"a": 0.5, "c": 133 / 400}


def test_a_factor_above_one_is_not_a_fraction_given() -> None:
    table = table_of([Health(True, 3, 2), Health(True), Health(True), Health(True)])
    assert compute_weight_factors(table, WEIGHTS) == {}


def test_shadow_tables_apply_no_factor() -> None:
    rules = PipelineRules(cap_pct=100, panic_pct=0, fallback_allowed=True, shadow=True)
    half = Health(True, factor_num=1, factor_den=2)
    table = table_of([half, Health(True), Health(True), Health(False)], rules)
    assert get_kept_out(table) == ("d",)
    assert compute_weight_factors(table, WEIGHTS) == {}


def test_a_participant_the_cap_readmits_is_given_what_the_table_draws() -> None:
    # The gate keeps out a (1000) and d (800) = 64% of 2800; a 50% cap keeps out the more
    # degraded one (d) and re-admits a at its full weight: nothing withheld from a.
    rules = PipelineRules(cap_pct=50, panic_pct=0, fallback_allowed=True, shadow=False)
    healths = [Health(False, severity=1), Health(True), Health(True), Health(False, severity=9)]
    table = table_of(healths, rules)
    assert get_kept_out(table) == ("d",)
    assert compute_weight_factors(table, WEIGHTS) == {}
    s = make_scenario()
    collector = MetricsCollector(s)
    collector.record_block(
        10, frozenset(get_kept_out(table)), compute_weight_factors(table, WEIGHTS)
    )
    assert shares(collector) == (0.0, 0.0)  # d is degraded: neither share counts it


# the collector ---------------------------------------------------------------------------------


def test_excluding_a_healthy_participant_withholds_exactly_its_false_exclusion() -> None:
    s = make_scenario()
    collector = MetricsCollector(s)
    table = table_of([Health(False), Health(True), Health(True), Health(False)])
    kept = frozenset(get_kept_out(table))
    assert kept == {"a", "d"}
    collector.record_block(10, kept, compute_weight_factors(table, WEIGHTS))
    collector.record_block(11, frozenset(), {})
    false, withheld = shares(collector)
    assert false == pytest.approx(1000 / 2800 / 2)  # a healthy and kept out half of the blocks
    assert withheld == false


def test_a_healthy_participant_at_half_weight_is_withheld_half_its_share() -> None:
    s = make_scenario()
    collector = MetricsCollector(s)
    half = Health(True, factor_num=1, factor_den=2)
    # a (healthy) at half weight; d (degraded) at half weight too, which does not count.
    table = table_of([half, Health(True), Health(True), half])
    factors = compute_weight_factors(table, WEIGHTS)
    assert factors == {"a": 0.5, "d": 0.5}
    collector.record_block(10, frozenset(get_kept_out(table)), factors)
    false, withheld = shares(collector)
    assert false == 0.0
    assert withheld == pytest.approx(0.5 * 1000 / 2800)
    timeline = collector.compute()["timeline"][0]
    assert timeline["withheld_weight_share"] == pytest.approx(0.5 * 1000 / 2800)
    assert timeline["false_exclusion_weight_share"] == 0.0


def test_withheld_uses_the_same_healthy_test_as_false_exclusion() -> None:
    s = make_scenario()
    collector = MetricsCollector(s)
    # b is degraded at height 100 (p = 0.9): neither its exclusion nor its factor counts.
    collector.record_block(100, frozenset({"b"}), {"c": 0.25})
    false, withheld = shares(collector)
    assert false == 0.0
    assert withheld == pytest.approx(0.75 * 400 / 2800)
    # At 200 b is healthy again (p = 0.0 <= 0.05): kept out, it counts in both.
    collector = MetricsCollector(s)
    collector.record_block(200, frozenset({"b"}), {})
    assert shares(collector) == (600 / 2800, 600 / 2800)


# whole runs --------------------------------------------------------------------------------------


def test_an_excluding_policy_withholds_its_false_exclusion() -> None:
    r = run_scenario(make_scenario(), "gonka", store="memory").to_dict()
    assert r["false_exclusion_weight_share"] > 0
    assert r["withheld_weight_share"] == r["false_exclusion_weight_share"]


def test_trin_multiplicative_excludes_nobody_but_withholds_weight() -> None:
    s = make_scenario()
    r = run_scenario(s, "trin-multiplicative", store="memory").to_dict()
    assert r["excluded_weight_share"] == 0.0
    assert r["false_exclusion_weight_share"] == 0.0
    assert r["withheld_weight_share"] > 0.01
    # The healthy weight is at most a + c (+ b outside [60, 180)): a bound, not an estimate.
    assert r["withheld_weight_share"] < (1000 + 400 + 600) / 2800
    none = run_scenario(s, "none", store="memory").to_dict()
    assert none["withheld_weight_share"] == 0.0
