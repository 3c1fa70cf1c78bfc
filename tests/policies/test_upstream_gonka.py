"""Gonka's fast circuit breaker against upstream's own unit tests, through GonkaCBKeeper.

Ported from gonka-ai/gonka at commit 6a468b08fdb121b1679e807bdce9841497270768 (the fork's
MinglesAI/gonka 86df358c has the same cases, two of them with a single member that the later
commit gave a healthy second one so the all-degraded fallback does not fire):
``inference-chain/x/inference/keeper/circuit_breaker_test.go`` (CB) and
``inference-chain/x/inference/keeper/circuit_breaker_endblock_test.go`` (EB). Upstream's
``testutil.Executor`` / ``Executor2`` are A1 / A2 here, ``ctx.BlockHeight()`` is H, and the
``Default*`` constants are the default params (25%, 4 samples, 50 and 500 blocks). The store is
real LevelDB; a hypothesis test then checks the API against a model that scans every entry and
participant each block, as upstream does, where keepersim reads its wake-up queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import Net, NetFactory, make_params, make_policy_genesis

from keepersim.chain import Chain
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import PolicyStore
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.keeper.policies.gonka_api import GonkaCBKeeper
from keepersim.module.genesis import init_genesis
from keepersim.store.buffer import BlockBuffer
from keepersim.store.leveldb import LevelDBBackend
from keepersim.store.memory import MemoryBackend
from keepersim.types import keys
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import CB_DEFAULTS, CbSettings, get_cb_settings, validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    EXCLUDED,
    HEALTHY,
    PROBE,
    CircuitBreakerEntry,
    PolicyStateEntry,
)

CB = "gonka-ai/gonka 6a468b08 inference-chain/x/inference/keeper/circuit_breaker_test.go"
EB = "gonka-ai/gonka 6a468b08 inference-chain/x/inference/keeper/circuit_breaker_endblock_test.go"
A1, A2 = "gonka1executor", "gonka1executor2"
H = 1000
INITIAL, MAX = 50, 500
GONKA_STATE = keys.POLICY_STATE + GonkaBreaker.prefix


def make_gonka_params(*, zero_cb: bool = False) -> ModuleParams:
    """The gonka policy's params; ``zero_cb`` leaves every ``cb_*`` at 0, which upstream (#942)
    reads as its ``Default*`` constants."""
    params = make_params("gonka")
    if zero_cb:
        ext = params.extension_params
        ext.cb_miss_threshold_pct = ext.cb_min_samples = 0
        ext.cb_initial_cooldown_blocks = ext.cb_max_cooldown_blocks = 0
    return params


def make_keeper(backend: LevelDBBackend | MemoryBackend, *, zero_cb: bool = False) -> Keeper:
    """A keeper over ``backend`` after a genesis of A1 and A2 (no stats, no breaker entries)."""
    keeper = Keeper(BlockBuffer(backend))
    init_genesis(
        keeper, make_policy_genesis(make_gonka_params(zero_cb=zero_cb), {A1: 100, A2: 100})
    )
    return keeper


@pytest.fixture(params=[False, True], ids=["cb-defaults", "cb-zero"])
def cb(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GonkaCBKeeper]:
    """Upstream's cases hold with the defaults written out and with every ``cb_*`` at 0."""
    backend = LevelDBBackend(tmp_path / "db")
    yield GonkaCBKeeper.open(make_keeper(backend, zero_cb=request.param))
    backend.close()


def set_stats(cb: GonkaCBKeeper, address: str, ok: int, missed: int) -> None:
    keeper = cb.ctx.get_block_keeper()
    participant = keeper.get_participant(address)
    assert participant is not None
    participant.current_epoch_stats.inference_count = ok
    participant.current_epoch_stats.missed_requests = missed
    keeper.set_participant(participant)


# circuit_breaker_test.go


def test_cb_state_defaults_to_healthy(cb: GonkaCBKeeper) -> None:
    """CB TestCBStateDefaultsToHealthy; also the default cooldown upstream's getter fills in."""
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.address) == (HEALTHY, A1)
    assert entry.cooldown_blocks == INITIAL and not cb.has_cb_entry(A1)


def test_cb_set_and_get(cb: GonkaCBKeeper) -> None:
    """CB TestCBSetAndGet."""
    entry = CircuitBreakerEntry(
        address=A1, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=INITIAL
    )
    cb.set_cb_entry(entry)
    got = cb.get_cb_entry(A1)
    assert (got.state, got.excluded_at_block, got.cooldown_blocks) == (EXCLUDED, 100, INITIAL)
    assert got == entry


def test_exclude_cb_entry(cb: GonkaCBKeeper) -> None:
    """CB TestExcludeCBEntry."""
    cb.exclude_cb_entry(200, A1, False)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.excluded_at_block) == (EXCLUDED, 200)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL, 0)


def test_exclude_doubles_cooldown_on_re_exclusion(cb: GonkaCBKeeper) -> None:
    """CB TestExcludeDoublesCooldownOnReExclusion: each re-exclusion doubles the cooldown and
    counts a probe attempt."""
    cb.exclude_cb_entry(100, A1, False)
    assert cb.get_cb_entry(A1).cooldown_blocks == INITIAL
    cb.exclude_cb_entry(200, A1, True)
    entry = cb.get_cb_entry(A1)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL * 2, 1)
    cb.exclude_cb_entry(300, A1, True)
    entry = cb.get_cb_entry(A1)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL * 4, 2)


def test_exclude_caps_cooldown_at_max(cb: GonkaCBKeeper) -> None:
    """CB TestExcludeCapsCooldownAtMax."""
    cb.set_cb_entry(
        CircuitBreakerEntry(address=A1, state=PROBE, excluded_at_block=100, cooldown_blocks=MAX - 1)
    )
    cb.exclude_cb_entry(200, A1, True)
    assert cb.get_cb_entry(A1).cooldown_blocks == MAX


def test_promote_cb_entry_to_probe(cb: GonkaCBKeeper) -> None:
    """CB TestPromoteCBEntryToProbe; the promotion counts no probe attempt."""
    cb.exclude_cb_entry(100, A1, False)
    cb.promote_cb_entry_to_probe(150, A1)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.probe_attempts) == (PROBE, 0)


def test_record_cb_result_probe_success(cb: GonkaCBKeeper) -> None:
    """CB TestRecordCBResult_ProbeSuccess: kept, HEALTHY, restored at 155."""
    cb.exclude_cb_entry(100, A1, False)
    cb.promote_cb_entry_to_probe(150, A1)
    cb.record_cb_result(155, A1, True)
    entry = cb.get_cb_entry(A1)
    assert cb.has_cb_entry(A1) and entry.state == HEALTHY
    assert (entry.last_restored_block, entry.probe_restored) == (155, True)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL, 0)


def test_record_cb_result_probe_failure(cb: GonkaCBKeeper) -> None:
    """CB TestRecordCBResult_ProbeFailure: the counter keepersim had wrong (0 before)."""
    cb.exclude_cb_entry(100, A1, False)
    cb.promote_cb_entry_to_probe(150, A1)
    cb.record_cb_result(155, A1, False)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.excluded_at_block) == (EXCLUDED, 155)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL * 2, 1)


def test_record_cb_result_healthy_node_noop(cb: GonkaCBKeeper) -> None:
    """CB TestRecordCBResult_HealthyNodeNoOp (no entry is created either)."""
    cb.record_cb_result(100, A1, False)
    assert cb.get_cb_entry(A1).state == HEALTHY and not cb.has_cb_entry(A1)
    cb.exclude_cb_entry(100, A2, False)  # EXCLUDED is not PROBE: no-op as well
    before = cb.get_cb_entry(A2)
    cb.record_cb_result(101, A2, False)
    cb.record_cb_result(102, A2, True)
    assert cb.get_cb_entry(A2) == before


def test_clear_all_cb_state(cb: GonkaCBKeeper) -> None:
    """CB TestClearAllCBState; the wake-ups go too, so nothing is promoted afterwards."""
    cb.exclude_cb_entry(100, A1, False)
    cb.exclude_cb_entry(100, A2, False)
    assert [cb.get_cb_entry(a).state for a in (A1, A2)] == [EXCLUDED, EXCLUDED]
    cb.clear_all_cb_state()
    assert [cb.get_cb_entry(a).state for a in (A1, A2)] == [HEALTHY, HEALTHY]
    assert cb.get_all_cb_entries() == []
    cb.update_cb_state_for_block(200)
    assert cb.get_all_cb_entries() == []


def test_health_filter_excludes_high_miss_rate(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterExcludesHighMissRate: 3 + 4 out beside a healthy 9 + 1; read-only."""
    set_stats(cb, A1, 3, 4)
    set_stats(cb, A2, 9, 1)
    assert cb.filter_candidates(H, [A1, A2]) == [A2]
    assert cb.get_cb_entry(A1).state == HEALTHY and not cb.has_cb_entry(A1)


def test_health_filter_includes_healthy_node(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterIncludesHealthyNode."""
    set_stats(cb, A1, 9, 1)
    assert cb.filter_candidates(H, [A1]) == [A1]


def test_health_filter_below_min_samples(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterBelowMinSamples: 1 + 2 is 3 samples, below 4 (a healthy A2 beside it,
    so the fallback cannot be what admits A1)."""
    set_stats(cb, A1, 1, 2)
    assert cb.filter_candidates(H, [A1, A2]) == [A1, A2]


def test_health_filter_probe_node_promoted_on_cooldown_expiry(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterProbeNodePromotedOnCooldownExpiry: included once the cooldown is over,
    the entry still EXCLUDED (EndBlock promotes it)."""
    entry = CircuitBreakerEntry(
        address=A1, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=50
    )
    cb.set_cb_entry(entry)
    assert cb.filter_candidates(100 + 50 + 1, [A1, A2]) == [A1, A2]
    assert cb.filter_candidates(100 + 50, [A1, A2]) == [A1, A2]  # h >= end: over
    assert cb.get_cb_entry(A1) == entry


def test_health_filter_excluded_node_still_in_cooldown(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterExcludedNodeStillInCooldown (A2 healthy beside it)."""
    cb.set_cb_entry(
        CircuitBreakerEntry(address=A1, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=50)
    )
    set_stats(cb, A2, 9, 1)
    assert cb.filter_candidates(100 + 10, [A1, A2]) == [A2]
    assert cb.filter_candidates(149, [A1, A2]) == [A2]


def test_health_filter_fallback_all_degraded(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterFallbackAllDegraded: all excluded -> the whole list."""
    for address in (A1, A2):
        cb.set_cb_entry(
            CircuitBreakerEntry(
                address=address, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=MAX
            )
        )
    assert cb.filter_candidates(110, [A1, A2]) == [A1, A2]
    assert cb.filter_candidates(110, []) == []


def test_health_filter_probe_node_included(cb: GonkaCBKeeper) -> None:
    """CB TestHealthFilterProbeNodeIncluded, with stats that would exclude a HEALTHY node."""
    cb.exclude_cb_entry(100, A1, False)
    cb.promote_cb_entry_to_probe(150, A1)
    set_stats(cb, A1, 0, 9)
    set_stats(cb, A2, 9, 1)
    assert cb.filter_candidates(160, [A1, A2]) == [A1, A2]


def test_health_filter_unknown_participant_included(cb: GonkaCBKeeper) -> None:
    """The filter's "participant data is missing, include by default" branch (CB's filter)."""
    set_stats(cb, A1, 0, 9)
    assert cb.filter_candidates(H, [A1, "nobody"]) == ["nobody"]


@pytest.mark.parametrize(
    ("ok", "missed", "excluded"),
    [(3, 4, True), (9, 1, False), (1, 2, False), (1, 3, True), (3, 1, False), (0, 0, False)],
    ids=["3+4", "9+1", "1+2-below-min", "1+3", "3+1-exactly-25pct", "no-samples"],
)
def test_conformance_vectors(cb: GonkaCBKeeper, ok: int, missed: int, excluded: bool) -> None:
    """The vectors of CB and EB (3+4 out, 9+1 kept, 1+2 kept on 3 samples, 1+3 out; 3+1 sits on
    the threshold, which must be exceeded): the filter and the EndBlock pass agree."""
    set_stats(cb, A1, ok, missed)
    assert (A1 not in cb.filter_candidates(H, [A1, A2])) is excluded
    cb.update_cb_state_for_block(H)
    assert cb.get_cb_entry(A1).state == (EXCLUDED if excluded else HEALTHY)


def test_zero_cb_params_are_upstreams_defaults() -> None:
    """With #942 a ``cb_*`` of 0 is no error: it reads as the ``Default*`` constant (25%, 4
    samples, 50 and 500 blocks), which the ``cb-zero`` runs of the cases above rely on."""
    params = make_gonka_params(zero_cb=True)
    validate_params(params)
    assert get_cb_settings(params.extension_params) == CbSettings(25, 4, INITIAL, MAX)


CB_SET = {"miss_threshold_pct": 50, "min_samples": 2, "initial_cooldown_blocks": 10}


@pytest.mark.parametrize("name", [*CB_SET, "max_cooldown_blocks"])
def test_each_zero_cb_param_alone_reads_as_its_default(name: str) -> None:
    """One ``cb_*`` at 0 takes its default and leaves the others as set."""
    params = make_gonka_params()
    ext = params.extension_params
    values = {**CB_SET, "max_cooldown_blocks": 100}
    for key, value in values.items():
        setattr(ext, "cb_" + key, value)
    setattr(ext, "cb_" + name, 0)
    validate_params(params)
    expected = {**values, name: getattr(CB_DEFAULTS, name)}
    assert get_cb_settings(ext) == CbSettings(**expected)


def test_zero_max_cooldown_is_checked_as_its_default() -> None:
    """cb_max_cooldown_blocks 0 is 500, so an initial cooldown above 500 is still rejected."""
    params = make_gonka_params()
    ext = params.extension_params
    ext.cb_initial_cooldown_blocks, ext.cb_max_cooldown_blocks = MAX + 1, 0
    with pytest.raises(InvalidParamsError) as info:
        validate_params(params)
    assert info.value.field == "extension_params.cb_max_cooldown_blocks"
    ext.cb_initial_cooldown_blocks = MAX
    validate_params(params)


# circuit_breaker_endblock_test.go


def test_update_cb_state_for_block_excludes_high_miss_rate(cb: GonkaCBKeeper) -> None:
    """EB TestUpdateCBStateForBlock_ExcludesHighMissRate (and the promotion at its end)."""
    set_stats(cb, A1, 1, 3)
    cb.update_cb_state_for_block(H)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.excluded_at_block, entry.cooldown_blocks) == (EXCLUDED, H, INITIAL)
    cb.update_cb_state_for_block(H + INITIAL - 1)
    assert cb.get_cb_entry(A1).state == EXCLUDED
    cb.update_cb_state_for_block(H + INITIAL)
    assert cb.get_cb_entry(A1).state == PROBE


def test_update_cb_state_for_block_promotes_expired_exclusion(cb: GonkaCBKeeper) -> None:
    """EB TestUpdateCBStateForBlock_PromotesExpiredExclusion: an entry set (not excluded) is
    found by the EndBlock pass, i.e. set_cb_entry queued its wake-up."""
    cb.set_cb_entry(
        CircuitBreakerEntry(address=A1, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=50)
    )
    cb.update_cb_state_for_block(100 + 50 + 1)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.probe_attempts) == (PROBE, 0)


def test_update_cb_state_for_block_skips_low_miss_rate(cb: GonkaCBKeeper) -> None:
    """EB TestUpdateCBStateForBlock_SkipsLowMissRate."""
    set_stats(cb, A1, 9, 1)
    cb.update_cb_state_for_block(H)
    assert cb.get_cb_entry(A1).state == HEALTHY and not cb.has_cb_entry(A1)


def test_update_cb_state_for_block_skips_already_excluded(cb: GonkaCBKeeper) -> None:
    """EB TestUpdateCBStateForBlock_SkipsAlreadyExcluded: no re-exclusion, attempts unchanged."""
    entry = CircuitBreakerEntry(
        address=A1, state=EXCLUDED, excluded_at_block=100, cooldown_blocks=MAX, probe_attempts=1
    )
    cb.set_cb_entry(entry)
    set_stats(cb, A1, 1, 3)
    cb.update_cb_state_for_block(100 + 10)
    assert cb.get_cb_entry(A1) == entry


def test_update_cb_state_for_block_skips_probe_nodes(cb: GonkaCBKeeper) -> None:
    """EB TestUpdateCBStateForBlock_SkipsProbeNodes."""
    entry = CircuitBreakerEntry(address=A1, state=PROBE, cooldown_blocks=INITIAL)
    cb.set_cb_entry(entry)
    set_stats(cb, A1, 1, 3)
    cb.update_cb_state_for_block(H)
    assert cb.get_cb_entry(A1) == entry


def test_probe_success_not_re_excluded_same_block(cb: GonkaCBKeeper) -> None:
    """EB TestProbeSuccessNotReExcludedSameBlock: the one-block grace."""
    cb.set_cb_entry(
        CircuitBreakerEntry(
            address=A1, state=PROBE, excluded_at_block=H - 60, cooldown_blocks=INITIAL
        )
    )
    set_stats(cb, A1, 1, 3)
    cb.record_cb_result(H, A1, True)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.last_restored_block, entry.probe_restored) == (HEALTHY, H, True)
    cb.update_cb_state_for_block(H)
    assert cb.get_cb_entry(A1).state == HEALTHY


def test_probe_success_can_be_excluded_next_block(cb: GonkaCBKeeper) -> None:
    """EB TestProbeSuccessCanBeExcludedNextBlock: the grace is exactly one block; the
    re-exclusion keeps the entry's cooldown and attempts (no doubling)."""
    cb.set_cb_entry(
        CircuitBreakerEntry(
            address=A1, state=PROBE, excluded_at_block=H - 60, cooldown_blocks=INITIAL
        )
    )
    cb.record_cb_result(H, A1, True)
    set_stats(cb, A1, 1, 3)
    cb.update_cb_state_for_block(H + 1)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.excluded_at_block) == (EXCLUDED, H + 1)
    assert (entry.cooldown_blocks, entry.probe_attempts, entry.probe_restored) == (
        INITIAL,
        0,
        True,
    )


def test_probe_failure_re_excludes_immediately(cb: GonkaCBKeeper) -> None:
    """EB TestProbeFailureReExcludesImmediately."""
    cb.set_cb_entry(
        CircuitBreakerEntry(
            address=A1, state=PROBE, excluded_at_block=H - 60, cooldown_blocks=INITIAL
        )
    )
    cb.record_cb_result(H, A1, False)
    entry = cb.get_cb_entry(A1)
    assert (entry.state, entry.excluded_at_block) == (EXCLUDED, H)
    assert (entry.cooldown_blocks, entry.probe_attempts) == (INITIAL * 2, 1)
    cb.update_cb_state_for_block(H + 2 * INITIAL)
    assert cb.get_cb_entry(A1).state == PROBE


# on the chain: genesis import, the policy state query


def run_until(net: Net, height: int) -> None:
    while net.height < height:
        net.block()


def test_excluded_entry_imported_without_its_queue_key_is_promoted(tmp_path: Path) -> None:
    """An EXCLUDED entry imported through genesis without its queue key is promoted at its
    cooldown end (before, it stayed EXCLUDED until the epoch ended)."""
    genesis = make_policy_genesis(make_params("gonka"), {A1: 100, A2: 100})
    entry = CircuitBreakerEntry(
        address=A1, state=EXCLUDED, excluded_at_block=0, cooldown_blocks=20, probe_attempts=3
    )
    genesis.keepersim.policy_state.append(
        PolicyStateEntry(key=GONKA_STATE + A1.encode(), value=entry.SerializeToString())
    )
    with Chain.open(tmp_path / "a", genesis=genesis) as chain:
        net = Net(chain)
        run_until(net, 10)
        # Export -> import keeps the app hash: the exported queue key is the one the import made.
        with Chain.open(tmp_path / "b", genesis=chain.export_genesis()) as again:
            assert again.app_hash == chain.app_hash
        run_until(net, 19)
        assert net.state(A1)["state"] == "excluded"
        assert A1 not in net.admitted()
        net.block()
        assert net.state(A1)["state"] == "probe" and A1 in net.admitted()
        [t] = net.transitions(A1)
        assert (t.height, t.from_state, t.to_state) == (20, "excluded", "probe")
        assert net.state(A1)["probe_attempts"] == 3


@pytest.mark.parametrize("zero_cb", [False, True], ids=["cb-defaults", "cb-zero"])
def test_policy_state_is_the_whole_entry(make_net: NetFactory, zero_cb: bool) -> None:
    """get_policy_state: every field of the entry (probe_restored too), as GetCBEntry reads it;
    the chain runs the same with every ``cb_*`` at 0 (their defaults)."""
    params = make_gonka_params(zero_cb=zero_cb)
    params.params.validation_params.expiration_blocks = 3
    net = make_net(params, {A1: 100, A2: 100}, memory=True)
    assert net.state(A2) == {
        "policy": "gonka",
        "address": A2,
        "state": "healthy",
        "admitted": True,
        "excluded_at_block": 0,
        "cooldown_blocks": INITIAL,
        "cooldown_end": None,
        "probe_attempts": 0,
        "last_restored_block": 0,
        "probe_restored": False,
    }
    net.succeed_many(A1, 3)
    net.miss(A1, 4)  # 3 + 4: excluded at the expiry
    excluded_at = net.height
    assert net.state(A1)["cooldown_end"] == excluded_at + INITIAL
    run_until(net, excluded_at + INITIAL - 3)
    net.miss(A1)  # the probe misses: re-excluded, cooldown doubled, one attempt
    view = net.state(A1)
    assert (view["state"], view["cooldown_blocks"], view["probe_attempts"]) == (
        "excluded",
        2 * INITIAL,
        1,
    )
    run_until(net, int(view["cooldown_end"]))  # type: ignore[call-overload]
    net.succeed(A1)
    view = net.state(A1)
    assert (view["state"], view["probe_restored"]) == ("healthy", True)
    assert view["last_restored_block"] == net.height


# the API against upstream's scan-everything model


@dataclass
class Model:
    """Upstream's keeper, restated: entries in a dict, EndBlock scans them all."""

    stats: dict[str, tuple[int, int]] = field(default_factory=dict)
    entries: dict[str, CircuitBreakerEntry] = field(default_factory=dict)

    def get(self, address: str) -> CircuitBreakerEntry:
        stored = self.entries.get(address)
        if stored is None:
            return CircuitBreakerEntry(address=address, state=HEALTHY, cooldown_blocks=INITIAL)
        copy = CircuitBreakerEntry()
        copy.CopyFrom(stored)
        return copy

    def exclude(self, height: int, address: str, re_exclusion: bool) -> None:
        entry = self.get(address)
        cooldown = entry.cooldown_blocks if entry.cooldown_blocks > 0 else INITIAL
        if re_exclusion:
            cooldown = min(cooldown * 2, MAX)
            entry.probe_attempts += 1
        entry.state, entry.excluded_at_block, entry.cooldown_blocks = EXCLUDED, height, cooldown
        self.entries[address] = entry

    def record(self, height: int, address: str, success: bool) -> None:
        entry = self.get(address)
        if entry.state != PROBE:
            return
        if success:
            entry.state, entry.last_restored_block, entry.probe_restored = HEALTHY, height, True
            self.entries[address] = entry
        else:
            self.exclude(height, address, True)

    def end_block(self, height: int) -> None:
        for _address, entry in sorted(self.entries.items()):
            if (
                entry.state == EXCLUDED
                and height >= entry.excluded_at_block + entry.cooldown_blocks
            ):
                entry.state = PROBE
        for address, (ok, missed) in sorted(self.stats.items()):
            entry = self.get(address)
            if entry.state != HEALTHY or (
                entry.probe_restored and entry.last_restored_block == height
            ):
                continue
            if ok + missed >= 4 and missed * 100 > 25 * (ok + missed):
                self.exclude(height, address, False)


ADDRESSES = (A1, A2)
STEP = st.one_of(
    st.tuples(st.just("stats"), st.sampled_from(ADDRESSES), st.integers(0, 12), st.integers(0, 12)),
    st.tuples(st.just("result"), st.sampled_from(ADDRESSES), st.booleans(), st.just(0)),
    st.tuples(st.just("wait"), st.integers(0, 140), st.just(0), st.just(0)),
    st.tuples(st.just("clear"), st.just(""), st.just(0), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(STEP, max_size=40))
@pytest.mark.parametrize("zero_cb", [False, True], ids=["cb-defaults", "cb-zero"])
def test_api_matches_upstreams_scan_of_every_entry(
    zero_cb: bool, steps: list[tuple[object, ...]]
) -> None:
    """Block by block (results, then the EndBlock pass), the queue-driven API keeps exactly the
    entries upstream's keeper keeps, which visits every entry and participant every block
    (the model's constants are the defaults, which ``cb_*`` of 0 must read as)."""
    cb = GonkaCBKeeper.open(make_keeper(MemoryBackend(), zero_cb=zero_cb))
    model = Model(stats={a: (0, 0) for a in ADDRESSES})
    height = 1
    for kind, a, b, c in steps:
        if kind == "stats":
            assert isinstance(a, str) and isinstance(b, int) and isinstance(c, int)
            set_stats(cb, a, b, c)
            model.stats[a] = (b, c)
        elif kind == "result":
            assert isinstance(a, str) and isinstance(b, bool)
            cb.record_cb_result(height, a, b)
            model.record(height, a, b)
        elif kind == "clear":
            cb.clear_all_cb_state()
            model.entries.clear()
        else:
            assert isinstance(a, int)
            for h in range(height, height + a):
                cb.update_cb_state_for_block(h)
                model.end_block(h)
            height += a
            assert cb.get_all_cb_entries() == [e for _, e in sorted(model.entries.items())]
        cb.update_cb_state_for_block(height)
        model.end_block(height)
        height += 1
        assert cb.get_all_cb_entries() == [e for _, e in sorted(model.entries.items())]


class ExcludesA1AtBlock5(GonkaBreaker):
    """The gonka policy, with one keeper call of its own in the end block of height 5 (a
    harness override: its own name and prefix, since no override may pass for a chain policy)."""

    name = "gonka-with-a1-excluded"
    prefix = b"\x7e"

    def process_end_block(self, ctx: PolicyStore) -> None:
        if ctx.height == 5:
            GonkaCBKeeper(ctx).exclude_cb_entry(ctx.height, A1, False)
        super().process_end_block(ctx)


def test_api_inside_a_block(tmp_path: Path) -> None:
    """On the block's own policy context the API's writes and wake-ups are the block's: the
    exclusion made in block 5 is committed with it and its cooldown end promotes it."""
    genesis = make_policy_genesis(make_params("gonka"), {A1: 100, A2: 100})
    with Chain.open(tmp_path / "a", genesis=genesis, policy_override=ExcludesA1AtBlock5) as chain:
        net = Net(chain)
        run_until(net, 5)
        assert net.state(A1)["state"] == "excluded" and net.admitted() == {A2}
        run_until(net, 5 + INITIAL - 1)
        assert net.state(A1)["state"] == "excluded"
        net.block()
        assert net.state(A1)["state"] == "probe" and net.admitted() == {A1, A2}
        assert [(t.height, t.to_state) for t in net.transitions(A1)] == [
            (5, "excluded"),
            (5 + INITIAL, "probe"),
        ]
