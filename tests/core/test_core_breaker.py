"""Gonka's fast circuit breaker, driven through real blocks (reference: "Fast circuit breaker").

Finishes arrive as MsgFinishInference, misses as expiries ``expiration_blocks`` (5 here) after
the start. Breaker params are the code defaults: 25% / 4 samples / 50 / 500 blocks.
"""

from __future__ import annotations

import pytest
from core_helpers import MODEL, Driver

from keepersim.keeper.policies.gonka import get_cb_entry
from keepersim.types.events import HealthTransition
from keepersim.types.params import get_cb_settings
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.health_pb2 import EXCLUDED, HEALTHY, PROBE

P = "p0"


def transition(height: int, from_state: str, to_state: str, reason: str) -> HealthTransition:
    return HealthTransition(height, "gonka", P, from_state, to_state, reason)


def exclude_p0(d: Driver, ok: int = 3, missed: int = 4, at: int = 8) -> None:
    """``ok`` completions in block at-1, ``missed`` expiries in block ``at``."""
    d.success(P, at - 1, ok)
    d.miss(P, at, missed)
    d.run_to(at)


# conformance vectors of the fork's tests (min samples 4, threshold 25%)
@pytest.mark.parametrize(
    ("ok", "missed", "excluded"),
    [(3, 4, True), (9, 1, False), (1, 2, False), (1, 3, True)],
    ids=["3ok+4miss-excluded", "9ok+1miss-kept", "1ok+2miss-kept-3-samples", "1ok+3miss-excluded"],
)
def test_conformance_vectors(driver: Driver, ok: int, missed: int, excluded: bool) -> None:
    exclude_p0(driver, ok, missed, at=8)
    driver.run_to(10)
    stats = driver.participant(P).current_epoch_stats
    assert (stats.inference_count, stats.missed_requests) == (ok, missed)
    entry = driver.entry(P)
    table = driver.chain.get_selection_table(MODEL)
    if excluded:
        assert driver.transitions() == [
            transition(8, "healthy", "excluded", f"miss rate {missed}/{ok + missed}")
        ]
        assert entry is not None and entry.state == EXCLUDED
        assert (entry.excluded_at_block, entry.cooldown_blocks) == (8, 50)
        assert driver.queue() == [(58, P)]
        assert P not in table.addresses and P in table.excluded
        assert driver.health(P, 10) == (False, "excluded")
    else:
        assert driver.transitions() == []
        assert entry is None
        assert P in table.addresses and table.excluded == ()
        assert driver.health(P, 10) == (True, "healthy")


def test_defaults_healthy(driver: Driver) -> None:
    cb = get_cb_settings(driver.chain.get_params().extension_params)
    assert get_cb_entry(None, P, cb).state == HEALTHY
    state = driver.state(P)
    assert state["state"] == "healthy" and state["admitted"] is True
    # As upstream's GetCBEntry (gonka-ai/gonka 6a468b08): no entry reads with the initial
    # cooldown (50), not 0.
    assert state["cooldown_blocks"] == 50 and state["excluded_at_block"] == 0
    assert state["probe_attempts"] == 0 and state["probe_restored"] is False
    assert driver.health("nobody-knows-me", 1) == (True, "healthy")  # unknown participant passes


def test_promote_at_end_block_of_excluded_at_plus_cooldown(driver: Driver) -> None:
    exclude_p0(driver)
    driver.run_to(57)
    assert driver.entry(P).state == EXCLUDED  # type: ignore[union-attr]
    assert P not in driver.chain.get_selection_table(MODEL).addresses
    driver.run_to(58)
    entry = driver.entry(P)
    # A promotion counts no probe attempt (upstream's PromoteCBEntryToProbe); a failed probe does.
    assert entry is not None and entry.state == PROBE and entry.probe_attempts == 0
    assert driver.transitions_at(58) == [transition(58, "excluded", "probe", "cooldown expired")]
    assert driver.queue() == []
    # probe included
    assert P in driver.chain.get_selection_table(MODEL).addresses
    assert driver.health(P, 58) == (True, "probe")


def test_probe_success_same_block_grace_then_next_block_reexclusion(driver: Driver) -> None:
    exclude_p0(driver)
    driver.success(P, 59)  # 4 ok + 4 missed: the cumulative rate still breaks the rule
    driver.run_to(59)
    assert driver.transitions_at(59) == [transition(59, "probe", "healthy", "probe succeeded")]
    entry = driver.entry(P)
    assert entry is not None and entry.state == HEALTHY
    assert entry.last_restored_block == 59 and entry.cooldown_blocks == 50
    # The read-only filter still keeps a HEALTHY entry out while it meets the exclusion rule.
    assert driver.health(P, 59) == (False, "healthy")
    driver.run_to(60)
    assert driver.transitions_at(60) == [transition(60, "healthy", "excluded", "miss rate 4/8")]
    entry = driver.entry(P)
    assert entry is not None and entry.state == EXCLUDED
    assert (entry.excluded_at_block, entry.cooldown_blocks) == (60, 50)
    assert driver.queue() == [(110, P)]


def test_probe_success_kept_and_healthy_noop(driver: Driver) -> None:
    exclude_p0(driver)
    driver.success(P, 59, 9)  # 12 ok + 4 missed = 25%: not above the threshold
    driver.run_to(65)
    assert [t.to_state for t in driver.transitions()] == ["excluded", "probe", "healthy"]
    before = driver.entry(P)
    assert before is not None and before.state == HEALTHY and before.last_restored_block == 59
    # RecordCBResult acts only in PROBE: a completion and a miss on a HEALTHY entry change nothing.
    driver.success(P, 66, 3)
    driver.miss(P, 72)  # 15 ok + 5 missed = 25%: the miss-rate rule does not fire either
    driver.miss("p1", 72)
    driver.success("p1", 73, 3)
    driver.run_to(75)
    assert driver.participant(P).current_epoch_stats.missed_requests == 5
    assert driver.entry(P) == before
    assert driver.entry("p1") is None  # no entry is created for a healthy participant
    assert driver.transitions()[3:] == []


def test_probe_failure_doubles_cooldown_twice(driver: Driver) -> None:
    exclude_p0(driver)  # excluded at 8, cooldown 50 -> PROBE at 58
    driver.miss(P, 59)
    driver.run_to(59)
    assert driver.transitions_at(59) == [
        transition(59, "probe", "excluded", "probe missed; cooldown 100")
    ]
    entry = driver.entry(P)
    assert entry is not None and (entry.state, entry.excluded_at_block) == (EXCLUDED, 59)
    assert entry.cooldown_blocks == 100
    assert entry.probe_attempts == 1  # upstream's ExcludeCBEntry(reExclusion) counts it
    driver.miss(P, 160)
    driver.run_to(158)
    assert driver.entry(P).state == EXCLUDED  # type: ignore[union-attr]
    driver.run_to(159)
    assert driver.transitions_at(159) == [transition(159, "excluded", "probe", "cooldown expired")]
    driver.run_to(160)
    entry = driver.entry(P)
    assert entry is not None and (entry.excluded_at_block, entry.cooldown_blocks) == (160, 200)
    assert entry.probe_attempts == 2
    assert driver.queue() == [(360, P)]
    driver.run_to(360)
    assert driver.entry(P).state == PROBE  # type: ignore[union-attr]


def test_cooldown_capped_at_max(make_driver: object, breaker_params: ModuleParams) -> None:
    breaker_params.extension_params.cb_max_cooldown_blocks = 150
    d: Driver = make_driver(breaker_params)  # type: ignore[operator]
    exclude_p0(d)
    promote = 58
    cooldowns = []
    for _ in range(3):
        d.miss(P, promote + 1)  # started 5 blocks earlier, while still EXCLUDED
        d.run_to(promote)
        assert d.entry(P).state == PROBE  # type: ignore[union-attr]
        d.run_to(promote + 1)
        entry = d.entry(P)
        assert entry is not None and entry.state == EXCLUDED
        assert entry.excluded_at_block == promote + 1
        cooldowns.append(entry.cooldown_blocks)
        promote = entry.excluded_at_block + entry.cooldown_blocks
    assert cooldowns == [100, 150, 150]


def test_reexclusion_keeps_the_doubled_cooldown(driver: Driver) -> None:
    exclude_p0(driver)
    driver.miss(P, 59)  # failed probe: cooldown 100, PROBE again at 159
    driver.success(P, 160)  # restored at 160, still 4 ok / 5 missed
    driver.run_to(161)
    assert [(t.height, t.to_state) for t in driver.transitions()] == [
        (8, "excluded"),
        (58, "probe"),
        (59, "excluded"),
        (159, "probe"),
        (160, "healthy"),
        (161, "excluded"),
    ]
    entry = driver.entry(P)
    assert entry is not None and (entry.excluded_at_block, entry.cooldown_blocks) == (161, 100)
    assert driver.queue() == [(261, P)]


def test_endblock_skips_already_excluded(driver: Driver) -> None:
    exclude_p0(driver)
    driver.miss(P, 20, 2)
    driver.success(P, 30)
    driver.run_to(57)
    assert len(driver.transitions()) == 1
    entry = driver.entry(P)
    assert entry is not None and (entry.excluded_at_block, entry.cooldown_blocks) == (8, 50)
    assert driver.queue() == [(58, P)]
    driver.run_to(58)
    assert driver.entry(P).state == PROBE  # type: ignore[union-attr]


def test_endblock_skips_probe(driver: Driver) -> None:
    exclude_p0(driver)
    driver.run_to(58)
    # Declines are neutral: they touch the participant (stats) but resolve no probe.
    driver.decline(P, 59)
    driver.decline(P, 61)
    driver.run_to(70)
    with driver.chain.read() as k:
        assert k.get_declines(k.get_effective_epoch_index(), P) == 2
    assert driver.entry(P).state == PROBE  # type: ignore[union-attr]
    assert driver.transitions()[2:] == []


def test_endblock_skips_low_miss_and_excludes_high_miss(driver: Driver) -> None:
    driver.success("p1", 7, 9)
    driver.miss("p1", 8, 1)  # 10%: kept
    driver.success("p2", 7, 3)
    driver.miss("p2", 8, 4)  # 57%: excluded
    driver.run_to(9)
    assert [(t.address, t.to_state) for t in driver.transitions()] == [("p2", "excluded")]


def test_epoch_boundary_clears_all_state(make_driver: object, breaker_params: ModuleParams) -> None:
    breaker_params.params.epoch_params.epoch_length = 100
    d: Driver = make_driver(breaker_params)  # type: ignore[operator]
    d.success("p0", 7, 3)
    d.miss("p0", 8, 4)  # p0 excluded at 8, probe at 58, restored at 59 and kept
    d.success("p0", 59, 9)
    d.success("p1", 69, 3)
    d.miss("p1", 70, 4)  # p1 excluded at 70, cooldown ends at 120 (after the boundary)
    d.success("p2", 47, 3)
    d.miss("p2", 48, 4)  # p2 excluded at 48, PROBE at 98
    d.run_to(99)
    assert [d.entry(a).state for a in ("p0", "p1", "p2")] == [HEALTHY, EXCLUDED, PROBE]  # type: ignore[union-attr]
    assert d.queue() == [(120, "p1")]
    d.run_to(100)
    reset = d.transitions_at(100)
    assert reset == [
        HealthTransition(100, "gonka", "p1", "excluded", "healthy", "epoch boundary reset"),
        HealthTransition(100, "gonka", "p2", "probe", "healthy", "epoch boundary reset"),
    ]
    assert [d.entry(a) for a in ("p0", "p1", "p2")] == [None, None, None]
    assert d.queue() == []
    assert d.participant("p1").current_epoch_stats.missed_requests == 0
    assert set(d.chain.get_selection_table(MODEL).addresses) == {"p0", "p1", "p2", "p3"}
    d.run_to(130)  # the cleared cooldown end (120) wakes nobody
    assert d.transitions()[-2:] == reset
