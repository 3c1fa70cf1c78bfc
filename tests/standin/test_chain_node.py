"""The stand-in nodes: routes and shapes, pagination, height pinning, gateway errors, the older
node, pruning, and the rate-limit / retry / counting knobs."""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.types.bech32 import compute_bech32
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.messages import (
    Epoch,
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Inference,
    Params,
    Participant,
)
from standin.chain_node import (
    API_PREFIX,
    DEFAULT_LIMIT,
    HEIGHT_REQUEST_HEADER,
    HEIGHT_RESPONSE_HEADER,
    RESPONSE_KEYS,
    ROUTES,
    ChainHistory,
    PageRequest,
    RateLimit,
    StandinNode,
    compute_address_key,
    compute_clean_path,
    compute_go_uint64,
    compute_page,
    get_poc_window_inferences,
    serve_node,
)

NOT_IMPLEMENTED = b'{"code":12,"message":"Not Implemented","details":[]}'


@dataclass
class Reply:
    status: int
    headers: Any
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def height(self) -> str | None:
        value: str | None = self.headers.get(HEIGHT_RESPONSE_HEADER)
        return value


def get(
    node: StandinNode,
    route: str,
    *,
    height: int | str | None = None,
    method: str = "GET",
    raw: bool = False,
) -> Reply:
    """``route`` under the chain API (``raw``: a path from the host root)."""
    url = node.url + route if raw else node.api_url + API_PREFIX + route
    request = urllib.request.Request(url, method=method)
    if height is not None:
        request.add_header(HEIGHT_REQUEST_HEADER, str(height))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Reply(response.status, response.headers, response.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, err.headers, err.read())


def get_no_redirect(node: StandinNode, path: str) -> Reply:
    """A GET from the host root that does not follow redirects."""
    host, port = node.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        connection.close()


def walk(
    node: StandinNode, route: str, key: str, limit: int | None, **kw: Any
) -> tuple[list[Any], int]:
    """Page a listing as the audit does (next_key percent-encoded with safe=''): the items and
    the number of pages."""
    items: list[Any] = []
    next_key: str | None = ""
    pages = 0
    while True:
        query = [] if limit is None else [f"pagination.limit={limit}"]
        if next_key:
            query.append(f"pagination.key={quote(next_key, safe='')}")
        reply = get(node, route + ("?" + "&".join(query) if query else ""), **kw)
        assert reply.status == 200, reply.body
        pages += 1
        items.extend(reply.json[key])
        next_key = reply.json["pagination"]["next_key"]
        if not next_key:
            return items, pages


FIELDS = {
    message.DESCRIPTOR.full_name: [f.name for f in message.DESCRIPTOR.fields]
    for message in (
        Params,
        Participant,
        Inference,
        EpochGroupData,
        EpochPerformanceSummary,
        ExcludedParticipant,
        Epoch,
    )
}


def field_names(message: type) -> list[str]:
    return FIELDS[message.DESCRIPTOR.full_name]  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# routes and shapes
# ---------------------------------------------------------------------------------------------


def sample_paths(history: ChainHistory) -> dict[str, str]:
    """A path per RPC, on records the latest snapshot holds."""
    latest = history.latest
    participant = latest.participants[0].address
    inference = latest.inferences[-1].index
    summary = latest.summaries[0]
    return {
        "Params": "/params",
        "Inference": f"/inference/{inference}",
        "InferenceAll": "/inference",
        "Participant": f"/participant/{participant}",
        "ParticipantAll": "/participant",
        "EpochGroupData": "/epoch_group_data/2?model_id=m-beta",
        "EpochGroupDataAll": "/epoch_group_data",
        "GetCurrentEpoch": "/get_current_epoch",
        "CurrentEpochGroupData": "/current_epoch_group_data",
        "EpochPerformanceSummary": f"/epoch_performance_summary/{summary.epoch_index}",
        "EpochPerformanceSummaryByParticipant": (
            f"/epoch_performance_summary/{summary.epoch_index}/{summary.participant_id}"
        ),
        "EpochPerformanceSummaryAll": "/epoch_performance_summary",
        "CountParticipants": "/participants/count",
        "EpochInfo": "/epoch_info",
        "ExcludedParticipants": "/excluded_participants/2",
        "ListConfirmationPoCEvents": "/confirmation_poc_events/2",
    }


ITEM_TYPES: dict[str, tuple[str, type, bool]] = {
    "Params": ("params", Params, False),
    "Inference": ("inference", Inference, False),
    "InferenceAll": ("inference", Inference, True),
    "Participant": ("participant", Participant, False),
    "ParticipantAll": ("participant", Participant, True),
    "EpochGroupData": ("epoch_group_data", EpochGroupData, False),
    "EpochGroupDataAll": ("epoch_group_data", EpochGroupData, True),
    "CurrentEpochGroupData": ("epoch_group_data", EpochGroupData, False),
    "EpochPerformanceSummary": ("epochPerformanceSummary", EpochPerformanceSummary, True),
    "EpochPerformanceSummaryByParticipant": (
        "epochPerformanceSummary",
        EpochPerformanceSummary,
        False,
    ),
    "EpochPerformanceSummaryAll": ("epochPerformanceSummary", EpochPerformanceSummary, True),
    "ExcludedParticipants": ("items", ExcludedParticipant, True),
}


def test_every_route_has_a_sample_and_response_keys(chain_history: ChainHistory) -> None:
    rpcs = {r.rpc for r in ROUTES}
    assert rpcs == set(sample_paths(chain_history)) == set(RESPONSE_KEYS)


@pytest.mark.parametrize("rpc", sorted(RESPONSE_KEYS))
def test_route_answers_the_response_message_with_every_key(
    current_node: StandinNode, chain_history: ChainHistory, rpc: str
) -> None:
    reply = get(current_node, sample_paths(chain_history)[rpc])
    assert reply.status == 200, reply.body
    assert reply.headers.get("Content-Type") == "application/json"
    assert reply.height == str(chain_history.latest.height)
    assert reply.headers.get("Grpc-Metadata-Content-Type") == "application/grpc"
    body = reply.json
    assert list(body) == list(RESPONSE_KEYS[rpc])
    assert current_node.counts[rpc] == 1
    if rpc in ITEM_TYPES:
        key, message, repeated = ITEM_TYPES[rpc]
        items = body[key] if repeated else [body[key]]
        assert items, f"{rpc}: no items to check"
        for item in items:
            assert list(item) == field_names(message)
    if "pagination" in body:
        assert list(body["pagination"]) == ["next_key", "total"]


def test_bodies_are_the_chain_messages_printed_compactly(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    latest = chain_history.latest
    reply = get(current_node, "/params")
    assert (
        reply.body
        == json.dumps({"params": compute_chain_json(latest.params)}, separators=(",", ":")).encode()
    )
    inference = latest.inferences[0]
    served = get(current_node, f"/inference/{inference.index}").json["inference"]
    assert served == compute_chain_json(inference)
    # int64 as strings, int32 as numbers, enums as names, deprecated payloads as ""
    assert served["start_block_height"] == str(inference.start_block_height)
    assert served["prompt_payload"] == served["response_payload"] == ""
    assert served["original_prompt"] == ""
    participant = get(current_node, f"/participant/{latest.participants[0].address}").json
    assert isinstance(participant["participant"]["weight"], int)


def test_epoch_routes_agree(current_node: StandinNode, chain_history: ChainHistory) -> None:
    latest = chain_history.latest
    info = get(current_node, "/epoch_info").json
    assert info["block_height"] == str(latest.height)
    assert info["latest_epoch"] == compute_chain_json(latest.get_latest_epoch())
    assert info["is_confirmation_poc_active"] is False
    assert info["active_confirmation_poc_event"] is None
    current = get(current_node, "/get_current_epoch").json
    assert current == {"epoch": str(latest.effective_epoch)}
    group = get(current_node, "/current_epoch_group_data").json["epoch_group_data"]
    assert group["epoch_index"] == str(latest.effective_epoch)
    assert group["model_id"] == ""


def test_epoch_group_by_model_and_parent(current_node: StandinNode) -> None:
    parent = get(current_node, "/epoch_group_data/2").json["epoch_group_data"]
    assert parent["model_id"] == ""
    assert parent["sub_group_models"] == ["m-alpha", "m-beta", "m-gamma"]
    assert int(parent["effective_block_height"]) > int(parent["poc_start_block_height"])
    assert (
        int(parent["last_block_height"])
        == int(
            get(current_node, "/epoch_group_data/3").json["epoch_group_data"][
                "effective_block_height"
            ]
        )
        - 1
    )
    for model in parent["sub_group_models"]:
        group = get(current_node, f"/epoch_group_data/2?model_id={model}").json["epoch_group_data"]
        assert group["model_id"] == model
        members = group["validation_weights"]
        assert members
        for member in members:
            assert member["ml_nodes"]
            assert sum(int(n["poc_weight"]) for n in member["ml_nodes"]) > 0
            assert member["reputation"] >= 0
            assert int(member["weight"]) > 0
    assert (
        get(current_node, "/epoch_group_data/2?modelId=m-beta").json
        == get(current_node, "/epoch_group_data/2?model_id=m-beta").json
    )
    missing = get(current_node, "/epoch_group_data/2?model_id=nope")
    assert (missing.status, missing.json) == (
        404,
        {"code": 5, "message": "not found", "details": []},
    )
    assert missing.height is None


def test_statuses_and_exclusions(current_node: StandinNode, chain_history: ChainHistory) -> None:
    participants, _ = walk(current_node, "/participant", "participant", None)
    statuses = {p["status"] for p in participants}
    assert {"ACTIVE", "INACTIVE", "RAMPING"} <= statuses
    excluded = get(current_node, "/excluded_participants/2").json["items"]
    assert excluded and {e["reason"] for e in excluded} == {"downtime"}
    assert all(e["epoch_index"] == "2" for e in excluded)
    assert list(excluded[0]) == field_names(ExcludedParticipant)
    effective = chain_history.latest.effective_epoch
    assert (
        get(current_node, "/excluded_participants/0").json
        == get(current_node, f"/excluded_participants/{effective}").json
    )
    assert get(current_node, "/excluded_participants/1").json == {"items": []}


def test_summaries_by_epoch_and_participant(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    epoch = 2
    rows = get(current_node, f"/epoch_performance_summary/{epoch}").json["epochPerformanceSummary"]
    expected = [s for s in chain_history.latest.summaries if s.epoch_index == epoch]
    assert sorted(r["participant_id"] for r in rows) == sorted(s.participant_id for s in expected)
    keys = [compute_address_key(r["participant_id"]) for r in rows]
    assert keys == sorted(keys)  # the map's order: address bytes
    one = rows[0]
    by_participant = get(
        current_node, f"/epoch_performance_summary/{epoch}/{one['participant_id']}"
    )
    assert by_participant.json == {"epochPerformanceSummary": one}
    assert get(current_node, "/epoch_performance_summary/999").json == {
        "epochPerformanceSummary": []
    }


def test_poc_window_inferences_are_in_the_data_and_served(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    latest = chain_history.latest
    window = get_poc_window_inferences(latest)
    groups = {g.epoch_index: g for g in latest.epoch_groups if g.model_id == ""}
    for index, group in groups.items():
        if index >= 1:  # build_chain_history's default poc_window
            assert group.effective_block_height - group.poc_start_block_height == 4
    # several start heights per window, in the windows of at least two epochs
    assert len({i.start_block_height for i in window}) >= 2 * len({i.epoch_id for i in window})
    assert len({i.epoch_id for i in window}) >= 2
    for inference in window:
        nxt = groups[inference.epoch_id + 1]
        served = get(current_node, f"/inference/{inference.index}").json["inference"]
        assert served["epoch_id"] == str(inference.epoch_id)
        start = int(served["start_block_height"])
        assert nxt.poc_start_block_height <= start < nxt.effective_block_height
        assert served["epoch_poc_start_block_height"] == str(
            groups[inference.epoch_id].poc_start_block_height
        )
    epoch = get(current_node, "/epoch_info").json["latest_epoch"]
    assert epoch["poc_start_block_height"] == str(
        groups[int(epoch["index"])].poc_start_block_height
    )


# ---------------------------------------------------------------------------------------------
# pagination
# ---------------------------------------------------------------------------------------------

LISTINGS = [
    ("/participant", "participant", "participants"),
    ("/inference", "inference", "inferences"),
    ("/epoch_group_data", "epoch_group_data", "epoch_groups"),
    ("/epoch_performance_summary", "epochPerformanceSummary", "summaries"),
]


@pytest.mark.parametrize(("route", "key", "rows"), LISTINGS)
@pytest.mark.parametrize("limit", [1, 3, 7, 200, None])
def test_pagination_covers_each_listing_exactly_once(
    current_node: StandinNode,
    chain_history: ChainHistory,
    route: str,
    key: str,
    rows: str,
    limit: int | None,
) -> None:
    expected = [value for _, value in chain_history.latest.get_rows(rows)]
    items, pages = walk(current_node, route, key, limit)
    assert items == expected
    assert pages == max(1, math.ceil(len(expected) / (limit or DEFAULT_LIMIT)))
    assert sum(current_node.counts.values()) == pages


def test_pagination_total_and_next_key(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    n = len(chain_history.latest.participants)
    first = get(current_node, "/participant?pagination.limit=3").json["pagination"]
    assert first["total"] == "0"  # count_total not asked
    counted = get(current_node, "/participant?pagination.limit=3&pagination.count_total=true")
    assert counted.json["pagination"]["total"] == str(n)
    assert get(current_node, "/participant").json["pagination"] == {
        "next_key": None,
        "total": str(n),
    }
    # the first page's next key is the 4th participant's address bytes
    assert (
        base64.b64decode(first["next_key"]) == chain_history.latest.get_rows("participants")[3][0]
    )
    # a key page never counts
    keyed = get(
        current_node,
        f"/participant?pagination.count_total=true&pagination.key={quote(first['next_key'], safe='')}",
    )
    assert keyed.json["pagination"]["total"] == "0"
    assert get(current_node, "/participant?pagination.countTotal=true&pagination.limit=2").json[
        "pagination"
    ]["total"] == str(n)


def test_unquoted_next_key_with_plus_is_rejected(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    """The scenario's addresses make base64 keys with '+' and '/': sent unquoted, '+' arrives as
    a space (Go's url.ParseQuery) and the key is no base64."""
    next_key = get(current_node, "/participant?pagination.limit=1").json["pagination"]["next_key"]
    assert "+" in next_key
    reply = get(current_node, f"/participant?pagination.limit=1&pagination.key={next_key}")
    assert reply.status == 400
    assert reply.json["code"] == 3
    assert reply.json["message"] == "illegal base64 data at input byte 0"
    # the URL alphabet is accepted too
    urlsafe = next_key.replace("+", "-").replace("/", "_")
    ok = get(current_node, f"/participant?pagination.limit=1&pagination.key={urlsafe}")
    assert ok.status == 200
    assert (
        ok.json["participant"][0]["address"]
        == chain_history.latest.get_rows("participants")[1][1]["address"]
    )


def test_pagination_edges(current_node: StandinNode, chain_history: ChainHistory) -> None:
    n = len(chain_history.latest.inferences)
    past = get(current_node, f"/inference?pagination.offset={n + 1}").json
    assert past == {"inference": [], "pagination": None}
    at_end = get(current_node, f"/inference?pagination.offset={n}").json
    assert at_end == {"inference": [], "pagination": {"next_key": None, "total": str(n)}}
    both = get(current_node, "/inference?pagination.offset=1&pagination.key=AA==")
    assert (both.status, both.json["code"]) == (500, 13)
    both_p = get(current_node, "/participant?pagination.offset=1&pagination.key=AA==")
    assert (both_p.status, both_p.json["code"]) == (500, 2)
    bad_limit = get(current_node, "/inference?pagination.limit=ten")
    assert (bad_limit.status, bad_limit.json) == (
        400,
        {"code": 3, "message": 'strconv.ParseUint: parsing "ten": invalid syntax', "details": []},
    )
    bad_epoch = get(current_node, "/epoch_group_data/two")
    assert (bad_epoch.status, bad_epoch.json["code"]) == (400, 3)
    assert bad_epoch.json["message"] == (
        'type mismatch, parameter: epoch_index, error: strconv.ParseUint: parsing "two": '
        "invalid syntax"
    )
    # Go's base-0 integers; the first of repeated values wins
    assert len(get(current_node, "/inference?pagination.limit=0x3").json["inference"]) == 3
    assert len(get(current_node, "/inference?pagination.limit=010").json["inference"]) == 8
    first = get(current_node, "/inference?pagination.limit=2&pagination.limit=5").json
    assert len(first["inference"]) == 2
    assert (
        get(current_node, "/epoch_group_data/0x2").json
        == get(current_node, "/epoch_group_data/2").json
    )
    reverse = get(current_node, "/inference?pagination.reverse=true&pagination.limit=2").json
    expected = [v for _, v in reversed(chain_history.latest.get_rows("inferences"))][:2]
    assert reverse["inference"] == expected


def test_inference_listing_ignores_an_epoch_filter(current_node: StandinNode) -> None:
    plain = get(current_node, "/inference?pagination.limit=500")
    filtered = get(current_node, "/inference?pagination.limit=500&epoch_id=3")
    assert filtered.status == 200
    assert filtered.json == plain.json
    assert len({i["epoch_id"] for i in plain.json["inference"]}) > 1


_ROW_KEYS = st.lists(st.binary(min_size=1, max_size=4), unique=True, max_size=30).map(sorted)


@settings(max_examples=150, deadline=None)
@given(keys=_ROW_KEYS, limit=st.integers(0, 12), reverse=st.booleans())
def test_compute_page_key_walk_visits_each_row_once(
    keys: list[bytes], limit: int, reverse: bool
) -> None:
    rows = [(k, {"k": k.hex()}) for k in keys]
    seen: list[dict[str, Any]] = []
    page = PageRequest(limit=limit, reverse=reverse)
    for _ in range(len(rows) + 2):
        items, response = compute_page(rows, page)
        assert response is not None
        seen.extend(items)
        assert len(items) <= (limit or DEFAULT_LIMIT)
        if response["next_key"] is None:
            break
        page = PageRequest(key=base64.b64decode(response["next_key"]), limit=limit, reverse=reverse)
    ordered = [r[1] for r in (reversed(rows) if reverse else rows)]
    if not reverse:
        assert seen == ordered
    else:
        # CollectionPaginate iterates [nil, key) backwards after the first page: the row at
        # next_key itself is not returned again (nor at all); the rest come once, in order.
        assert len(seen) == len({json.dumps(s) for s in seen})
        assert [s for s in ordered if s in seen] == seen


@settings(max_examples=150, deadline=None)
@given(keys=_ROW_KEYS, limit=st.integers(1, 12), offset=st.integers(0, 40), count=st.booleans())
def test_compute_page_offset(keys: list[bytes], limit: int, offset: int, count: bool) -> None:
    rows = [(k, {"k": k.hex()}) for k in keys]
    items, response = compute_page(rows, PageRequest(offset=offset, limit=limit, count_total=count))
    if offset > len(rows):
        assert (items, response) == ([], None)
        return
    assert items == [r[1] for r in rows[offset : offset + limit]]
    assert response is not None
    assert response["total"] == (str(len(rows)) if count else "0")
    has_next = offset + limit < len(rows)
    assert (response["next_key"] is not None) == has_next
    if has_next:
        assert base64.b64decode(response["next_key"]) == rows[offset + limit][0]


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(min_size=1, max_size=32))
def test_address_key_is_the_bech32_payload(raw: bytes) -> None:
    assert compute_address_key(compute_bech32("gonka", raw)) == raw


def test_address_key_of_a_non_bech32_string_is_its_bytes() -> None:
    assert compute_address_key("not-an-address") == b"not-an-address"


def test_participant_lookup_needs_the_chains_address_prefix(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    address = chain_history.latest.participants[0].address
    other_prefix = compute_bech32("cosmos", compute_address_key(address))
    for index in (other_prefix, "not-an-address"):
        reply = get(current_node, f"/participant/{index}")
        assert (reply.status, reply.json["code"]) == (404, 5)
    assert get(current_node, f"/participant/{address}").status == 200


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("12", 12),
        ("010", 8),
        ("0x1f", 31),
        ("0X1F", 31),
        ("0x_1f", 31),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("18446744073709551615", 2**64 - 1),
    ],
)
def test_go_uint64_accepts(text: str, value: int) -> None:
    assert compute_go_uint64(text) == value


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "invalid syntax"),
        ("-1", "invalid syntax"),
        ("+1", "invalid syntax"),
        (" 1", "invalid syntax"),
        ("09", "invalid syntax"),
        ("0x", "invalid syntax"),
        ("0x__1", "invalid syntax"),
        ("_1", "invalid syntax"),
        ("1_", "invalid syntax"),
        ("1__0", "invalid syntax"),
        ("1.0", "invalid syntax"),
        ("18446744073709551616", "value out of range"),
    ],
)
def test_go_uint64_rejects_with_gos_message(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        compute_go_uint64(text)
    assert str(caught.value) == f'strconv.ParseUint: parsing "{text}": {problem}'


@pytest.mark.parametrize(
    ("path", "clean"),
    [
        ("/a/b", "/a/b"),
        ("/a//b", "/a/b"),
        ("//a", "/a"),
        ("/a/./b/", "/a/b/"),
        ("/a/../b", "/b"),
        ("/..", "/"),
        ("a", "/a"),
        ("/", "/"),
    ],
)
def test_clean_path_is_gos_path_clean_keeping_a_trailing_slash(path: str, clean: str) -> None:
    assert compute_clean_path(path) == clean


# ---------------------------------------------------------------------------------------------
# height pinning and pruning
# ---------------------------------------------------------------------------------------------


def test_pinned_query_reads_the_snapshot_at_or_below(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    older = chain_history.snapshots[2]  # epoch 2's effective height
    for height in (older.height, older.height + 5):
        info = get(current_node, "/epoch_info", height=height)
        assert info.height == str(height)  # the interceptor echoes the asked height
        assert info.json["block_height"] == str(height)
        assert info.json["latest_epoch"]["index"] == str(older.effective_epoch)
        current = get(current_node, "/get_current_epoch", height=height).json
        assert current == {"epoch": str(older.effective_epoch)}
        listing = get(current_node, "/participant", height=height).json
        assert listing["block_height"] == str(height)
    groups, _ = walk(current_node, "/epoch_group_data", "epoch_group_data", 5, height=older.height)
    assert max(int(g["epoch_index"]) for g in groups) == older.effective_epoch
    latest_groups, _ = walk(current_node, "/epoch_group_data", "epoch_group_data", 5)
    assert len(latest_groups) > len(groups)
    # the older snapshot's group of its own epoch is still open; the latest state closed it
    parent_then = get(
        current_node, f"/epoch_group_data/{older.effective_epoch}", height=older.height
    )
    parent_now = get(current_node, f"/epoch_group_data/{older.effective_epoch}")
    assert parent_then.json["epoch_group_data"]["last_block_height"] == "0"
    assert parent_now.json["epoch_group_data"]["last_block_height"] != "0"
    unpinned = get(current_node, "/epoch_info", height=0)
    assert unpinned.height == str(chain_history.latest.height)


def test_pinned_height_errors(current_node: StandinNode, chain_history: ChainHistory) -> None:
    latest = chain_history.latest.height
    future = get(current_node, "/params", height=latest + 1)
    assert future.status == 500
    assert future.json == {
        "code": 2,
        "message": "codespace sdk code 26: invalid height: cannot query with height in the "
        "future; please provide a valid height",
        "details": [],
    }
    assert future.height is None
    for bad in ("abc", "-3", "1.5"):
        reply = get(current_node, "/params", height=bad)
        assert reply.status == 500, bad
        assert reply.json["code"] == 2
        assert "codespace sdk code 18: invalid request" in reply.json["message"]
        assert reply.height is None


def test_height_header_out_of_range_and_repeated(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    reply = get(current_node, "/params", height=2**63)
    assert reply.status == 500
    assert reply.json["message"].endswith(f'parsing "{2**63}": value out of range')
    # two values: md.Get returns both, the interceptor ignores them (latest height)
    host, port = current_node.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("GET", "/chain-api" + API_PREFIX + "/params")
        connection.putheader(HEIGHT_REQUEST_HEADER, "21")
        connection.putheader(HEIGHT_REQUEST_HEADER, "41")
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        assert response.getheader(HEIGHT_RESPONSE_HEADER) == str(chain_history.latest.height)
    finally:
        connection.close()


def test_earliest_height_knob(chain_history: ChainHistory) -> None:
    with serve_node(chain_history, earliest_height=50) as node:
        assert get(node, "/params", height=60).status == 200
        reply = get(node, "/params", height=41)
        assert reply.status == 500
        assert "failed to load state at height 41" in reply.json["message"]


def test_pruning_hides_old_inferences(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    latest = chain_history.latest
    threshold = latest.params.epoch_params.inference_pruning_epoch_threshold
    assert threshold == 2
    now, _ = walk(current_node, "/inference", "inference", 50)
    epochs_now = {int(i["epoch_id"]) for i in now}
    # epochs 1 .. E - T are gone, epoch 0 is never indexed for pruning, the rest are complete
    assert epochs_now == {0} | set(
        range(latest.effective_epoch - threshold + 1, latest.effective_epoch + 1)
    )
    pinned = chain_history.snapshots[2]
    then, _ = walk(current_node, "/inference", "inference", 50, height=pinned.height)
    assert 1 in {int(i["epoch_id"]) for i in then}
    pruned = next(i for i in then if i["epoch_id"] == "1")
    assert get(current_node, f"/inference/{pruned['index']}").status == 404
    assert get(current_node, f"/inference/{pruned['index']}", height=pinned.height).json == {
        "inference": pruned
    }
    # summaries, groups and exclusions are never pruned
    assert get(current_node, "/epoch_performance_summary/1").json["epochPerformanceSummary"]
    assert get(current_node, "/epoch_group_data/1").status == 200


# ---------------------------------------------------------------------------------------------
# gateway and proxy errors; the older node
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "route",
    [
        "/no_such_route",
        "/params/",
        "/inference/a%2Fb",  # decoded before matching: two segments
        "/epoch_group_data/1/2/3",
        "/epoch_performance_summary/1/2/3",
    ],
)
def test_unknown_route_is_501_code_12(current_node: StandinNode, route: str) -> None:
    reply = get(current_node, route)
    assert (reply.status, reply.body) == (501, NOT_IMPLEMENTED)
    assert reply.headers.get("Content-Type") == "application/json"
    assert reply.height is None


def test_other_method_and_other_module_are_501(current_node: StandinNode) -> None:
    assert get(current_node, "/params", method="POST").body == NOT_IMPLEMENTED
    other = get(current_node, "/chain-api/cosmos/bank/v1beta1/balances/x", raw=True)
    assert (other.status, other.body) == (501, NOT_IMPLEMENTED)


def test_path_outside_the_proxy_prefix_is_nginx_404(current_node: StandinNode) -> None:
    reply = get(current_node, API_PREFIX + "/params", raw=True)
    assert reply.status == 404
    assert reply.headers.get("Content-Type") == "text/html"
    assert b"nginx" in reply.body


def test_bare_api_server_without_prefix(chain_history: ChainHistory) -> None:
    with serve_node(chain_history, prefix="") as node:
        assert node.api_url == node.url
        assert get(node, "/params").status == 200
        # gorilla/mux answers an unclean path with 301 to the clean one (no proxy prefix)
        # (a leading "//" is collapsed by http.server itself, so the test uses an inner one)
        reply = get_no_redirect(node, "/productscience//inference/inference/params?x=1")
        assert (reply.status, reply.headers.get("Location")) == (
            301,
            "/productscience/inference/inference/params?x=1",
        )


def test_proxy_normalises_the_uri(current_node: StandinNode) -> None:
    """nginx merges slashes and resolves dot segments before proxy_pass: no redirect."""
    reply = get(current_node, "/chain-api//productscience/inference/inference/./params", raw=True)
    assert reply.status == 200
    assert list(reply.json) == ["params"]


def test_older_node_lacks_the_summary_route(
    older_node: StandinNode, current_node: StandinNode, chain_history: ChainHistory
) -> None:
    reply = get(older_node, "/epoch_performance_summary/2")
    assert (reply.status, reply.body) == (501, NOT_IMPLEMENTED)
    assert reply.height is None
    assert older_node.counts["<unrouted>"] == 1
    summary = chain_history.latest.summaries[0]
    one = f"/epoch_performance_summary/{summary.epoch_index}/{summary.participant_id}"
    assert get(older_node, one).json == get(current_node, one).json
    assert walk(older_node, "/epoch_performance_summary", "epochPerformanceSummary", 10)[0]
    for rpc, route in sample_paths(chain_history).items():
        if rpc not in ("EpochPerformanceSummary", "ListConfirmationPoCEvents"):
            assert get(older_node, route).status == 200, rpc
    assert get(older_node, "/confirmation_poc_events/2").status == 501  # since v0.2.8


# ---------------------------------------------------------------------------------------------
# knobs
# ---------------------------------------------------------------------------------------------


def test_fail_next_with_retry_after(current_node: StandinNode) -> None:
    current_node.fail_next(2, 429, retry_after=3)
    for _ in range(2):
        reply = get(current_node, "/params")
        assert reply.status == 429
        assert reply.headers.get("Retry-After") == "3"
    assert get(current_node, "/params").status == 200
    assert [r.status for r in current_node.requests] == [429, 429, 200]
    assert current_node.counts["Params"] == 3


def test_fail_next_for_one_route_without_retry_after(current_node: StandinNode) -> None:
    current_node.fail_next(1, 503, rpc="InferenceAll")
    assert get(current_node, "/params").status == 200
    failed = get(current_node, "/inference")
    assert failed.status == 503
    assert failed.headers.get("Retry-After") is None
    assert get(current_node, "/inference").status == 200


def test_rate_limit_is_nginx_leaky_bucket(chain_history: ChainHistory) -> None:
    now = [0.0]
    limit = RateLimit(per_minute=60, burst=3, clock=lambda: now[0])
    with serve_node(chain_history, rate_limit=limit) as node:
        statuses = [get(node, "/params").status for _ in range(6)]
        assert statuses == [200, 200, 200, 200, 503, 503]  # 1 + burst at once
        rejected = get(node, "/params")
        assert rejected.headers.get("Retry-After") is None
        assert b"503 Service Temporarily Unavailable" in rejected.body
        now[0] += 1.0  # one request drains per second at 60 r/min
        assert [get(node, "/params").status for _ in range(2)] == [200, 503]
        now[0] += 60.0
        assert [get(node, "/params").status for _ in range(4)] == [200] * 4


def test_request_log_records_pins_and_routes(current_node: StandinNode) -> None:
    get(current_node, "/epoch_group_data?pagination.limit=2", height=41)
    record = current_node.requests[-1]
    assert record.rpc == "EpochGroupDataAll"
    assert record.height_header == "41"
    assert record.query == {"pagination.limit": ["2"]}
    current_node.reset_counts()
    assert not current_node.requests
    assert not current_node.counts


# ---------------------------------------------------------------------------------------------
# the route table against upstream's query.proto (when a gonka git mirror is at hand)
# ---------------------------------------------------------------------------------------------

GONKA_GIT_DIR = Path(os.environ.get("GONKA_GIT_DIR", "/work/.mirror/kaitakuai+gonka/repo"))
QUERY_PROTO = "inference-chain/proto/inference/inference/query.proto"


def read_query_proto(commit: str) -> str:
    if not GONKA_GIT_DIR.is_dir():
        pytest.skip(f"no gonka git mirror at {GONKA_GIT_DIR} (set GONKA_GIT_DIR)")
    done = subprocess.run(
        ["git", "-C", str(GONKA_GIT_DIR), "show", f"{commit}:{QUERY_PROTO}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"git show {commit}:{QUERY_PROTO} failed: {done.stderr.strip()}")
    return done.stdout


def get_upstream_routes(text: str) -> dict[str, tuple[str, str]]:
    """rpc name -> (GET path, response message) from query.proto's text."""
    pattern = re.compile(
        r"rpc\s+(\w+)\s*\(\s*\w+\s*\)\s*returns\s*\(\s*(\w+)\s*\)\s*\{\s*"
        r'option\s*\(google\.api\.http\)\.get\s*=\s*"([^"]+)"'
    )
    return {m[1]: (m[3], m[2]) for m in pattern.finditer(text)}


def get_message_fields(text: str, message: str) -> list[str]:
    body = re.search(r"^message\s+" + message + r"\s*\{(.*?)^\}", text, re.M | re.S)
    assert body is not None, message
    field = re.compile(r"^\s*(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+", re.M)
    return field.findall(body[1])


def test_routes_and_response_keys_match_query_proto_at_ee730031() -> None:
    text = read_query_proto("ee730031")
    upstream = get_upstream_routes(text)
    for route in ROUTES:
        path, response = upstream[route.rpc]
        assert path == API_PREFIX + route.template, route.rpc
        assert tuple(get_message_fields(text, response)) == RESPONSE_KEYS[route.rpc], route.rpc


def test_older_node_routes_match_query_proto_before_v0_2_6() -> None:
    """At v0.2.5 the by-participant route was the RPC named EpochPerformanceSummary (renamed in
    v0.2.6, whose new by-epoch route took the name): compare by path."""
    text = read_query_proto("82c43a42^")
    by_path = {path: response for path, response in get_upstream_routes(text).values()}
    for route in ROUTES:
        path = API_PREFIX + route.template
        if route.since != "v0.2.5":  # v0.2.6's by-epoch summaries, v0.2.8's PoC events
            assert path not in by_path
        else:
            fields = tuple(get_message_fields(text, by_path[path]))
            assert fields == RESPONSE_KEYS[route.rpc], route.rpc


def test_concurrent_keep_alive_clients_each_see_whole_listings(
    current_node: StandinNode, chain_history: ChainHistory
) -> None:
    """Threads paging different listings over kept-alive httpx connections at once."""
    expected = {
        route: [v for _, v in chain_history.latest.get_rows(rows)] for route, _, rows in LISTINGS
    }
    keys = {route: key for route, key, _ in LISTINGS}
    results: dict[str, list[Any]] = {}

    def page_all(route: str) -> None:
        items: list[Any] = []
        with httpx.Client(base_url=current_node.api_url + API_PREFIX, timeout=10) as client:
            params: dict[str, str] = {"pagination.limit": "4"}
            while True:
                reply = client.get(route, params=params)  # httpx quotes the key itself
                assert reply.status_code == 200
                body = reply.json()
                items.extend(body[keys[route]])
                next_key = body["pagination"]["next_key"]
                if not next_key:
                    break
                params = {"pagination.limit": "4", "pagination.key": next_key}
        results[route] = items

    threads = [threading.Thread(target=page_all, args=(route,)) for route in expected]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == expected


def test_stand_in_is_independent_of_keepersims_server_and_exporter() -> None:
    """Not even transitively: the stand-in must not share code with what it will test."""
    tests_dir = Path(__file__).resolve().parents[1]
    code = (
        "import sys, standin.chain_node; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('keepersim.server', 'keepersim.export'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tests_dir,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir.parent), str(tests_dir)])},
    )
    assert done.stdout.strip() == "[]"
