"""trin-additive's optimized form (log index, valid_until / then hints, handed-over verdicts)
against its plain reference, compute_reference_health, on the real chain."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import MODEL, Net, make_policy_genesis
from test_trin import get_weights, make_additive_params

from keepersim.chain import Chain
from keepersim.keeper.policies.base import NEVER, Health, PolicyReader
from keepersim.keeper.policies.trin_additive import TrinAdditive, compute_reference_health
from keepersim.store.cache import forget_all_derived
from keepersim.types import keys
from keepersim.types.errors import NoExecutorsError
from keepersim.types.params import GOV_AUTHORITY
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.health_pb2 import ScoreDelta, TrinScoreRecord
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

EXPIRATION = 3  # make_additive_params' expiration_blocks
MAX_EXAMPLES = 200

# One inference: (participant index, how it ends, blocks from start to the end). An expiry is
# known EXPIRATION blocks after the start whatever the delay.
OPS = st.tuples(
    st.integers(0, 3), st.sampled_from(["finish", "decline", "expire"]), st.integers(0, 2)
)


def make_params(
    initial: int, extra: int, window: int, deltas: tuple[int, int, int]
) -> ModuleParams:
    success, miss, pushback = deltas
    return make_additive_params(
        initial_score=initial,
        max_score=initial + extra,
        window_blocks=window,
        success_delta=success,
        miss_delta=miss,
        pushback_delta=pushback,
    )


def check_height(net: Net, policy: TrinAdditive, weights: dict[str, int], *, exact: bool) -> None:
    """At the committed height: each participant's verdict, asked of the policy over a fresh
    reader and as the chain's selection table applies it, is the reference's; and each verdict
    holds, by the reference, up to its valid_until and is followed by its ``then``."""
    height = net.height
    with net.chain.read() as k:
        params = k.get_extension_params().health_params.trin_additive
        reader = PolicyReader(k, policy)
        records = reader.get_log_records()
        verdicts = {a: policy.get_health(reader, a, height) for a in weights}

    expected = {a: compute_reference_health(records, a, height, params) for a in weights}
    for address, health in verdicts.items():
        assert health.get_verdict_key() == expected[address].get_verdict_key(), (address, height)
        reference = partial(compute_reference_health, records, address, params=params)
        last = max([height] + [h for h, _ in records])
        check_hints(health, reference, height, last + params.window_blocks + 1, exact=exact)
    check_table(net, weights, expected)


def check_hints(
    health: Health,
    reference: Callable[[int], Health],
    height: int,
    limit: int,
    *,
    exact: bool,
) -> None:
    """Follow ``health``'s then-chain up to ``limit`` (every event has left the window by then):
    every verdict is the reference's at every height it covers, its ``then`` is the reference's
    at valid_until + 1, and, ``exact``, the reference moves there (a record above the height,
    which only an import makes, ends a verdict when it starts counting, moving or not)."""
    start = height
    while health.valid_until < limit:
        for h in range(start, health.valid_until + 1):
            assert reference(h) == health, (h, "before valid_until")
        after = reference(health.valid_until + 1)
        if exact:
            assert after != health, (health.valid_until, "valid_until is not the last height")
        assert health.then is not None
        following = health.then()
        assert following == after, (health.valid_until + 1, "then")
        start, health = health.valid_until + 1, following
    for h in range(start, limit + 1):
        assert reference(h) == health, (h, "before valid_until")
    assert health.valid_until == NEVER  # nothing left to age out
    assert health.then is None


def check_table(net: Net, weights: dict[str, int], expected: dict[str, Health]) -> None:
    """The chain's table (its memo: handed-over verdicts, then-chains) weights each participant
    by the reference's verdict; nobody admitted is an error (no fallback)."""
    admitted = {a: h for a, h in expected.items() if h.admitted}
    if not admitted:
        with pytest.raises(NoExecutorsError):
            net.chain.get_selection_table(MODEL)
        return
    table = net.chain.get_selection_table(MODEL)
    assert get_weights(net) == {
        a: max(1, weights[a] * h.factor_num // h.factor_den) for a, h in admitted.items()
    }, net.height
    assert set(table.excluded) == set(expected) - set(admitted)


def drive(
    genesis: Genesis,
    stakes: dict[str, int],
    blocks: list[list[tuple[int, str, int]]],
    change: ModuleParams | None,
    cold: set[int],
    *,
    exact: bool,
) -> None:
    """Deliver ``blocks`` (each a list of OPS), then enough empty blocks for everything to age
    out, checking every height: ``change`` is proposed at block len(blocks) // 2 (in force from
    the next), the in-memory hints are forgotten before the blocks of ``cold``."""
    with Chain.open(memory=True, genesis=genesis) as chain:
        net = Net(chain)
        policy = chain.get_policy_object("trin-additive")
        assert isinstance(policy, TrinAdditive)
        addresses = sorted(stakes)
        pending: dict[int, list[object]] = {}
        check_height(net, policy, stakes, exact=exact)
        for i in range(len(blocks) + EXPIRATION + 30):
            msgs = pending.pop(i, [])
            for who, end, delay in blocks[i] if i < len(blocks) else []:
                start = net.start(addresses[who % len(addresses)])
                msgs.append(start)
                if end != "expire":
                    close = net.finish(start) if end == "finish" else net.decline(start)
                    (msgs if delay == 0 else pending.setdefault(i + delay, [])).append(close)
            if change is not None and i == len(blocks) // 2:
                ext = change.extension_params
                msgs.append(MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
            if i in cold:
                forget_all_derived()
            net.block(*msgs)
            check_height(net, policy, stakes, exact=exact)


SCENARIO = {
    "weights": st.lists(st.integers(1, 3000), min_size=1, max_size=4),
    "blocks": st.lists(st.lists(OPS, max_size=4), min_size=1, max_size=24),
    "initial": st.integers(1, 40),
    "extra": st.integers(0, 40),
    "window": st.integers(1, 10),
    "deltas": st.tuples(st.integers(0, 20), st.integers(-30, 0), st.integers(-10, 0)),
    "change": st.none() | st.integers(1, 10),
    "cold": st.sets(st.integers(0, 40), max_size=6),
}


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(**SCENARIO)
def test_additive_chain_verdicts_are_the_reference(
    weights: list[int],
    blocks: list[list[tuple[int, str, int]]],
    initial: int,
    extra: int,
    window: int,
    deltas: tuple[int, int, int],
    change: int | None,
    cold: set[int],
) -> None:
    """Random successes, declines and expiries over random participants and blocks, maybe a
    window change, maybe the in-memory hints forgotten: at every height, for every participant,
    the policy's verdict over the committed state and the weight the chain's selection table
    gives are compute_reference_health's over the stored log records, and each verdict's
    valid_until and then say exactly when and to what it moves."""
    params = make_params(initial, extra, window, deltas)
    stakes = {f"p{i}": w for i, w in enumerate(weights)}
    new = None if change is None else make_params(initial, extra, change, deltas)
    drive(make_policy_genesis(params, stakes), stakes, blocks, new, cold, exact=True)


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None)
@given(
    **SCENARIO,
    imported=st.lists(
        st.tuples(st.integers(1, 15), st.lists(st.tuples(st.integers(0, 3), st.integers(-30, 30)))),
        min_size=1,
        max_size=4,
    ),
)
def test_additive_imported_records_above_the_height_agree_with_the_reference(
    weights: list[int],
    blocks: list[list[tuple[int, str, int]]],
    initial: int,
    extra: int,
    window: int,
    deltas: tuple[int, int, int],
    change: int | None,
    cold: set[int],
    imported: list[tuple[int, list[tuple[int, int]]]],
) -> None:
    """The same with log records above the genesis height (any delta, a participant maybe
    listed twice in one): they count from their height, merged with the chain's own there."""
    params = make_params(initial, extra, window, deltas)
    stakes = {f"p{i}": w for i, w in enumerate(weights)}
    genesis = make_policy_genesis(params, stakes)
    prefix = keys.POLICY_LOG + TrinAdditive.prefix
    addresses = sorted(stakes)
    for ahead, entries in {ahead: entries for ahead, entries in imported}.items():
        record = TrinScoreRecord(
            deltas=[
                ScoreDelta(address=addresses[who % len(addresses)], delta=d) for who, d in entries
            ]
        )
        key = prefix + keys.height_key(genesis.keepersim.height + ahead)
        genesis.keepersim.policy_state.add(key=key, value=record.SerializeToString())
    new = None if change is None else make_params(initial, extra, change, deltas)
    drive(genesis, stakes, blocks, new, cold, exact=False)
