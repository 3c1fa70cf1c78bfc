"""REST routes of ``keepersim serve``: the chain's JSON shapes, pagination, errors, keepersim's
own routes, posted blocks, metrics exposition, fault injection and the CLI wiring.

Loopback only: uvicorn serves on 127.0.0.1 with a free port in a background thread.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from keepersim.chain import Chain
from keepersim.keeper.selection import compute_draw, compute_selection_seed
from keepersim.server.app import HEIGHT_HEADER, BackgroundServer, create_app, parse_block_json
from keepersim.server.faults import (
    FaultInjector,
    FaultSpecError,
    parse_fault_spec,
)
from keepersim.types.chain_json import compute_chain_json, parse_chain_json
from keepersim.types.messages import (
    EpochGroupData,
    Inference,
    MLNodeInfo,
    MsgFinishInference,
    MsgStartInference,
    Participant,
)
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

P = "/productscience/inference/inference"
N_PARTICIPANTS = 7
N_INFERENCES = 23


def make_module_genesis(n: int) -> Genesis:
    """``n`` participants p0.. of weight 1000 registering model "m" and one ML node; code
    defaults with the shortest PoC the chain accepts (1 + 1 blocks)."""
    params = get_default_params()
    epoch = params.params.epoch_params
    epoch.poc_stage_duration = epoch.poc_validation_duration = 1
    epoch.poc_exchange_duration = epoch.poc_validation_delay = 0
    epoch.set_new_validators_delay = 0
    genesis = Genesis(chain_id="keepersim-test")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for i in range(n):
        genesis.inference.participant_list.append(Participant(address=f"p{i}", weight=1000))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(
                address=f"p{i}",
                models=["m"],
                ml_nodes=[
                    MLNodeInfo(
                        node_id=f"p{i}-node", poc_weight=1000, timeslot_allocation=[True, True]
                    )
                ],
            )
        )
    return genesis


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Chain, httpx.Client]]:
    chain = Chain.open(memory=True, genesis=make_module_genesis(N_PARTICIPANTS))
    # 23 inferences over 3 blocks; a few finished
    for block in range(3):
        txs: list[Any] = [
            MsgStartInference(
                creator="req",
                inference_id=f"inf-{block}-{i:02d}",
                model="m",
                requested_by="req",
                assigned_to=f"p{i % N_PARTICIPANTS}",
            )
            for i in range(8 if block < 2 else N_INFERENCES - 16)
        ]
        if block == 2:
            txs.append(
                MsgFinishInference(
                    creator="p0", inference_id="inf-0-00", executed_by="p0", model="m"
                )
            )
        chain.deliver_block(txs)
    app = create_app(chain)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield chain, client
    chain.close()


def get(client: httpx.Client, path: str, **params: Any) -> httpx.Response:
    return client.get(path, params=params or None)


def test_participant_shapes(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    r = get(client, f"{P}/participant/p0")
    assert r.status_code == 200
    assert r.headers[HEIGHT_HEADER] == str(chain.height)
    participant = chain.get_participant("p0")
    assert participant is not None
    assert r.json() == {"participant": compute_chain_json(participant)}
    body = r.json()["participant"]
    # the chain's JSON: proto names in declaration order, defaults present, uint64 as strings,
    # enums as names
    assert list(body) == [f.name for f in Participant.DESCRIPTOR.fields]
    assert body["status"] == "ACTIVE"
    assert body["join_height"] == "0"
    assert body["current_epoch_stats"]["inference_count"] == "1"
    assert body["current_epoch_stats"]["invalidLLR"] is None  # unset messages print null
    assert parse_chain_json(body, Participant, where="test") == participant


def test_unset_messages_print_null() -> None:
    """Before any block a participant has no epoch stats: the gateway prints ``null`` (gogo's nil
    pointer), where protobuf's MessageToDict would leave the key out."""
    chain = Chain.open(memory=True, genesis=make_module_genesis(2))
    try:
        with (
            BackgroundServer(create_app(chain)) as server,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            body = get(client, f"{P}/participant/p0").json()["participant"]
            listed = get(client, f"{P}/participant").json()["participant"]
            info = get(client, f"{P}/epoch_info").json()
    finally:
        chain.close()
    assert "current_epoch_stats" in body and body["current_epoch_stats"] is None
    assert [p["current_epoch_stats"] for p in listed] == [None, None]
    assert list(info) == [
        "block_height",
        "params",
        "latest_epoch",
        "is_confirmation_poc_active",
        "active_confirmation_poc_event",
    ]
    assert info["active_confirmation_poc_event"] is None


def test_inference_shapes(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    r = get(client, f"{P}/inference/inference-missing")
    assert r.status_code == 404
    assert r.json()["code"] == 5 and "inference-missing" in r.json()["message"]
    r = get(client, f"{P}/inference/inf-0-00")
    assert r.status_code == 200
    body = r.json()["inference"]
    assert body["status"] == "FINISHED"
    assert body["start_block_height"] == "1" and body["end_block_height"] == "3"
    assert list(body) == [f.name for f in Inference.DESCRIPTOR.fields]
    assert parse_chain_json(body, Inference, where="test") == chain.get_inference("inf-0-00")


@pytest.mark.parametrize("limit", [1, 3, 10, 100])
def test_inference_pagination_covers_all_once(
    served: tuple[Chain, httpx.Client], limit: int
) -> None:
    _, client = served
    seen: list[str] = []
    key: str | None = None
    for page in range(100):  # bounded
        params: dict[str, Any] = {"pagination.limit": limit}
        if key is not None:
            params["pagination.key"] = key
        else:
            params["pagination.count_total"] = "true"
        r = client.get(f"{P}/inference", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"inference", "pagination"}
        items = body["inference"]
        assert 1 <= len(items) <= limit
        if page == 0:
            assert body["pagination"]["total"] == str(N_INFERENCES)
        seen.extend(i["inference_id"] for i in items)
        key = body["pagination"]["next_key"]
        if key is None:
            break
        assert base64.b64decode(key).decode() > items[-1]["inference_id"]
    assert seen == sorted(seen)
    assert len(seen) == len(set(seen)) == N_INFERENCES


def test_participant_pagination(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    r = get(client, f"{P}/participant", **{"pagination.limit": 4})
    body = r.json()
    assert [p["address"] for p in body["participant"]] == ["p0", "p1", "p2", "p3"]
    assert body["pagination"]["total"] == "0"  # counted only with count_total, as in Cosmos
    assert body["block_height"] == str(chain.height)
    assert base64.b64decode(body["pagination"]["next_key"]) == b"p4"
    r = get(client, f"{P}/participant", **{"pagination.key": body["pagination"]["next_key"]})
    body = r.json()
    assert [p["address"] for p in body["participant"]] == ["p4", "p5", "p6"]
    assert body["pagination"] == {"next_key": None, "total": "0"}
    # offset paging and URL-safe / unencoded keys
    r = get(client, f"{P}/participant", **{"pagination.offset": 5, "pagination.limit": 1})
    assert [p["address"] for p in r.json()["participant"]] == ["p5"]
    r = get(client, f"{P}/participant", **{"pagination.key": "cDY"})  # "p6", unpadded
    assert [p["address"] for p in r.json()["participant"]] == ["p6"]


@pytest.mark.parametrize(
    ("path", "params", "names"),
    [
        (f"{P}/participant", {"pagination.limit": "abc"}, "pagination.limit"),
        (f"{P}/participant", {"pagination.limit": "0"}, "pagination.limit"),
        (f"{P}/participant", {"pagination.limit": "5000"}, "pagination.limit"),
        (f"{P}/inference", {"pagination.key": "%%%"}, "pagination.key"),
        (f"{P}/inference", {"pagination.offset": "-1"}, "pagination.offset"),
        (
            f"{P}/inference",
            {"pagination.key": "cDY=", "pagination.offset": "2"},
            "pagination.offset",
        ),
        (f"{P}/inference", {"pagination.count_total": "maybe"}, "pagination.count_total"),
        (f"{P}/inference", {"pagination.reverse": "true"}, "pagination.reverse"),
        (f"{P}/epoch_performance_summary/x", {}, "epoch_index"),
        (f"{P}/epoch_group_data/-3", {}, "epoch_index"),
        ("/keepersim/v1/reputation/1.5", {}, "epoch_index"),
        ("/keepersim/v1/declines/x", {}, "epoch_index"),
    ],
)
def test_bad_parameters_are_400_naming_them(
    served: tuple[Chain, httpx.Client], path: str, params: dict[str, str], names: str
) -> None:
    _, client = served
    r = client.get(path, params=params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == 3 and body["details"] == []
    assert names in body["message"]


@pytest.mark.parametrize(
    "path",
    [
        f"{P}/participant/nobody",
        f"{P}/inference/nothing",
        f"{P}/epoch_performance_summary/9",
        f"{P}/epoch_group_data/9",
        f"{P}/get_random_executor?model=no-such-model",
        "/keepersim/v1/policy/nobody",
        "/keepersim/v1/reputation/9",
        "/keepersim/v1/participant_nodes/nobody",
        "/keepersim/v1/declines/9",
        "/keepersim/v1/selection?model=no-such-model",
        "/no/such/route",
    ],
)
def test_unknown_ids_are_404(served: tuple[Chain, httpx.Client], path: str) -> None:
    _, client = served
    r = client.get(path)
    assert r.status_code == 404, r.text
    assert r.json()["code"] == 5 and r.json()["message"]


def test_get_random_executor(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    r = get(client, f"{P}/get_random_executor", model="m", request_id="abc")
    assert r.status_code == 200
    assert set(r.json()) == {"executor"}
    height = int(r.headers[HEIGHT_HEADER])
    table = chain.get_selection_table("m")
    assert height == table.height == chain.height
    expected = compute_draw(table, compute_selection_seed(chain.chain_id, height, "m", "abc"))
    assert r.json()["executor"]["address"] == expected
    assert expected == chain.get_random_executor("m", "abc").address
    assert r.headers["X-Keepersim-Request-Id"] == "abc"
    # without a request id the server numbers requests: different seeds
    ids = {
        get(client, f"{P}/get_random_executor", model="m").headers["X-Keepersim-Request-Id"]
        for _ in range(5)
    }
    assert len(ids) == 5 and all(i.startswith("srv-") for i in ids)
    # the whole epoch group when no model is given
    assert get(client, f"{P}/get_random_executor").status_code == 200


def test_summaries_params_epoch_info_and_group(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    r = get(client, f"{P}/epoch_performance_summary/0")
    assert r.status_code == 200 and r.json() == {"epochPerformanceSummary": []}
    r = get(client, f"{P}/params")
    params = chain.get_params()
    # the chain's QueryParamsResponse: the chain's Params only; keepersim's extension params
    # are on keepersim's own route
    assert r.json() == {"params": compute_chain_json(params.params)}
    assert "health_params" not in r.json()["params"]
    r = get(client, "/keepersim/v1/params")
    assert r.json() == {
        "height": chain.height,
        "extension_params": compute_chain_json(params.extension_params),
    }
    assert r.json()["extension_params"]["health_params"]["policy"] == "gonka"
    info = get(client, f"{P}/epoch_info").json()
    assert info["block_height"] == str(chain.height)
    assert info["latest_epoch"] == {"index": "0", "poc_start_block_height": "0"}
    assert info["params"]["epoch_params"]["epoch_length"] == "40"
    group = get(client, f"{P}/epoch_group_data/0").json()["epoch_group_data"]
    assert list(group) == [f.name for f in EpochGroupData.DESCRIPTOR.fields]
    assert [m["member_address"] for m in group["validation_weights"]] == [
        f"p{i}" for i in range(N_PARTICIPANTS)
    ]
    # formed at genesis (height 0), effective from block 1, not settled yet
    assert group["effective_block_height"] == "1" and group["last_block_height"] == "0"
    assert group["sub_group_models"] == ["m"]
    sub = get(client, f"{P}/epoch_group_data/0", model_id="m")
    assert sub.status_code == 200
    weights = sub.json()["epoch_group_data"]["validation_weights"]
    assert [m["ml_nodes"][0]["node_id"] for m in weights] == [
        f"p{i}-node" for i in range(N_PARTICIPANTS)
    ]
    assert get(client, f"{P}/excluded_participants/0").json() == {"items": []}
    node = get(client, "/cosmos/base/tendermint/v1beta1/node_info").json()
    assert node["default_node_info"]["network"] == chain.chain_id


def test_keepersim_routes(served: tuple[Chain, httpx.Client]) -> None:
    chain, client = served
    policy = get(client, "/keepersim/v1/policy/p1").json()
    assert policy == {"height": chain.height, **chain.get_policy_state("p1")}
    sel = get(client, "/keepersim/v1/selection", model="m").json()
    table = chain.get_selection_table("m")
    assert sel["height"] == table.height and sel["total"] == table.total
    assert sel["fallback"] is False and sel["panic"] is False and sel["excluded"] == []
    assert sum(sel["weights"].values()) == table.total
    assert set(sel["weights"]) == set(table.addresses)
    rep = get(client, "/keepersim/v1/reputation/0").json()
    assert rep == {"epoch_index": 0, "reputation": {f"p{i}": 0 for i in range(N_PARTICIPANTS)}}
    # the models and ML nodes a participant registered (the chain's Participant has neither)
    nodes = get(client, "/keepersim/v1/participant_nodes/p2").json()
    with chain.read() as k:
        registered = k.get_participant_nodes("p2")
    assert registered is not None
    assert nodes == {"height": chain.height, "participant_nodes": compute_chain_json(registered)}
    assert nodes["participant_nodes"]["models"] == ["m"]
    assert nodes["participant_nodes"]["ml_nodes"][0]["poc_weight"] == "1000"
    assert get(client, "/keepersim/v1/declines/0").json() == {
        "height": chain.height,
        "epoch_index": 0,
        "declines": {},
    }
    status = get(client, "/keepersim/v1/status").json()
    assert status["height"] == chain.height and status["app_hash"] == chain.app_hash.hex()
    assert status["runner"] == {"mode": "posted", "state": "posted", "failure": None}
    assert status["caches"]["selection"]["entries"] >= 1


def test_metrics_exposition_has_the_families(served: tuple[Chain, httpx.Client]) -> None:
    _, client = served
    get(client, f"{P}/get_random_executor", model="m")
    text = client.get("/metrics").text
    for family in (
        "keepersim_policy_state",
        "keepersim_policy_transitions_total",
        "keepersim_outcomes_total",
        "keepersim_selections_total",
        "keepersim_fallback_selections_total",
        "keepersim_cache_events_total",
        "keepersim_block_processing_seconds",
        "keepersim_height",
    ):
        assert f"# TYPE {family} " in text, family
    assert 'keepersim_policy_state{participant="p0",policy="gonka"} 0.0' in text
    assert 'keepersim_cache_events_total{cache="selection",event="recompute"}' in text
    assert 'keepersim_outcomes_total{outcome="miss"} 0.0' in text


# --------------------------------------------------------------------------------------------
# Posted blocks (own chain: they change state)
# --------------------------------------------------------------------------------------------


def test_post_blocks_updates_chain_and_metrics(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(3))
    app = create_app(chain)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        block = [
            {
                "type": "MsgStartInference",
                "creator": "r",
                "inference_id": "a",
                "model": "m",
                "assigned_to": "p1",
            },
            {
                "type": "MsgStartInference",
                "creator": "r",
                "inference_id": "b",
                "model": "m",
                "assigned_to": "p2",
            },
            {
                "type": "MsgStartInference",
                "creator": "r",
                "inference_id": "c",
                "model": "m",
                "assigned_to": "nobody",
            },
        ]
        r = client.post("/keepersim/v1/blocks", json=block)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["height"] == 1 and body["app_hash"] == chain.app_hash.hex()
        assert [e["type"] for e in body["events"]] == ["InferenceStarted", "InferenceStarted"]
        assert [t["ok"] for t in body["tx_results"]] == [True, True, False]
        assert all(t["gas_used"] > 0 for t in body["tx_results"])  # a rejected tx's too
        assert body["gas_used"] == sum(body["gas_by_step"].values()) > 0
        assert "UnknownParticipantError" in body["tx_results"][2]["error"]
        r = client.post(
            "/keepersim/v1/blocks",
            json={
                "txs": [
                    {
                        "type": "inference.inference.MsgFinishInference",
                        "creator": "p1",
                        "inference_id": "a",
                        "executed_by": "p1",
                        "model": "m",
                    }
                ]
            },
        )
        assert r.json()["events"][0]["type"] == "InferenceFinished"
        # expiry of "b" after expiration_blocks (20) empty blocks
        for _ in range(20):
            assert client.post("/keepersim/v1/blocks", json=[]).status_code == 200
        assert chain.get_inference("b").status == 5  # type: ignore[union-attr]
        text = client.get("/metrics").text
        assert 'keepersim_outcomes_total{outcome="success"} 1.0' in text
        assert 'keepersim_outcomes_total{outcome="miss"} 1.0' in text
        assert "keepersim_height 22.0" in text
        assert "keepersim_block_processing_seconds_count 22.0" in text
        # strict blocks fail whole
        r = client.post(
            "/keepersim/v1/blocks",
            json={
                "txs": [
                    {
                        "type": "MsgStartInference",
                        "creator": "r",
                        "inference_id": "d",
                        "model": "m",
                        "assigned_to": "nope",
                    }
                ],
                "strict": True,
            },
        )
        assert r.status_code == 400 and "nope" in r.json()["message"]
        assert chain.height == 22
        # malformed bodies
        for bad, word in [
            (b"{not json", "not JSON"),
            (b'[{"type": "MsgNope"}]', "txs[0].type"),
            (b'[{"type": "MsgStartInference", "bogus": 1}]', "txs[0]"),
            (b'{"txs": [], "extra": 1}', "extra"),
            (b"[3]", "txs[0]"),
        ]:
            r = client.post("/keepersim/v1/blocks", content=bad)
            assert r.status_code == 400 and word in r.json()["message"], (bad, r.text)
        assert client.get("/keepersim/v1/blocks").status_code == 405
    chain.close()


def test_posted_declines_and_governance_in_the_chains_shapes(make_genesis: Any) -> None:
    """A decline leaves the inference STARTED with its end height (the chain has no DECLINED) and
    counts on keepersim's declines route; governance posts the chain's params with
    MsgUpdateParams and keepersim's with MsgUpdateExtensionParams, each effective next block."""
    from keepersim.types.bech32 import GOV_AUTHORITY

    chain = Chain.open(memory=True, genesis=make_genesis(3))
    app = create_app(chain)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:

        def post(txs: list[dict[str, Any]]) -> dict[str, Any]:
            r = client.post("/keepersim/v1/blocks", json={"txs": txs, "strict": True})
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body

        start = {"type": "MsgStartInference", "creator": "r", "model": "m", "assigned_to": "p1"}
        post([{**start, "inference_id": "a"}])
        post([{"type": "MsgDeclineInference", "creator": "p1", "inference_id": "a"}])
        inference = get(client, f"{P}/inference/a").json()["inference"]
        assert inference["status"] == "STARTED" and inference["end_block_height"] == "2"
        assert get(client, "/keepersim/v1/declines/0").json()["declines"] == {"p1": 1}
        assert 'keepersim_outcomes_total{outcome="neutral"} 1.0' in client.get("/metrics").text

        chain_params = get(client, f"{P}/params").json()["params"]
        chain_params["validation_params"]["expiration_blocks"] = "7"
        ext = get(client, "/keepersim/v1/params").json()["extension_params"]
        assert ext["health_params"]["policy"] == "gonka"
        ext["health_params"]["policy"] = "windowed"
        body = post(
            [
                {"type": "MsgUpdateParams", "authority": GOV_AUTHORITY, "params": chain_params},
                {
                    "type": "MsgUpdateExtensionParams",
                    "authority": GOV_AUTHORITY,
                    "extension_params": ext,
                },
            ]
        )
        assert [t["ok"] for t in body["tx_results"]] == [True, True]
        assert get(client, "/keepersim/v1/params").json()["extension_params"] != ext  # pending
        post([])
        served = get(client, f"{P}/params").json()["params"]
        assert served["validation_params"]["expiration_blocks"] == "7"
        assert get(client, "/keepersim/v1/params").json()["extension_params"] == ext
        assert get(client, "/keepersim/v1/status").json()["policy"] == "windowed"
        # the chain's params carry no keepersim field: an old-style update is refused by name
        r = client.post(
            "/keepersim/v1/blocks",
            json=[
                {
                    "type": "MsgUpdateParams",
                    "authority": GOV_AUTHORITY,
                    "params": {"health_params": {"policy": "gonka"}},
                }
            ],
        )
        assert r.status_code == 400 and "health_params" in r.json()["message"], r.text
    chain.close()


def test_parse_block_json_types() -> None:
    txs, strict = parse_block_json(
        [{"@type": "/keepersim.v1.MsgDeclineInference", "creator": "p", "inference_id": "x"}]
    )
    assert strict is False and type(txs[0]).__name__ == "MsgDeclineInference"
    # The type URL keepersim's messages had before they left the chain's package still parses.
    txs, _ = parse_block_json([{"@type": "/inference.inference.MsgDeclineInference"}])
    assert type(txs[0]).__name__ == "MsgDeclineInference"


# --------------------------------------------------------------------------------------------
# Fault injection
# --------------------------------------------------------------------------------------------


def test_fault_spec_parsing() -> None:
    spec = parse_fault_spec("429=0.1,503=0.2,slow=0.05:200,drop=0.02,badjson=0.01")
    assert spec.shares == {"429": 0.1, "503": 0.2, "slow": 0.05, "drop": 0.02, "badjson": 0.01}
    assert spec.slow_ms == 200
    assert parse_fault_spec("").shares == {}
    for bad, word in [
        ("500=0.1", "unknown fault kind"),
        ("429", "KIND=SHARE"),
        ("429=x", "not a number"),
        ("429=1.5", "[0, 1]"),
        ("429=0.6,503=0.6", "more than 1"),
        ("drop=0.1:5", "only slow"),
        ("slow=0.1:abc", "not an integer"),
        ("429=0.1,429=0.2", "twice"),
    ]:
        with pytest.raises(FaultSpecError, match=None) as info:
            parse_fault_spec(bad)
        assert word in str(info.value), bad


def test_fault_decisions_are_deterministic_and_bounded() -> None:
    spec = parse_fault_spec("429=0.3,503=0.3")
    a = FaultInjector(spec, seed=5, max_streak=2)
    b = FaultInjector(spec, seed=5, max_streak=2)
    keys = [f"GET /x?page={i % 7}" for i in range(400)]
    seq_a = [a.decide(k).kind for k in keys]
    # another interleaving of the same per-key sequences gives the same per-key fates
    seq_b = {k: [b.decide(k).kind for _ in range(keys.count(k))] for k in sorted(set(keys))}
    per_key_a: dict[str, list[str | None]] = {}
    for k, kind in zip(keys, seq_a, strict=True):
        per_key_a.setdefault(k, []).append(kind)
    assert per_key_a == seq_b
    # never more than 2 failing answers in a row for one key
    for fates in per_key_a.values():
        run = 0
        for kind in fates:
            run = run + 1 if kind is not None else 0
            assert run <= 2
    share = sum(k is not None for k in seq_a) / len(seq_a)
    assert 0.35 < share < 0.65
    unbounded = FaultInjector(parse_fault_spec("503=1"), max_streak=0)
    assert all(unbounded.decide("k").kind == "503" for _ in range(10))


def test_fault_middleware_answers(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(3))
    cases = {
        "429=1": 429,
        "503=1": 503,
        "badjson=1": "badjson",
        "drop=1": "drop",
        "slow=1:150": "slow",
    }
    for text, expect in cases.items():
        injector = FaultInjector(parse_fault_spec(text), max_streak=0)
        app = create_app(chain, faults=injector)
        with (
            BackgroundServer(app) as server,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            url = f"{P}/participant/p1"
            if expect in (429, 503):
                r = client.get(url)
                assert r.status_code == expect and r.headers["retry-after"] == "1"
                assert "injected fault" in r.json()["message"]
            elif expect == "badjson":
                r = client.get(url)
                assert r.status_code == 200
                with pytest.raises(ValueError):
                    r.json()
            elif expect == "drop":
                with pytest.raises(httpx.TransportError):
                    client.get(url)
            else:
                r = client.get(url)
                assert r.status_code == 200 and r.elapsed.total_seconds() >= 0.14
            # /metrics and POST are never faulted
            assert client.get("/metrics").status_code == 200
            assert client.post("/keepersim/v1/blocks", json=[]).status_code == 200
            assert (
                injector.stats()["injected"][str(expect) if expect in (429, 503) else str(expect)]
                >= 1
            )
    chain.close()


# --------------------------------------------------------------------------------------------
# CLI wiring
# --------------------------------------------------------------------------------------------


def test_cli_registers_serve_and_export() -> None:
    from keepersim.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["serve", "--memory", "--genesis", "g.json", "--faults", "503=0.2"])
    assert args.handler.__name__ == "run_serve" and args.port == 8000
    args = parser.parse_args(["export", "--node", "http://x", "--epochs", "1-2", "--out", "t"])
    assert args.handler.__name__ == "run_export" and args.concurrency == 4


def test_export_cli_defaults_match_fetcher() -> None:
    from keepersim.cli import export as cli
    from keepersim.export import fetch

    assert cli.DEFAULT_CONCURRENCY == fetch.DEFAULT_CONCURRENCY
    assert cli.DEFAULT_TIMEOUT_SECONDS == fetch.DEFAULT_TIMEOUT_SECONDS
    assert cli.DEFAULT_MAX_ATTEMPTS == fetch.DEFAULT_MAX_ATTEMPTS


def test_serve_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from keepersim.cli import main

    assert main(["serve"]) == 2
    assert "give a chain" in capsys.readouterr().err
    assert main(["serve", "--memory"]) == 2
    assert "--genesis" in capsys.readouterr().err
    assert main(["serve", "--memory", "--trace", "x"]) == 2
    assert main(["serve", "--scenario", "mainnet_like", "--faults", "oops=1"]) == 2
    assert "--faults" in capsys.readouterr().err


@pytest.mark.parametrize("weighting", [False, True])
def test_serve_scenario_reputation_weighting(
    capsys: pytest.CaptureFixture[str], weighting: bool
) -> None:
    from keepersim.cli import main
    from keepersim.server.runner import open_scenario_chain
    from keepersim.sim.suite import get_builtin_scenario

    assert main(["serve", "--memory", "--reputation-weighting"]) == 2
    assert "--reputation-weighting goes with --scenario" in capsys.readouterr().err
    scenario = get_builtin_scenario("sparse", 1)
    with open_scenario_chain(scenario, "none", reputation_weighting=weighting) as chain:
        assert chain.get_params().extension_params.reputation_weighting is weighting


def test_serve_reads_the_chains_genesis_document(
    make_genesis: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve --genesis`` reads the chain's genesis document (``app_state.inference`` and
    keepersim's extension beside it) into the served chain; the old keepersim shape (models on
    the participant) is refused naming the file and the field."""
    from keepersim.cli import build_parser, main
    from keepersim.cli.serve import _open
    from keepersim.module.genesis import genesis_to_json

    genesis = make_genesis(3)
    genesis.keepersim.extension_params.health_params.policy = "windowed"
    path = tmp_path / "genesis.json"
    path.write_text(genesis_to_json(genesis), encoding="utf-8")
    args = build_parser().parse_args(["serve", "--memory", "--genesis", str(path)])
    chain, make_runner = _open(args)
    try:
        assert make_runner is None and chain.chain_id == genesis.chain_id
        assert chain.get_policy_name() == "windowed"
        with chain.read() as k:
            assert [p.address for p in k.iterate_participants()] == ["p0", "p1", "p2"]
            nodes = k.get_participant_nodes("p1")
        assert nodes is not None and list(nodes.models) == ["m"]
    finally:
        chain.close()
    document = json.loads(path.read_text(encoding="utf-8"))
    document["app_state"]["inference"]["participant_list"][0]["models"] = ["m"]
    path.write_text(json.dumps(document), encoding="utf-8")
    assert main(["serve", "--memory", "--genesis", str(path)]) == 2
    err = capsys.readouterr().err
    assert "genesis.json" in err and "participant_list[0].models" in err
    assert "Traceback" not in err
