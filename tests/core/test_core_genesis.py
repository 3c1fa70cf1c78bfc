"""Genesis: export -> JSON -> import into a fresh store -> export gives the same JSON and app hash,
and the imported chain goes on exactly like the original."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from core_helpers import GONKA_QUEUE, GONKA_STATE, MODEL, Driver

from keepersim.chain import Chain
from keepersim.keeper.inferences import is_finish_processed, is_start_processed
from keepersim.module.genesis import genesis_from_json, genesis_to_json
from keepersim.types.errors import NoExecutorsError
from keepersim.types.messages import (
    INACTIVE,
    STARTED,
    MsgFinishInference,
    MsgUpdateParams,
    Params,
)
from keepersim.types.params import GOV_AUTHORITY
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.health_pb2 import EXCLUDED, PROBE
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)


@pytest.fixture
def lived_in(make_driver: Callable[..., Driver], breaker_params: ModuleParams) -> Driver:
    """A chain 45 blocks in: a settled epoch, breaker entries in every state, SPRT exclusions,
    inferences in flight, a finish that came before its start, a late registration."""
    breaker_params.params.epoch_params.epoch_length = 30
    breaker_params.extension_params.sprt_enabled = True
    breaker_params.extension_params.cb_initial_cooldown_blocks = 10
    d = make_driver(breaker_params, n=5)
    d.success("p0", 3, 4)
    d.miss("p3", 12)
    d.add(20, MsgRegisterParticipant(creator="late", weight=500, models=[MODEL]))
    d.success("p2", 32, 3)
    d.miss("p2", 33, 4)  # excluded at 33, PROBE at 43
    d.success("p1", 37, 3)
    d.miss("p1", 38, 4)  # excluded at 38, cooldown ends at 48
    for h in range(38, 44):
        d.miss("p4", h)  # six straight misses: SPRT INACTIVE at 43
    d.miss("p3", 49, 2)  # in flight at 45
    d.add(44, MsgFinishInference(inference_id="early-finish", executed_by="p0"))
    d.run_to(45)
    return d


def test_lived_in_state_has_everything(lived_in: Driver) -> None:
    d = lived_in
    assert d.entry("p1").state == EXCLUDED and d.entry("p2").state == PROBE  # type: ignore[union-attr]
    assert d.participant("p4").status == INACTIVE
    genesis = d.chain.export_genesis()
    ext = genesis.keepersim
    assert ext.height == 45 and ext.effective_epoch_index == 1
    assert len(ext.epoch_performance_summaries) == 6  # epoch 0: p0..p4 and late
    assert [x.address for x in ext.excluded_participants] == ["p4"]
    assert [(x.reason, x.exclusion_block_height) for x in ext.excluded_participants] == [
        ("downtime", 43)
    ]
    in_flight = {i.inference_id for i in ext.inferences if i.status == STARTED}
    assert len(in_flight) == 2
    assert {t.inference_id for t in ext.inference_timeouts} == in_flight
    # The finish that came before its start: executed, never assigned (upstream's rule).
    early = [i for i in ext.inferences if is_finish_processed(i) and not is_start_processed(i)]
    assert [i.inference_id for i in early] == ["early-finish"]
    # The late registration's models reach the next epoch's groups.
    assert [n.address for n in ext.participant_nodes] == ["late", "p0", "p1", "p2", "p3", "p4"]
    groups = {(g.epoch_index, g.model_id): g for g in ext.epoch_groups}
    assert "late" in [m.member_address for m in groups[(1, MODEL)].validation_weights]
    assert "late" not in [m.member_address for m in groups[(0, MODEL)].validation_weights]
    keys = [e.key for e in genesis.keepersim.policy_state]
    assert GONKA_STATE + b"p1" in keys and any(k.startswith(GONKA_QUEUE) for k in keys)


@pytest.mark.parametrize("memory", [False, True], ids=["leveldb", "memory"])
def test_export_import_export_roundtrip(
    lived_in: Driver, make_chain: Callable[..., Chain], memory: bool
) -> None:
    original = lived_in.chain
    text = genesis_to_json(original.export_genesis())
    document = json.loads(text)
    # The chain's genesis document shape: the module's part in app_state.inference.
    assert document["chain_id"] == original.chain_id and document["initial_height"] == "46"
    assert set(document["app_state"]) == {"inference"}
    assert len(document["app_state"]["inference"]["participant_list"]) == 6
    assert "params" in document["app_state"]["inference"]
    assert document["keepersim"]["height"] == "45"
    imported = make_chain(genesis_from_json(text, "export.json"), memory=memory)
    assert imported.height == original.height == 45
    assert imported.app_hash == original.app_hash
    assert genesis_to_json(imported.export_genesis()) == text
    assert imported._store.verify_app_hash()
    for model in ("", MODEL):
        assert imported.get_selection_table(model) == original.get_selection_table(model)
    for a in ("p0", "p1", "p2", "p3", "p4", "late"):
        assert imported.get_policy_state(a) == original.get_policy_state(a)
    # Both go on identically: same events and app hash at every later height (expiries,
    # breaker promotion from the queue, the epoch boundary at 60 and the SPRT reset).
    twin = Driver(imported)
    for driver in (lived_in, twin):
        driver._seq = 100
        driver.success("p2", 50)
        driver.miss("p1", 55)
        driver.success("late", 61)
    lived_in.run_to(70)
    twin.run_to(70)
    for h in range(46, 71):
        assert twin.results[h].events == lived_in.results[h].events, h
        assert twin.results[h].app_hash == lived_in.results[h].app_hash, h
    assert any(r.events for h, r in twin.results.items() if h in (48, 60))


def test_roundtrip_with_params_pending(chain: Chain, make_chain: Callable[..., Chain]) -> None:
    params = chain.get_params()
    params.params.validation_params.expiration_blocks = 7
    params.extension_params.cb_min_samples = 9
    assert not chain.deliver_block(
        [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params),
            MsgUpdateExtensionParams(
                authority=GOV_AUTHORITY, extension_params=params.extension_params
            ),
        ]
    ).get_failed()
    exported = chain.export_genesis()
    assert exported.keepersim.HasField("pending_params")
    assert exported.keepersim.HasField("pending_extension_params")
    imported = make_chain(genesis_from_json(genesis_to_json(exported)))
    assert imported.app_hash == chain.app_hash
    imported.deliver_block([])
    assert imported.get_params() == params


def test_genesis_json_errors_name_the_source() -> None:
    from keepersim.types.errors import GenesisError

    with pytest.raises(GenesisError, match=r"g\.json: line 1 column 2"):
        genesis_from_json("{x", "g.json")
    with pytest.raises(GenesisError, match=r"g\.json: expected a genesis document"):
        genesis_from_json('{"no_such_field": 1}', "g.json")
    with pytest.raises(GenesisError, match=r"g\.json: app_state\.inference.*no_such_field"):
        genesis_from_json('{"app_state": {"inference": {"no_such_field": 1}}}', "g.json")
    with pytest.raises(GenesisError, match=r"g\.json: keepersim: .*no_such_field"):
        genesis_from_json(
            '{"app_state": {"inference": {}}, "keepersim": {"no_such_field": 1}}', "g.json"
        )


def test_chain_module_genesis_without_extension(make_chain: Callable[..., Chain]) -> None:
    """A bare module genesis as the chain prints it (no keepersim part): participants serve
    every model of ``model_list``, keepersim's extension params are its defaults, and the first
    groups form from that."""
    from keepersim.types.params import get_default_params

    defaults = get_default_params()
    defaults.params.epoch_params.poc_stage_duration = 1
    chain_only = make_module_genesis(defaults.params)
    document = json.loads(genesis_to_json(chain_only))
    del document["keepersim"]
    module = document["app_state"]["inference"]
    module["model_list"] = [{"id": "b-model"}, {"id": MODEL}]
    genesis = genesis_from_json(json.dumps(module), "module.json")
    assert genesis.inference.participant_list == chain_only.inference.participant_list
    assert not genesis.keepersim.HasField("extension_params")
    genesis.chain_id = "module-only"
    chain = make_chain(genesis)
    assert chain.get_params() == defaults
    with chain.read() as k:
        nodes = [(n.address, list(n.models)) for n in k.iterate_participant_nodes()]
        parent = k.get_epoch_group(0, "")
    assert nodes == [("p0", ["b-model", MODEL]), ("p1", ["b-model", MODEL])]
    assert parent is not None and list(parent.sub_group_models) == ["b-model", MODEL]
    # Without registered ML nodes nobody has a PoC slot: the PoC blocks have no executor.
    e = defaults.params.epoch_params
    span = (
        e.poc_stage_duration
        + e.poc_validation_delay
        + e.poc_validation_duration
        + e.set_new_validators_delay
    )
    with pytest.raises(NoExecutorsError, match="pool for model 'm' is empty"):
        chain.get_selection_table(MODEL)
    Driver(chain).run_to(span)
    assert chain.get_selection_table(MODEL).addresses == ("p0", "p1")


def make_module_genesis(params: Params) -> Genesis:
    """Two participants of weight 10 and ``params``: the chain's part only."""
    genesis = Genesis(chain_id="c")
    genesis.inference.params.CopyFrom(params)
    for address in ("p0", "p1"):
        genesis.inference.participant_list.add(address=address, weight=10)
    return genesis


def test_a_bad_genesis_document_is_one_error_naming_the_part() -> None:
    """A bare module genesis may carry the document's keys beside it; a malformed extension is
    named as such (not as an unknown field)."""
    from keepersim.module.genesis import genesis_from_json
    from keepersim.types.errors import GenesisError

    bare = genesis_from_json('{"params": {}, "chain_id": "c", "initial_height": "5"}', "g.json")
    assert (bare.chain_id, bare.keepersim.height) == ("c", 4)
    with pytest.raises(GenesisError, match=r"g\.json: keepersim: expected an object"):
        genesis_from_json('{"app_state": {"inference": {}}, "keepersim": "x"}', "g.json")
