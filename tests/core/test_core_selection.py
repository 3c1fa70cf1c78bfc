"""Executor selection: weighted frequencies, k distinct executors, errors, the PoC-slot filter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from core_helpers import MODEL, Driver
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.chain import Chain
from keepersim.keeper.selection import compute_draw, compute_member_weights, compute_selection_seed
from keepersim.types.errors import NoExecutorsError, UnknownModelError
from keepersim.types.messages import Epoch, EpochGroupData, MLNodeInfo, ValidationWeight
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgRegisterParticipant

# address: (group weight, reputation, adjusted = weight * rep / 100, floor weight / 100), by hand
MEMBERS = {
    "a": (1000, 100, 1000),
    "b": (1000, 50, 500),
    "c": (2000, 26, 520),
    "d": (700, 0, 7),
    "e": (3000, 10, 300),
}
DRAWS = 20_000
CHI2_CRITICAL_DF4_P001 = 18.467  # chi-square 0.999 quantile, 4 degrees of freedom


def make_group_genesis(
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., Any],
    *,
    reputation_weighting: bool,
) -> Genesis:
    """Epoch 7's group given verbatim in genesis, with the reputations of MEMBERS."""
    participants = [make_participant(a, w) for a, (w, _, _) in MEMBERS.items()]
    genesis = make_genesis(participants=participants, height=50)
    genesis.keepersim.extension_params.reputation_weighting = reputation_weighting
    genesis.keepersim.epochs.append(Epoch(index=7, poc_start_block_height=0))
    genesis.keepersim.effective_epoch_index = 7
    weights = [
        ValidationWeight(member_address=a, weight=w, reputation=r)
        for a, (w, r, _) in MEMBERS.items()
    ]
    total = sum(w for w, _, _ in MEMBERS.values())
    for model in ("", MODEL):
        genesis.keepersim.epoch_groups.append(
            EpochGroupData(
                epoch_index=7, model_id=model, validation_weights=weights, total_weight=total
            )
        )
    return genesis


@pytest.fixture
def weighted_chain(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., Any],
) -> Chain:
    """MEMBERS' group with the fork's reputation-weighted selection turned on."""
    return make_chain(make_group_genesis(make_genesis, make_participant, reputation_weighting=True))


@pytest.mark.parametrize("policy", ["gonka", "none"])
def test_default_selection_is_by_weight_alone(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., Any],
    policy: str,
) -> None:
    """With the default params the draw follows the group weights and ignores reputation, as
    upstream's selectRandomParticipant (gonka-ai/gonka ee730031, epochgroup/random.go), under
    the default policy and under none."""
    assert not make_genesis().keepersim.extension_params.reputation_weighting
    genesis = make_group_genesis(make_genesis, make_participant, reputation_weighting=False)
    genesis.keepersim.extension_params.health_params.policy = policy
    chain = make_chain(genesis)
    assert chain.get_policy_name() == policy
    table = chain.get_selection_table(MODEL)
    raw = {a: w for a, (w, _, _) in MEMBERS.items()}
    assert table.addresses == tuple(raw) and table.total == sum(raw.values())
    counts: Counter[str] = Counter()
    for i in range(DRAWS):
        counts[chain.get_random_executor(MODEL, f"request-{i}").address] += 1
    assert chi_square(counts, raw, DRAWS) < CHI2_CRITICAL_DF4_P001, counts
    # The test has power: the reputation-adjusted weights are far off.
    adjusted = {a: adj for a, (_, _, adj) in MEMBERS.items()}
    assert chi_square(counts, adjusted, DRAWS) > 1000


def chi_square(observed: Counter[str], weights: dict[str, int], n: int) -> float:
    total = sum(weights.values())
    return sum((observed[a] - n * w / total) ** 2 / (n * w / total) for a, w in weights.items())


def test_selection_frequencies_follow_adjusted_weights(weighted_chain: Chain) -> None:
    chain = weighted_chain
    table = chain.get_selection_table(MODEL)
    adjusted = {a: adj for a, (_, _, adj) in MEMBERS.items()}
    assert table.addresses == tuple(adjusted)
    assert table.total == sum(adjusted.values()) == 2327
    counts: Counter[str] = Counter()
    for i in range(DRAWS):
        seed = compute_selection_seed(chain.chain_id, chain.height, MODEL, f"request-{i}")
        counts[compute_draw(table, seed)] += 1
    assert chi_square(counts, adjusted, DRAWS) < CHI2_CRITICAL_DF4_P001, counts
    # The same test has power: raw group weights (reputation ignored) are far off.
    raw = {a: w for a, (w, _, _) in MEMBERS.items()}
    assert chi_square(counts, raw, DRAWS) > 1000
    # GetRandomExecutor is that same draw.
    for i in range(0, DRAWS, 997):
        seed = compute_selection_seed(chain.chain_id, chain.height, MODEL, f"request-{i}")
        selection = chain.get_random_executor(MODEL, f"request-{i}")
        assert selection.address == compute_draw(table, seed)
        assert (selection.height, selection.fallback) == (50, False)


def test_draw_is_first_cumulative_above_r(weighted_chain: Chain) -> None:
    table = weighted_chain.get_selection_table(MODEL)
    assert table.cumulative == (1000, 1500, 2020, 2027, 2327)
    assert compute_member_weights(table) == [adjusted for _, _, adjusted in MEMBERS.values()]
    expected = {
        0: "a",
        999: "a",
        1000: "b",
        1499: "b",
        1500: "c",
        2019: "c",
        2020: "d",
        2026: "d",
        2027: "e",
        2326: "e",
    }
    for r, address in expected.items():
        assert compute_draw(table, r) == address
        assert compute_draw(table, r + 7 * table.total) == address


def test_select_executors_k_distinct(weighted_chain: Chain) -> None:
    chain = weighted_chain
    for i in range(50):
        three = chain.select_executors(MODEL, 3, f"r{i}")
        assert len(three) == 3 == len(set(three))
        assert set(three) <= set(MEMBERS)
    assert sorted(chain.select_executors(MODEL, 10, "all")) == sorted(MEMBERS)
    assert chain.select_executors(MODEL, 0, "none") == []
    assert chain.select_executors(MODEL, 3, "same") == chain.select_executors(MODEL, 3, "same")
    firsts = Counter(chain.select_executors(MODEL, 2, f"q{i}")[0] for i in range(2000))
    assert firsts.most_common(1)[0][0] == "a" and firsts["d"] < firsts["e"]


def test_unknown_model(chain: Chain) -> None:
    with pytest.raises(UnknownModelError, match=r"unknown model 'no-such-model' in epoch 0"):
        chain.get_random_executor("no-such-model", "r")
    with pytest.raises(UnknownModelError, match="no-such-model"):
        chain.select_executors("no-such-model", 2, "r")


def test_empty_pool(make_chain: Callable[..., Chain], make_genesis: Callable[..., Genesis]) -> None:
    chain = make_chain(make_genesis(0))
    with pytest.raises(NoExecutorsError, match=r"pool for model '' is empty \(epoch 0, height 0\)"):
        chain.get_random_executor("", "r")
    zero = make_chain(make_genesis(3, weight=0))
    with pytest.raises(NoExecutorsError, match="pool for model '' is empty"):
        zero.get_random_executor("", "r")


POC_PARTICIPANTS: dict[str, dict[str, Any]] = {
    "a": dict(models=[MODEL], timeslots=(True, True)),  # PoC slot
    "b": dict(models=[MODEL], timeslots=(True, False)),  # no PoC slot
    "c": dict(models=["other"], timeslots=(False, True)),  # slot, other model
    "d": dict(models=[MODEL], timeslots=None),  # no ML node
    "e": dict(models=[MODEL], timeslots=(True,)),  # allocation too short for slot 1
}


@pytest.fixture
def poc_driver(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., Any],
    make_test_params: Callable[..., object],
) -> Driver:
    params = make_test_params(poc=True)  # the chain's default PoC, epoch length 40
    participants = [make_participant(a, **kw) for a, kw in POC_PARTICIPANTS.items()]
    return Driver(make_chain(make_genesis(participants=participants, params=params)))


def get_poc_span(params: ModuleParams) -> int:
    """The blocks at an epoch's start that keepersim treats as PoC (stages and the delays)."""
    e = params.params.epoch_params
    return (
        e.poc_stage_duration
        + e.poc_validation_delay
        + e.poc_validation_duration
        + e.set_new_validators_delay
    )


def test_poc_phase_keeps_only_poc_slot_participants(poc_driver: Driver) -> None:
    d = poc_driver
    span = get_poc_span(d.chain.get_params())
    assert 1 < span < 40 == d.chain.get_params().params.epoch_params.epoch_length
    for height in range(0, 40 + span + 2):
        d.run_to(height)
        in_poc = height < span or 40 <= height < 40 + span
        table = d.chain.get_selection_table(MODEL)
        if in_poc:
            assert table.addresses == ("a",), height
            assert d.chain.get_selection_table("other").addresses == ("c",), height
        else:
            assert table.addresses == ("a", "b", "d", "e"), height
            assert d.chain.get_selection_table("other").addresses == ("c",), height


def test_poc_phase_empty_pool(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., Any],
    make_test_params: Callable[..., object],
) -> None:
    chain = make_chain(
        make_genesis(
            participants=[make_participant("b", timeslots=(True, False))],
            params=make_test_params(poc=True),
        )
    )
    span = get_poc_span(chain.get_params())
    Driver(chain).run_to(span - 1)
    with pytest.raises(
        NoExecutorsError, match=rf"pool for model 'm' is empty \(epoch 0, height {span - 1}\)"
    ):
        chain.get_random_executor(MODEL, "r")
    Driver(chain).run_to(span)
    assert chain.get_random_executor(MODEL, "r").address == "b"


def test_poc_filter_follows_a_registration_update_from_the_next_group(poc_driver: Driver) -> None:
    """The PoC-slot filter reads the ML nodes of the epoch group (``ValidationWeight.ml_nodes``,
    as on the chain), so a registration update counts from the next group. A query answers from
    committed state only: a chain that has served queries before gives the same table as a
    freshly opened chain over the same store."""
    d = poc_driver
    d.run_to(1)
    assert d.chain.get_selection_table(MODEL).addresses == ("a",)
    node = MLNodeInfo(node_id="b-node", timeslot_allocation=[True, True])
    d.add(2, MsgRegisterParticipant(creator="b", weight=1000, models=[MODEL], ml_nodes=[node]))
    d.run_to(2)
    backend_path = d.chain._store.backend.backend.path  # type: ignore[attr-defined]
    with d.chain.read() as k:
        nodes = k.get_participant_nodes("b")
        group = k.get_epoch_group(0, MODEL)
    assert nodes is not None and list(nodes.ml_nodes) == [node]
    assert group is not None
    assert [list(m.ml_nodes) for m in group.validation_weights if m.member_address == "b"] == [
        [MLNodeInfo(node_id="b-node", poc_weight=1000, timeslot_allocation=[True, False])]
    ]
    assert d.chain.get_selection_table(MODEL).addresses == ("a",)
    span = get_poc_span(d.chain.get_params())
    d.run_to(40)  # epoch 1's group carries b's new node: b serves through PoC
    running = [d.chain.get_selection_table(MODEL).addresses]
    d.run_to(40 + span)
    running.append(d.chain.get_selection_table(MODEL).addresses)
    d.chain.close()
    with Chain.open(backend_path) as fresh:
        assert fresh.height == 40 + span
        assert fresh.get_selection_table(MODEL).addresses == ("a", "b", "d", "e")
    assert running == [("a", "b"), ("a", "b", "d", "e")]


def test_shadow_mode_never_fails_selection_and_records_would_exclude() -> None:
    """A policy that refuses when all are out (SMG) must not refuse in shadow mode."""
    from keepersim.keeper.policies.base import Health
    from keepersim.keeper.selection import Candidate, PipelineRules, compute_selection_table

    candidates = [Candidate("a", 100), Candidate("b", 300)]
    healths = [Health(False, severity=2), Health(False, severity=1)]
    gated, shadow = (PipelineRules(100, 0, False, s) for s in (False, True))
    with pytest.raises(NoExecutorsError, match="every candidate is kept out"):
        compute_selection_table(candidates, healths, height=5, model="m", rules=gated)
    table = compute_selection_table(candidates, healths, height=5, model="m", rules=shadow)
    assert table.shadow_excluded == ("a", "b")
    assert table.excluded == ()
    assert table.addresses == ("a", "b") and table.total == 400
    assert not table.fallback


def test_admitted_candidate_is_never_rounded_away() -> None:
    """weight * factor < 1 keeps the candidate at weight 1; a zero factor keeps it out."""
    from keepersim.keeper.policies.base import Health
    from keepersim.keeper.selection import Candidate, PipelineRules, compute_selection_table

    candidates = [Candidate("a", 3), Candidate("b", 100), Candidate("c", 50)]
    healths = [Health(True, factor_num=1, factor_den=8), Health(True), Health(True, factor_num=0)]
    rules = PipelineRules(cap_pct=100, panic_pct=0, fallback_allowed=True, shadow=False)
    table = compute_selection_table(candidates, healths, height=1, model="m", rules=rules)
    assert table.addresses == ("a", "b")
    assert table.cumulative == (1, 101)


def test_incremental_table_equals_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """IncrementalTable, verdict by verdict, gives the reference's table (or its error) under
    every cap / panic / fallback / shadow setting, on both its gate-only and its reference path."""
    import dataclasses
    import random

    from keepersim.keeper import selection
    from keepersim.keeper.policies.base import Health
    from keepersim.keeper.selection import Candidate, IncrementalTable, PipelineRules

    reference = selection.compute_selection_table
    calls = Counter[str]()

    def counted(*args: Any, **kwargs: Any) -> selection.SelectionTable:
        calls["reference"] += 1
        return reference(*args, **kwargs)

    monkeypatch.setattr(selection, "compute_selection_table", counted)

    def get_health(rng: random.Random, out_share: float) -> Health:
        if rng.random() < out_share:
            return Health(False, severity=rng.randrange(4), state="out")
        return Health(
            True,
            factor_num=rng.choice((0, 1, 1, 1, 2, 5)) if rng.random() < 0.5 else 1,
            factor_den=rng.choice((1, 1, 2, 8, 1000)),
            severity=rng.randrange(4),
        )

    def get_outcome(fn: Any) -> tuple[Any, ...]:
        try:
            return dataclasses.astuple(fn())
        except NoExecutorsError as exc:
            return ("error", str(exc))

    rng = random.Random(7)
    for case in range(120):
        n = rng.choice((1, 2, 5, 20))
        out_share = rng.choice((0.0, 0.05, 0.3, 0.9))
        candidates = [Candidate(f"p{i:02d}", rng.choice((1, 3, 100, 5000))) for i in range(n)]
        healths = [get_health(rng, out_share) for _ in candidates]
        state = IncrementalTable(candidates, healths)
        for step in range(30):
            for _ in range(rng.randrange(3)):
                i = rng.randrange(n)
                healths[i] = get_health(rng, out_share)
                state.process_health(i, healths[i])
            rules = PipelineRules(
                cap_pct=rng.choice((100, 50, 10, 0)),
                panic_pct=rng.choice((0, 0, 30, 80)),
                fallback_allowed=rng.random() < 0.7,
                shadow=rng.random() < 0.3,
            )
            settings: dict[str, Any] = dict(height=step, model="m", rules=rules)
            calls["tables"] += 1
            before = calls["reference"]
            got = get_outcome(lambda: state.compute_table(**settings))  # noqa: B023
            calls["fast"] += calls["reference"] == before
            assert got == get_outcome(lambda: reference(candidates, healths, **settings)), (  # noqa: B023
                case,
                step,
            )
    assert 0 < calls["fast"] < calls["tables"], calls


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 10_000), st.booleans(), st.integers(0, 3), st.integers(0, 2)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 100),
    st.booleans(),
)
def test_kept_out_and_member_weights_read_the_table(
    rows: list[tuple[int, bool, int, int]], cap_pct: int, shadow: bool
) -> None:
    """get_kept_out is whom the table leaves out (or in shadow would); compute_member_weights
    gives back the weights whose running sums are the table's."""
    from itertools import accumulate

    from keepersim.keeper.policies.base import Health
    from keepersim.keeper.selection import (
        Candidate,
        PipelineRules,
        compute_member_weights,
        compute_selection_table,
        get_kept_out,
    )

    candidates = [Candidate(f"p{i}", w) for i, (w, _, _, _) in enumerate(rows)]
    healths = [Health(ok, factor_num=num, factor_den=2, severity=sev) for _, ok, sev, num in rows]
    rules = PipelineRules(cap_pct=cap_pct, panic_pct=0, fallback_allowed=True, shadow=shadow)
    try:
        table = compute_selection_table(candidates, healths, height=1, model="m", rules=rules)
    except NoExecutorsError:
        return  # every admitted weight 0
    kept = get_kept_out(table)
    assert set(kept) == set(table.excluded) | set(table.shadow_excluded)
    assert kept == (table.shadow_excluded if shadow else table.excluded)
    if not shadow:  # the kept out are not drawn
        assert not set(kept) & set(table.addresses)
    weights = compute_member_weights(table)
    assert len(weights) == len(table.addresses) and all(w > 0 for w in weights)
    assert tuple(accumulate(weights)) == table.cumulative
    assert sum(weights) == table.total
