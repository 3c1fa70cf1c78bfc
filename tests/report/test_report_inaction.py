"""The note of a comparison row whose policy never acted (or acted without changing a miss)."""

from __future__ import annotations

from typing import Any

import pytest

from keepersim.report.inaction import compute_inaction_note, get_inaction_reason
from keepersim.sim.run_genesis import build_params
from keepersim.sim.scenario import parse_scenario

SCENARIO = parse_scenario(
    {
        "name": "s",
        "seed": 1,
        "blocks": 10,
        "epoch_length": 10,
        "expiration_blocks": 5,
        "arrivals_per_block": 1.0,
        "participants": [{"address": "a", "weight": 1, "miss": [[0, 0.0]]}],
    },
    "test",
)


def run(
    seed: int,
    *,
    transitions: int = 0,
    excluded: float = 0.0,
    misses: int = 10,
    assigned: tuple[int, int] = (50, 50),
) -> dict[str, Any]:
    return {
        "seed": seed,
        "transitions": transitions,
        "excluded_weight_share": excluded,
        "misses": misses,
        "participants": [
            {"address": "a", "assigned": assigned[0]},
            {"address": "b", "assigned": assigned[1]},
        ],
    }


NONE = [run(1), run(2)]


@pytest.mark.parametrize(
    "policy", ["consecutive", "gonka", "windowed", "sprt", "trin-additive", "trin-multiplicative"]
)
def test_every_policy_gets_its_rule_in_words(policy: str) -> None:
    params = build_params(SCENARIO, policy)
    acted, note = compute_inaction_note(policy, [run(1), run(2)], NONE, params)
    verb, why = get_inaction_reason(policy, params)
    assert acted is False
    assert note == f"{policy} {verb}: {why} (0 transitions in 2 runs; every number equals none's)"


def test_acting_without_changing_a_miss_is_described() -> None:
    params = build_params(SCENARIO, "consecutive")
    records = [run(1), run(2, transitions=3, excluded=5e-6, assigned=(49, 51))]
    acted, note = compute_inaction_note("consecutive", records, NONE, params)
    assert acted is True
    assert note == (
        "consecutive changed no miss: 3 transitions in 2 runs kept out 0.0005% of the weight "
        "(mean over blocks, largest run), and every run's misses equal none's; in 1 of the 2 "
        "runs it never opened a breaker (no participant reached 5 consecutive misses)"
    )


def test_a_policy_that_changed_something_gets_no_note() -> None:
    params = build_params(SCENARIO, "trin-additive")
    # a weight-factor policy makes no transition, but moving traffic is acting
    moved = [run(1, assigned=(60, 40), misses=9), run(2)]
    assert compute_inaction_note("trin-additive", moved, NONE, params) == (True, None)
    # traffic moved but the same misses: acted, and no "never" note
    same_misses = [run(1, assigned=(60, 40)), run(2)]
    acted, note = compute_inaction_note("trin-additive", same_misses, NONE, params)
    assert acted is True and note is not None and "changed no miss" in note
    assert "never moved traffic" in note  # seed 2 was idle
    # baselines never get a note
    assert compute_inaction_note("none", NONE, NONE, params) == (False, None)
    assert compute_inaction_note("oracle", NONE, NONE, params) == (True, None)
