"""trin's additive score (as shipped) and multiplicative proposal on the real chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import MODEL, Net, NetFactory, make_params

from keepersim.chain import Chain
from keepersim.keeper.policies import trin_multiplicative
from keepersim.keeper.policies.base import NEVER
from keepersim.keeper.policies.trin_additive import Events, ScoreParams, TrinAdditive
from keepersim.keeper.policies.trin_multiplicative import TrinMultiplicative
from keepersim.store.cache import forget_all_derived
from keepersim.types import keys
from keepersim.types.errors import InvalidParamsError, NoExecutorsError
from keepersim.types.params import GOV_AUTHORITY, validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams, TrinAdditiveParams
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    ScoreDelta,
    TrinMultiplicativeEntry,
    TrinOffers,
    TrinScoreRecord,
)
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

T = TypeVar("T")


def get_weights(net: Net) -> dict[str, int]:
    table = net.chain.get_selection_table(MODEL)
    previous = 0
    out = {}
    for address, cumulative in zip(table.addresses, table.cumulative, strict=True):
        out[address] = cumulative - previous
        previous = cumulative
    return out


# --- trin-additive ------------------------------------------------------------------------


def make_additive_params(**changes: object) -> ModuleParams:
    params = make_params("trin-additive", expiration_blocks=3)
    for key, value in changes.items():
        setattr(params.extension_params.health_params.trin_additive, key, value)
    return params


def test_additive_starts_at_initial_and_applies_deltas(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(), {"a": 1000, "b": 1000, "c": 1000, "d": 1000})
    assert net.state("a")["score"] == 200
    net.succeed("a")
    net.miss("b")
    net.push_back("c")
    assert [net.state(x)["score"] for x in "abcd"] == [205, 190, 198, 200]
    # The weight factor is score / initial_score.
    assert get_weights(net) == {"a": 1025, "b": 950, "c": 990, "d": 1000}


def test_additive_clamps_at_max_and_at_zero(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(), {"a": 1000, "b": 1000})
    net.succeed_many("a", 45)  # 200 + 225 -> 400
    assert net.state("a")["score"] == 400
    assert get_weights(net)["a"] == 2000
    net.miss("b", 25)  # 200 - 250 -> 0
    assert net.state("b")["score"] == 0
    net.succeed("b")  # the sum is clamped, not each step: still 0
    assert net.state("b")["score"] == 0
    assert set(get_weights(net)) == {"a"}
    table = net.chain.get_selection_table(MODEL)
    assert table.excluded == ("b",)


def test_additive_events_age_out_of_the_window(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(window_blocks=10), {"a": 1000, "b": 1000})
    net.miss("a")  # -10 at the expiry height
    counted_at = net.height
    for h in range(counted_at, counted_at + 10):
        assert net.height == h
        assert get_weights(net)["a"] == 950, h  # the memoized table, at every height
        net.block()
    assert net.height == counted_at + 10
    assert get_weights(net)["a"] == 1000
    assert net.state("a")["score"] == 200


def test_additive_zero_is_filtered_and_all_zero_is_an_error(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(), {"a": 1000, "b": 1000})
    net.block(*[net.start(x) for x in "ab" for _ in range(20)])
    net.run(3)
    assert net.state("a")["admitted"] is False
    with pytest.raises(NoExecutorsError):
        net.chain.get_random_executor(MODEL, "r")


def test_additive_all_zero_with_fallback_is_the_full_list(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(fallback_when_all_zero=True), {"a": 1000, "b": 1000})
    net.block(*[net.start(x) for x in "ab" for _ in range(20)])
    net.run(3)
    table = net.chain.get_selection_table(MODEL)
    assert table.fallback
    assert get_weights(net) == {"a": 1000, "b": 1000}


def test_additive_weight_is_proportional_to_score(make_net: NetFactory) -> None:
    net = make_net(make_additive_params(), {"a": 2000, "b": 2000})
    net.succeed_many("a", 20)  # 300
    net.miss("b", 10)  # 100
    assert get_weights(net) == {"a": 3000, "b": 1000}


def run_blocks(
    net: Net,
    blocks: int,
    get_msgs: Callable[[Net, int], list[object]],
    observe: Callable[[Net], T],
    *,
    cold: bool,
) -> list[tuple[bytes, T]]:
    """Deliver ``blocks`` blocks of ``get_msgs(net, i)``; with ``cold``, the in-memory hints
    (the carried entries and log indexes) are forgotten before every other block, as after a
    reopen. Each block's app hash with what ``observe`` saw after it."""
    out = []
    for i in range(blocks):
        if cold and i % 2:
            forget_all_derived()
        result = net.block(*get_msgs(net, i))
        out.append((result.app_hash, observe(net)))
    return out


def get_score_log(net: Net) -> dict[int, dict[str, int]]:
    prefix = keys.POLICY_LOG + TrinAdditive.prefix
    with net.chain.read() as k:
        return {
            keys.decode_height_key(key[len(prefix) :]): {
                d.address: d.delta for d in TrinScoreRecord.FromString(raw).deltas
            }
            for key, raw in k.store.iterate(prefix, prefix + b"\xff")
        }


def test_additive_log_holds_one_merged_record_per_height_within_the_window(
    make_net: NetFactory,
) -> None:
    """One record per height with outcomes, one merged delta per participant, deleted once the
    window no longer counts it; no per-participant entry is written."""
    net = make_net(make_additive_params(window_blocks=5), {"a": 1000, "b": 1000})
    for _ in range(12):
        net.succeed_many("a", 3, latency=1)
    finished = net.height
    log = get_score_log(net)
    assert log == {h: {"a": 15} for h in log}  # three successes merged at each height
    assert max(log) == finished
    assert all(finished - 5 < h <= finished for h in log)
    net.miss("b")  # -10 at the expiry, 4 blocks on
    expired = net.height
    assert get_score_log(net) == {finished: {"a": 15}, expired: {"b": -10}}
    net.block()  # the window moves past a's last record
    assert get_score_log(net) == {expired: {"b": -10}}
    assert net.state("a")["score"] == 200
    with net.chain.read() as k:
        prefix = keys.POLICY_STATE + TrinAdditive.prefix
        assert list(k.store.iterate(prefix, prefix + b"\xff")) == []
    assert net.chain.verify_app_hash()


def test_additive_log_index_rebuilt_from_the_store_decides_the_same(make_net: NetFactory) -> None:
    """The log's index (each participant's events) is kept in memory between blocks: forgotten
    before every other block (as after a reopen), it is read back from the records, and every
    block's app hash, weight and score is the one of an uninterrupted run, through a window
    that shrinks and grows again."""

    def get_msgs(net: Net, h: int) -> list[object]:
        msgs: list[object] = []
        if h % 3 == 0:
            msgs.append(net.finish(net.start("abc"[h % 2])))
        if h % 5 == 0:
            msgs.append(net.start("c"))  # expires: a miss
        if 15 <= h < 40:  # one a block, through the regrowth: prunes leave some of "a"'s pairs
            msgs.append(net.finish(net.start("a")))
        if h in (20, 35):
            params = make_additive_params(window_blocks=3 if h == 20 else 12)
            ext = params.extension_params  # a health-policy param: keepersim's, not the chain's
            msgs.append(MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
        return msgs

    def observe(net: Net) -> object:
        return get_weights(net), [net.state(x)["score"] for x in "abc"]

    runs = []
    for cold in (False, True):
        net = make_net(make_additive_params(window_blocks=8), {"a": 1000, "b": 1000, "c": 1000})
        runs.append(run_blocks(net, 50, get_msgs, observe, cold=cold))
        assert net.chain.verify_app_hash()
    assert runs[0] == runs[1]


@pytest.mark.parametrize("policy", ["trin-additive", "trin-multiplicative"])
def test_an_imported_log_record_above_the_height_is_kept_in_order(
    make_net: NetFactory, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """A genesis may carry log records of any height. One above the chain's counts from its
    height, the log stays in height order (pruned oldest first), and an index rebuilt from
    the records decides the same as the one carried in memory."""
    monkeypatch.setattr(trin_multiplicative, "OFFER_LOG_BLOCKS", 6)
    additive = policy == "trin-additive"
    params = make_additive_params(window_blocks=6) if additive else make_multiplicative_params()
    source = make_net(params, {"a": 1000, "b": 1000})
    for _ in range(3):
        source.succeed("a")
    genesis = source.chain.export_genesis()
    above = genesis.keepersim.height + 3
    if additive:
        record = TrinScoreRecord(deltas=[ScoreDelta(address="b", delta=-10)])
        prefix = keys.POLICY_LOG + TrinAdditive.prefix
    else:
        record = TrinOffers(addresses=["b"])
        prefix = keys.POLICY_LOG + TrinMultiplicative.prefix
    genesis.keepersim.policy_state.add(
        key=prefix + keys.height_key(above), value=record.SerializeToString()
    )

    def get_msgs(net: Net, h: int) -> list[object]:
        start = net.start("ab"[h % 2], f"imp-{h}")
        return [start, net.finish(start)] if h % 3 else []

    def observe(net: Net) -> tuple[int, dict[str, int], object]:
        return net.height, get_weights(net), net.state("b").get("score")

    runs = []
    for cold in (False, True):
        with Chain.open(memory=True, genesis=genesis) as chain:
            net = Net(chain)
            out = run_blocks(net, 16, get_msgs, observe, cold=cold)
            scores = {height: score for _, (height, _, score) in out}
            if additive:  # "b" has no outcome of its own at that height: the import's -10
                assert scores[above] == scores[above - 1] - 10
            logged = get_score_log(net) if additive else get_offer_log(net)
            assert list(logged) == sorted(logged)
            assert min(logged) > net.height - 6  # pruned oldest first, the import included
            assert chain.verify_app_hash()
            runs.append(out)
    assert runs[0] == runs[1]


def get_reference_score(events: Events, height: int, params: ScoreParams) -> int:
    """The score by definition: every pair counted at ``height``, summed, clamped."""
    total = params.initial + sum(d for _, d in events.get_counted(height, params.window))
    return max(0, min(params.top, total))


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 30), max_size=40),
    deltas=st.lists(st.sampled_from([5, -10, -2, 10, 0, 15, -20]), min_size=40, max_size=40),
    initial=st.integers(1, 100),
    extra=st.integers(0, 100),
    window=st.integers(1, 120),
    ahead=st.integers(0, 60),
)
def test_additive_verdict_holds_exactly_until_valid_until(
    gaps: list[int],
    deltas: list[int],
    initial: int,
    extra: int,
    window: int,
    ahead: int,
) -> None:
    """The fast paths (bisection, running maxima, the tail's running total) against the
    definition: the score is right, holds at every height up to valid_until, and moves right
    after it (no pair still to come); the verdicts that follow one another agree too."""
    params = ScoreParams.from_params(
        TrinAdditiveParams(initial_score=initial, max_score=initial + extra, window_blocks=window)
    )
    heights = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    events = Events(heights, deltas[: len(heights)])
    height = (heights[-1] if heights else 0) + ahead
    score, valid_until = events.get_score_and_valid_until(height, params)
    assert score == get_reference_score(events, height, params)
    last = height + window + 1 if valid_until == NEVER else valid_until
    for h in range(height, last + 1):
        assert get_reference_score(events, h, params) == score, h
    if valid_until != NEVER:
        assert get_reference_score(events, valid_until + 1, params) != score
    # The verdicts the chain follows (Health.then, the tail's index and running total): each
    # holds the definition's score at every height it covers, up to the last ageing-out.
    policy = TrinAdditive()
    health = policy.compute_health(events, height, params)
    start = height
    while True:
        for h in range(start, min(health.valid_until, height + 200 + window) + 1):
            expected = get_reference_score(events, h, params)
            assert health.admitted == (expected > 0), h
            assert health.factor_num == (expected or 1), h
        if health.then is None:
            break
        start = health.valid_until + 1
        health = health.then()
    # Asked at a height before the newest pairs, the verdict ends when the next pair counts.
    if len(heights) > 1:
        past = heights[(len(heights) - 1) // 2]
        score, valid_until = events.get_score_and_valid_until(past, params)
        assert score == get_reference_score(events, past, params)
        assert valid_until < NEVER
        for h in range(past, valid_until + 1):
            assert get_reference_score(events, h, params) == score, h


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_score": 0}, "extension_params.health_params.trin_additive.max_score"),
        ({"initial_score": 401}, "extension_params.health_params.trin_additive.initial_score"),
        ({"window_blocks": 0}, "extension_params.health_params.trin_additive.window_blocks"),
        ({"miss_delta": 1}, "extension_params.health_params.trin_additive.miss_delta"),
        ({"pushback_delta": 3}, "extension_params.health_params.trin_additive.pushback_delta"),
        ({"success_delta": -1}, "extension_params.health_params.trin_additive.success_delta"),
    ],
)
def test_additive_validation_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParamsError) as info:
        validate_params(make_additive_params(**change))
    assert info.value.field == field


# --- trin-multiplicative ------------------------------------------------------------------


def make_multiplicative_params(
    history: int = 16, recency_blocks: int = 100_000, max_doublings: int = 4
) -> ModuleParams:
    params = make_params("trin-multiplicative", expiration_blocks=3)
    t = params.extension_params.health_params.trin_multiplicative
    t.history = history
    t.recency_blocks = recency_blocks
    t.max_recency_doublings = max_doublings
    return params


def test_multiplicative_halves_per_miss_and_ignores_pushback(make_net: NetFactory) -> None:
    net = make_net(make_multiplicative_params(), {"a": 1024, "b": 1024})
    net.miss("a")
    assert get_weights(net)["a"] == 512
    net.miss("a", 2)
    assert get_weights(net)["a"] == 128
    net.push_back("a")
    net.succeed("a")
    assert get_weights(net)["a"] == 128
    assert net.state("a")["misses"] == 3
    assert net.state("a")["admitted"] is True


def test_multiplicative_an_entry_only_looked_at_is_carried_as_stored(make_net: NetFactory) -> None:
    """A success on a full, clean history writes nothing: the entry is only looked at, and stays
    in the block-to-block carry, whose stored bytes stand in for the read at its next write. So
    they must be the store's: with the carry forgotten before each such success (as after a
    reopen), every block's app hash is the one of an uninterrupted run."""
    runs = []
    for cold in (False, True):
        net = make_net(make_multiplicative_params(), {"a": 1024, "b": 1024})
        hashes = []
        for _ in range(40):  # past the 32 outcomes a full history holds
            start = net.start("a")
            hashes.append(net.block(start).app_hash)
            if cold:
                forget_all_derived()
            hashes.append(net.block(net.finish(start)).app_hash)
        assert net.state("a")["outcomes"] == 16
        runs.append(hashes)
    assert runs[0] == runs[1]


def get_offer_log(net: Net) -> dict[int, list[str]]:
    prefix = keys.POLICY_LOG + TrinMultiplicative.prefix
    with net.chain.read() as k:
        return {
            keys.decode_height_key(key[len(prefix) :]): list(TrinOffers.FromString(raw).addresses)
            for key, raw in k.store.iterate(prefix, prefix + b"\xff")
        }


def get_stored_entry(net: Net, address: str) -> bytes | None:
    with net.chain.read() as k:
        return k.store.get(keys.POLICY_STATE + TrinMultiplicative.prefix + address.encode())


def test_multiplicative_offers_are_logged_once_per_block_and_folded_when_pruned(
    make_net: NetFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An offer writes one record per block, not the participant's entry; when the record leaves
    the log, the offer is folded into the entries of those not offered since. The last offer,
    and so the weight, is the same all along."""
    monkeypatch.setattr(trin_multiplicative, "OFFER_LOG_BLOCKS", 6)
    net = make_net(make_multiplicative_params(recency_blocks=4), {"a": 1024, "b": 1024, "c": 1})
    starts = [net.start("a"), net.start("b"), net.start("a")]
    offered = net.block(*starts).height
    assert get_offer_log(net) == {offered: ["a", "b"]}
    assert get_stored_entry(net, "a") is None  # nothing but the log was written
    net.block(*[net.finish(s) for s in starts])  # the outcomes write the entries
    net.block()
    start = net.start("b")
    again = net.block(start).height
    net.block(net.finish(start))
    assert get_offer_log(net) == {offered: ["a", "b"], again: ["b"]}
    weights = []
    while net.height < offered + 6:  # up to the block that prunes the first record
        weights.append(get_weights(net)["a"])
        assert net.state("a")["last_selected_block"] == offered
        net.block()
    assert get_offer_log(net) == {again: ["b"]}

    def get_folded(address: str) -> int:
        raw = get_stored_entry(net, address)
        return TrinMultiplicativeEntry.FromString(raw or b"").last_selected_block

    assert get_folded("a") == offered  # "a" was not offered since
    assert get_folded("b") == 0  # "b"'s later record still speaks for it
    assert net.state("a")["last_selected_block"] == offered
    assert net.state("b")["last_selected_block"] == again
    # One doubling per 4 idle blocks, folded or not (heights offered + 4 and + 5).
    assert weights == [2048, 2048]
    net.run(20)
    assert get_offer_log(net) == {}
    assert get_folded("b") == again
    assert get_weights(net)["a"] == get_weights(net)["b"] == 1024 << 4
    assert net.chain.verify_app_hash()


def test_multiplicative_log_index_rebuilt_from_the_store_decides_the_same(
    make_net: NetFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's index is kept in memory between blocks: forgotten before every other block (as
    after a reopen), it is read back from the records, and every block's app hash, weight and
    state is the one of an uninterrupted run, through folds and exports."""
    monkeypatch.setattr(trin_multiplicative, "OFFER_LOG_BLOCKS", 5)

    def get_msgs(net: Net, h: int) -> list[object]:
        msgs: list[object] = []
        if h % 7 in (0, 3):
            msgs.append(net.start("abc"[h % 3]))
        if h % 11 == 5:
            msgs.append(net.finish(net.start("a")))
        return msgs

    def observe(net: Net) -> object:
        return get_weights(net), net.state("a"), net.state("b")

    runs = []
    for cold in (False, True):
        net = make_net(make_multiplicative_params(recency_blocks=3), {"a": 64, "b": 64, "c": 64})
        out = run_blocks(net, 60, get_msgs, observe, cold=cold)
        assert net.chain.verify_app_hash()
        # Exported and imported, the log goes along and the copy decides the same.
        genesis = net.chain.export_genesis()
        assert any(e.key.startswith(keys.POLICY_LOG) for e in genesis.keepersim.policy_state)
        with Chain.open(memory=True, genesis=genesis) as imported:
            copy = Net(imported)
            for h in range(12):
                starts = [net.start("c")] if h % 4 == 0 else []
                mirrored = [copy.start("c", s.inference_id) for s in starts]
                assert net.block(*starts).app_hash == copy.block(*mirrored).app_hash
                assert get_weights(net) == get_weights(copy)
        runs.append(out)
    assert runs[0] == runs[1]


def test_multiplicative_only_the_last_history_outcomes_count(make_net: NetFactory) -> None:
    net = make_net(make_multiplicative_params(history=4), {"a": 1024})
    net.miss("a", 2)
    net.succeed_many("a", 3)
    assert get_weights(net)["a"] == 512  # one miss still among the last 4
    net.succeed("a")
    assert get_weights(net)["a"] == 1024


def test_multiplicative_is_never_inadmissible(make_net: NetFactory) -> None:
    net = make_net(make_multiplicative_params(), {"a": 1 << 20, "b": 1 << 20})
    net.miss("a", 20)
    assert net.state("a")["misses"] == 16
    assert get_weights(net)["a"] == (1 << 20) >> 16
    assert net.chain.get_selection_table(MODEL).excluded == ()


def test_multiplicative_recency_doubles_and_caps(make_net: NetFactory) -> None:
    net = make_net(make_multiplicative_params(recency_blocks=5, max_doublings=2), {"a": 1000})
    net.succeed("a", latency=0)  # offered and finished in one block
    offered = net.height
    expected = {0: 1000, 4: 1000, 5: 2000, 9: 2000, 10: 4000, 14: 4000, 15: 4000, 30: 4000}
    seen = {}
    while net.height < offered + 30:
        idle = net.height - offered
        seen[idle] = get_weights(net)["a"]  # the memoized table, at every height
        net.block()
    seen[30] = get_weights(net)["a"]
    assert {k: seen[k] for k in expected} == expected
    # A new offer restarts the idle clock.
    net.succeed("a", latency=0)
    assert get_weights(net)["a"] == 1000


def test_multiplicative_recency_offsets_misses(make_net: NetFactory) -> None:
    net = make_net(make_multiplicative_params(recency_blocks=5, max_doublings=4), {"a": 1024})
    net.miss("a", 2)  # selected at expiry - 3; two misses
    offered = net.height - 3
    net.run_until(offered + 10)
    assert get_weights(net)["a"] == 1024  # 2^2 / 2^2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"history": 0}, "extension_params.health_params.trin_multiplicative.history"),
        ({"history": 33}, "extension_params.health_params.trin_multiplicative.history"),
        (
            {"recency_blocks": 0},
            "extension_params.health_params.trin_multiplicative.recency_blocks",
        ),
        (
            {"max_recency_doublings": 17},
            "extension_params.health_params.trin_multiplicative.max_recency_doublings",
        ),
    ],
)
def test_multiplicative_validation_names_the_field(change: dict[str, object], field: str) -> None:
    params = make_multiplicative_params()
    for key, value in change.items():
        setattr(params.extension_params.health_params.trin_multiplicative, key, value)
    with pytest.raises(InvalidParamsError) as info:
        validate_params(params)
    assert info.value.field == field
