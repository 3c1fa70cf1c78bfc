"""Epoch groups on the chain's shape, keepersim's per-epoch declines, and selection by weight.

The models and ML nodes a participant registered (keepersim.v1.ParticipantNodes) reach the epoch
groups when they form (``sub_group_models``, ``ValidationWeight.ml_nodes``); a group is effective
from the block after it formed and records its last block when its epoch settles. Declines count
per (epoch, participant) in keepersim's own EpochDeclines, never as a miss.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from core_helpers import MODEL, Driver

from keepersim.chain import Chain
from keepersim.keeper.inferences import is_declined
from keepersim.types.events import EpochSettled, InferenceDeclined, InferenceExpired
from keepersim.types.messages import STARTED, EpochGroupData, MLNodeInfo, MsgFinishInference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference, MsgRegisterParticipant

OTHER = "x"
EPOCH = 10


@pytest.fixture
def epoch_params(make_test_params: Callable[..., ModuleParams]) -> ModuleParams:
    params = make_test_params()
    params.params.epoch_params.epoch_length = EPOCH
    params.params.validation_params.expiration_blocks = 4
    params.extension_params.health_params.policy = "none"
    params.extension_params.sprt_enabled = False
    return params


@pytest.fixture
def groups_driver(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Any],
    make_participant: Callable[..., Any],
    epoch_params: ModuleParams,
) -> Driver:
    """p0 serves m, p1 m and x, p2 x without an ML node, p3 has weight 0 (in no group)."""
    participants = [
        make_participant("p0", 1000, models=[MODEL]),
        make_participant("p1", 2000, models=[MODEL, OTHER], timeslots=(True, False)),
        make_participant("p2", 3000, models=[OTHER], timeslots=None),
        make_participant("p3", 0, models=[MODEL]),
    ]
    return Driver(make_chain(make_genesis(participants=participants, params=epoch_params)))


def get_groups(chain: Chain, epoch: int) -> dict[str, EpochGroupData]:
    with chain.read() as k:
        return {g.model_id: g for g in k.iterate_epoch_groups() if g.epoch_index == epoch}


def get_members(group: EpochGroupData) -> dict[str, tuple[int, list[MLNodeInfo]]]:
    return {m.member_address: (m.weight, list(m.ml_nodes)) for m in group.validation_weights}


def test_registered_models_and_nodes_reach_the_groups(groups_driver: Driver) -> None:
    chain = groups_driver.chain
    groups = get_groups(chain, 0)
    assert sorted(groups) == ["", MODEL, OTHER]
    parent = groups[""]
    assert list(parent.sub_group_models) == [MODEL, OTHER]
    assert (parent.total_weight, groups[MODEL].total_weight, groups[OTHER].total_weight) == (
        6000,
        3000,
        5000,
    )
    assert all(not g.sub_group_models for model, g in groups.items() if model)
    with chain.read() as k:
        nodes = {a: list(k.get_participant_nodes(a).ml_nodes) for a in ("p0", "p1")}  # type: ignore[union-attr]
    assert get_members(groups[MODEL]) == {"p0": (1000, nodes["p0"]), "p1": (2000, nodes["p1"])}
    assert get_members(groups[OTHER]) == {"p1": (2000, nodes["p1"]), "p2": (3000, [])}
    assert get_members(parent) == {
        "p0": (1000, nodes["p0"]),
        "p1": (2000, nodes["p1"]),
        "p2": (3000, []),
    }
    assert nodes["p1"] == [
        MLNodeInfo(node_id="p1-node", poc_weight=2000, timeslot_allocation=[True, False])
    ]
    # Selection serves each model from its own sub-group (after the PoC blocks, where only
    # members with a PoC slot serve).
    assert chain.get_selection_table(MODEL).addresses == ("p0",)
    groups_driver.run_to(2)
    assert chain.get_selection_table(MODEL).addresses == ("p0", "p1")
    assert chain.get_selection_table(OTHER).addresses == ("p1", "p2")


def test_group_heights_effective_and_last_block(groups_driver: Driver) -> None:
    d = groups_driver
    for model, group in get_groups(d.chain, 0).items():
        assert (group.poc_start_block_height, group.effective_block_height) == (0, 1), model
        assert group.last_block_height == 0, model
    d.run_to(EPOCH - 1)
    assert all(g.last_block_height == 0 for g in get_groups(d.chain, 0).values())
    d.run_to(EPOCH)
    settled = [e for e in d.results[EPOCH].events if isinstance(e, EpochSettled)]
    assert settled == [EpochSettled(EPOCH, 0, 1, 4)]
    old, new = get_groups(d.chain, 0), get_groups(d.chain, 1)
    assert sorted(old) == sorted(new) == ["", MODEL, OTHER]
    for model in old:
        assert old[model].last_block_height == EPOCH, model
        assert (new[model].poc_start_block_height, new[model].effective_block_height) == (
            EPOCH,
            EPOCH + 1,
        )
        assert new[model].last_block_height == 0, model
    d.run_to(2 * EPOCH)
    assert all(g.last_block_height == 2 * EPOCH for g in get_groups(d.chain, 1).values())


def test_genesis_height_sets_the_first_groups_effective_height(
    make_chain: Callable[..., Chain], make_genesis: Callable[..., Any], epoch_params: ModuleParams
) -> None:
    chain = make_chain(make_genesis(params=epoch_params, height=55))
    for group in get_groups(chain, 0).values():
        assert (group.poc_start_block_height, group.effective_block_height) == (55, 56)


def test_a_registration_counts_from_the_next_group(groups_driver: Driver) -> None:
    d = groups_driver
    node = MLNodeInfo(node_id="p2-new", poc_weight=7, timeslot_allocation=[True, True])
    d.add(3, MsgRegisterParticipant(creator="p2", weight=500, models=[MODEL], ml_nodes=[node]))
    d.add(4, MsgRegisterParticipant(creator="late", weight=800, models=[OTHER]))
    d.run_to(EPOCH - 1)
    # The current groups are as they formed: p2 serves x with weight 3000, late is in none.
    groups = get_groups(d.chain, 0)
    assert get_members(groups[OTHER])["p2"] == (3000, [])
    assert "p2" not in get_members(groups[MODEL])
    assert "late" not in get_members(groups[""])
    d.run_to(EPOCH)
    groups = get_groups(d.chain, 1)
    assert get_members(groups[MODEL]) == {
        "p0": get_members(get_groups(d.chain, 0)[MODEL])["p0"],
        "p1": get_members(get_groups(d.chain, 0)[MODEL])["p1"],
        "p2": (500, [node]),
    }
    assert get_members(groups[OTHER]) == {"late": (800, []), "p1": get_members(groups[MODEL])["p1"]}
    assert list(groups[""].sub_group_models) == [MODEL, OTHER]


def test_declines_count_per_epoch_and_never_as_a_miss(groups_driver: Driver) -> None:
    d = groups_driver
    first = d.decline("p0", 2)
    d.decline("p0", 3)
    d.decline("p1", 3)
    d.run_to(3)
    inference = d.chain.get_inference(first)
    assert inference is not None and is_declined(inference)
    assert (inference.status, inference.end_block_height, inference.executed_by) == (
        STARTED,
        2,
        "",
    )
    assert [e for e in d.results[2].events if isinstance(e, InferenceDeclined)] == [
        InferenceDeclined(2, first, "p0", "busy")
    ]
    with d.chain.read() as k:
        assert (first_timeout := (2 + 4, first)) in list(k.iterate_timeouts())
        assert (k.get_declines(0, "p0"), k.get_declines(0, "p1"), k.get_declines(0, "p2")) == (
            2,
            1,
            0,
        )
    # A declined inference can neither finish nor be declined again.
    result = d.chain.deliver_block(
        [
            MsgFinishInference(inference_id=first, executed_by="p0"),
            MsgDeclineInference(inference_id=first, creator="p0"),
        ]
    )
    assert [r.error for r in result.tx_results] == [
        f"InferenceStateError: inference {first!r} cannot finish: declined",
        f"InferenceStateError: inference {first!r} is not in progress",
    ]
    # Its timeout comes and goes without a miss.
    d.run_to(8)
    assert not any(isinstance(e, InferenceExpired) for r in d.results.values() for e in r.events)
    with d.chain.read() as k:
        assert first_timeout not in list(k.iterate_timeouts())
    stats = d.participant("p0").current_epoch_stats
    assert (stats.inference_count, stats.missed_requests) == (0, 0)
    # A new epoch counts from 0; the settled epoch's count stays.
    d.decline("p0", EPOCH + 2)
    d.run_to(EPOCH + 2)
    with d.chain.read() as k:
        assert (k.get_declines(0, "p0"), k.get_declines(1, "p0")) == (2, 1)
        assert list(k.iterate_declines()) == [
            EpochDeclines(epoch_index=0, address="p0", declined_requests=2),
            EpochDeclines(epoch_index=0, address="p1", declined_requests=1),
            EpochDeclines(epoch_index=1, address="p0", declined_requests=1),
        ]
    assert list(d.chain.export_genesis().keepersim.epoch_declines) == [
        EpochDeclines(epoch_index=0, address="p0", declined_requests=2),
        EpochDeclines(epoch_index=0, address="p1", declined_requests=1),
        EpochDeclines(epoch_index=1, address="p0", declined_requests=1),
    ]


def test_none_policy_traffic_follows_the_weights(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Any],
    make_participant: Callable[..., Any],
    make_test_params: Callable[..., ModuleParams],
) -> None:
    """Default params with the ``none`` policy: the executors of real traffic (starts assigned
    by GetRandomExecutor, over many blocks) are drawn by group weight alone. Each participant's
    share is within 4.5 standard errors of its weight share (sqrt(p (1 - p) / n) for n starts:
    a false alarm below 1e-5 per participant), and is far from what reputation would give."""
    params = make_test_params()
    params.extension_params.health_params.policy = "none"
    assert not params.extension_params.reputation_weighting  # the default
    weights = {"p0": 500, "p1": 1000, "p2": 1500, "p3": 3000, "p4": 4000}
    participants = [make_participant(a, w) for a, w in weights.items()]
    d = Driver(make_chain(make_genesis(participants=participants, params=params)))
    assigned: Counter[str] = Counter()
    per_block = 40
    blocks = 100
    for h in range(1, blocks + 1):
        for j in range(per_block):
            address = d.chain.get_random_executor(MODEL, f"req-{h}-{j}").address
            assigned[address] += 1
            d.success(address, h)
        d.run_to(h)
    n = per_block * blocks
    assert sum(assigned.values()) == n
    total = sum(weights.values())
    for address, weight in weights.items():
        p = weight / total
        tolerance = 4.5 * math.sqrt(p * (1 - p) / n)
        share = assigned[address] / n
        assert abs(share - p) <= tolerance, (address, share, p, tolerance)
    with d.chain.read() as k:
        started = Counter(i.assigned_to for i in k.iterate_inferences())
    assert started == assigned
    # Power: a 10% shift of p4's share would be far outside the tolerance.
    p4 = weights["p4"] / total
    assert 0.1 * p4 > 4.5 * math.sqrt(p4 * (1 - p4) / n)
