"""Properties of the devshard rules beyond upstream's own tests: the bulk slot sampler against
its per-slot form, the settlement bound against the session's nonce mapping, the host-stats
arithmetic, the limiter's reads against its transitions, the picker's liveness."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.gateway import limiter as lim
from keepersim.gateway.limiter_params import (
    STRIKES_AFTER_QUARANTINE,
    compute_limiter_params,
    compute_new_limiter_params,
    compute_picker_stale_blocks,
)
from keepersim.gateway.picker import (
    HostChecks,
    PickerRequest,
    PickerState,
    process_picker_run,
    process_submit,
)
from keepersim.gateway.signals import Signal, get_outcome_signal
from keepersim.keeper.devshard.host_stats import (
    HostStatsError,
    process_current_epoch_stats,
    process_host_epoch_stats,
)
from keepersim.keeper.devshard.nonces import compute_assigned_upper_bound, get_slot_for_nonce
from keepersim.keeper.devshard.slots import (
    compute_escrow_slots,
    compute_slots_from_sorted,
    compute_sorted_entries,
    get_slot_from_sorted,
)
from keepersim.keeper.devshard.timing import (
    DevshardTimeouts,
    compute_blocks_ceil,
    compute_timeout_blocks,
)
from keepersim.types.params import get_default_params
from keepersim.types.pb.inference.inference.devshard_escrow_pb2 import (
    DevshardHostEpochStats,
    DevshardSettlementHostStats,
)
from keepersim.types.pb.inference.inference.participant_pb2 import CurrentEpochStats

addresses = st.text(alphabet="abcdefgh0123", min_size=1, max_size=6)
weights = st.dictionaries(addresses, st.integers(-5, 2**40), max_size=8)


@settings(max_examples=200, deadline=None)
@given(weights, st.text(max_size=8), st.text(max_size=8), st.integers(0, 40))
def test_bulk_slots_equal_single_slots(
    w: dict[str, int], app_hash: str, model: str, n: int
) -> None:
    """GetSlotsFromSorted's sorted merge gives each slot what GetSlotFromSorted gives it."""
    entries, total = compute_sorted_entries(w)
    got = compute_slots_from_sorted(app_hash, "p", model, entries, total, n)
    if total == 0:
        assert got == []
        return
    assert got == [get_slot_from_sorted(app_hash, "p", model, entries, total, i) for i in range(n)]
    assert all(w[a] > 0 for a in got)


def test_escrow_slots_seed_and_last_member_wins() -> None:
    """The escrow's seed: hex app hash, 'devshard_escrow:<id>', the model
    (msg_server_create_devshard_escrow.go:58-78); a repeated member keeps its last weight."""
    app_hash = bytes.fromhex("ab" * 32)
    pairs = [("gonka1a", 5), ("gonka1b", 100), ("gonka1a", 300)]
    entries, total = compute_sorted_entries({"gonka1a": 300, "gonka1b": 100})
    want = compute_slots_from_sorted("ab" * 32, "devshard_escrow:7", "qwen", entries, total, 16)
    assert compute_escrow_slots(app_hash, 7, "qwen", pairs, 16) == want
    assert len(want) == 16


@given(st.integers(0, 500), st.integers(1, 20), st.data())
def test_assigned_upper_bound_counts_the_session_mapping(
    latest: int, k: int, data: st.DataObject
) -> None:
    """The settlement's bound is the number of nonces 1..latest the session sent to the slot."""
    slot = data.draw(st.integers(0, k - 1))
    mapped = sum(1 for n in range(1, latest + 1) if get_slot_for_nonce(n, k) == slot)
    assert compute_assigned_upper_bound(latest, k, slot) == mapped


def test_assigned_upper_bound_rejects_bad_slot() -> None:
    with pytest.raises(ValueError):
        compute_assigned_upper_bound(5, 0, 0)
    with pytest.raises(ValueError):
        compute_assigned_upper_bound(5, 4, 4)


def test_current_epoch_stats_from_a_slot() -> None:
    """AggregateDevshardHostStatsIntoCurrentEpochStats: completed = assigned - missed,
    validated = completed - invalid."""
    stats = CurrentEpochStats(inference_count=10, missed_requests=1)
    process_current_epoch_stats(stats, DevshardSettlementHostStats(missed=2, invalid=1), 7)
    assert (stats.inference_count, stats.missed_requests) == (15, 3)
    assert (stats.validated_inferences, stats.invalidated_inferences) == (4, 1)
    with pytest.raises(HostStatsError, match="missed requests"):
        process_current_epoch_stats(stats, DevshardSettlementHostStats(missed=8), 7)
    with pytest.raises(HostStatsError, match="invalid inferences"):
        process_current_epoch_stats(stats, DevshardSettlementHostStats(missed=2, invalid=6), 7)


def test_host_epoch_stats_add_and_overflow() -> None:
    row = DevshardHostEpochStats(missed=1, cost=5)
    process_host_epoch_stats(row, DevshardSettlementHostStats(missed=2, cost=7, invalid=1), True)
    process_host_epoch_stats(row, DevshardSettlementHostStats(missed=1), False)
    assert (row.missed, row.invalid, row.cost, row.escrow_count) == (4, 1, 12, 1)
    with pytest.raises(HostStatsError, match="missed overflow"):
        process_host_epoch_stats(row, DevshardSettlementHostStats(missed=2**32 - 2), False)


def test_limiter_params_in_blocks() -> None:
    """60 / 30 min at 5 s blocks are 720 / 360 blocks; the 600-token burst refills at 10 a
    minute (one hour, as upstream's comment on httpThrottleQuarantine); ceil at 5,614 ms."""
    p = compute_limiter_params()
    assert (p.http_quarantine_blocks, p.transport_failure_quarantine_blocks) == (720, 360)
    assert (p.empty_stream_quarantine_blocks, p.stalled_winner_quarantine_blocks) == (360, 360)
    assert p.burst_units // p.refill_units_per_block == 720
    assert p.strike_threshold == 3
    q = compute_limiter_params(block_time_ms=5614)
    assert (q.http_quarantine_blocks, q.transport_failure_quarantine_blocks) == (642, 321)
    assert compute_picker_stale_blocks() == 0 and compute_picker_stale_blocks(100) == 2
    with pytest.raises(ValueError):
        compute_limiter_params(block_time_ms=0)


def test_outcome_signals() -> None:
    assert get_outcome_signal("finish") is Signal.SUCCESS
    assert get_outcome_signal("decline") is Signal.HTTP_THROTTLE
    assert get_outcome_signal("miss") is Signal.TRANSPORT_FAILURE
    assert get_outcome_signal("miss", Signal.EMPTY_STREAM) is Signal.EMPTY_STREAM
    with pytest.raises(ValueError):
        get_outcome_signal("miss", Signal.SUCCESS)
    with pytest.raises(ValueError):
        get_outcome_signal("expired")  # type: ignore[arg-type]


def test_decline_then_probation_walkthrough() -> None:
    """A decline (429/503): 720 blocks without traffic, then probation at 2 strikes (traffic,
    no win), two finishes and the host is healthy again; a miss on probation re-quarantines."""
    s = lim.compute_new_limiter(compute_limiter_params())
    lim.process_outcome(s, "h", "m", "decline", 10)
    assert lim.get_status(s, "h", "m", 729).probe_quarantined
    status = lim.get_status(s, "h", "m", 730)
    assert status.probationary and status.no_winner and status.admitted
    assert status.failure_strikes == STRIKES_AFTER_QUARANTINE
    lim.process_outcome(s, "h", "m", "finish", 731)
    lim.process_outcome(s, "h", "m", "finish", 732)
    assert not lim.get_status(s, "h", "m", 733).tracked
    lim.process_outcome(s, "h", "m", "decline", 800)
    lim.process_outcome(s, "h", "m", "miss", 1600)  # probation after 1520: a miss quarantines
    assert lim.get_status(s, "h", "m", 1600).quarantine_until == 1600 + 360


signals = st.sampled_from(list(Signal))
ops = st.lists(
    st.tuples(
        st.sampled_from(["signal", "admit", "clear", "snapshot", "available"]),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from(["", "m1", "m2"]),
        signals,
        st.integers(0, 400),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 20), st.integers(1, 120))
def test_limiter_reads_match_transitions(
    steps: list[tuple[str, str, str, Signal, int]], burst: int, rate: int
) -> None:
    """get_status changes nothing; is_admitted predicts process_admission; tokens stay in
    [0, burst]; a probe-quarantined host is never admitted; strikes are never negative."""
    params = compute_new_limiter_params(burst, rate, block_time_ms=1000)
    s = lim.compute_new_limiter(params)
    height = 0
    for op, host, model, signal, dt in steps:
        height += dt
        before = copy.deepcopy(s.hosts)
        status = lim.get_status(s, host, model, height)
        assert s.hosts == before
        if op == "signal":
            lim.process_signal(s, host, model, signal, height)
        elif op == "admit":
            assert lim.process_admission(s, host, model, height) is status.admitted
            if status.probe_quarantined:
                assert not status.admitted
        elif op == "clear":
            lim.process_clear_quarantine(s, host, height)
        elif op == "snapshot":
            snap = lim.process_snapshot(s, [host], height)[host]
            if not model:
                assert snap.blocked is status.blocked
        else:
            lim.process_availability(s, host, model, height)
        for entry in s.hosts.values():
            assert 0 <= entry.tokens <= params.burst_units
            assert entry.failure_strikes >= 0
            assert isinstance(entry.tokens, int)


participants = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    participants,
    st.lists(
        st.tuples(st.sets(st.sampled_from("abcd")), st.sets(st.sampled_from("abcd"))), max_size=8
    ),
    st.sets(st.sampled_from("abcd")),
    st.sets(st.sampled_from("abcd")),
)
def test_picker_liveness(
    group: list[str], requests: list[tuple[set[str], set[str]]], poc: set[str], throttled: set[str]
) -> None:
    """Every nonce used is one dispatch or one ghost, in order; no request reaches a
    participant it excluded, a PoC-blocked or a throttled one; every request ends dispatched or
    dropped (stale_blocks 0: nothing is held)."""
    state = PickerState(participants=tuple(group))
    for i, (exclude, incompatible) in enumerate(requests):
        process_submit(
            state, PickerRequest(f"r{i}", 0, frozenset(exclude), frozenset(incompatible))
        )
    checks = HostChecks(poc_blocked=poc.__contains__, throttled=throttled.__contains__)
    events = process_picker_run(state, checks, 0, 0)
    nonces = [e.nonce for e in events if e.kind in ("dispatch", "ghost")]
    assert nonces == list(range(1, state.nonce + 1))
    by_id = {f"r{i}": r for i, r in enumerate(requests)}
    answered = set()
    for e in events:
        if e.kind == "dispatch":
            exclude, incompatible = by_id[e.request_id]
            assert e.participant not in exclude | incompatible | poc | throttled
            assert e.participant == group[e.nonce % len(group)]
        if e.kind in ("dispatch", "drop"):
            assert e.request_id not in answered
            answered.add(e.request_id)
    assert answered == set(by_id) and not state.queue


def test_escrow_timeouts_in_blocks() -> None:
    """The chain's default escrow deadlines (60 s refusal, 32 min execution; params.go:108-109,
    keepersim.types.chain_params) at 5 s blocks; a deadline never ends early when rounded."""
    ds = get_default_params().params.devshard_escrow_params
    assert (ds.refusal_timeout, ds.execution_timeout) == (60, 32 * 60)
    assert compute_timeout_blocks(ds) == DevshardTimeouts(12, 384)
    assert compute_timeout_blocks(ds, 5614) == DevshardTimeouts(11, 343)
    assert compute_blocks_ceil(1, 5000) == 1 and compute_blocks_ceil(0, 5000) == 0
