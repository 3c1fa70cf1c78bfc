"""keepersim's own routes (under ``/keepersim/v1``): what the chain has no route for.

Plain JSON numbers; messages printed as the chain routes print theirs. Every answer carries the
height headers (``/metrics`` has ``keepersim_height`` instead). Handlers read through the
:class:`~keepersim.chain.Chain` front door, as :mod:`.queries` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from keepersim.keeper.selection import SelectionTable, compute_member_weights
from keepersim.server.metrics import CONTENT_TYPE
from keepersim.server.query_params import parse_model, parse_uint
from keepersim.server.responses import Answer, ApiError, compute_height_headers
from keepersim.server.state import ServerState
from keepersim.types import keys
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = [
    "get_declines",
    "get_extension_params",
    "get_metrics",
    "get_participant_nodes",
    "get_policy",
    "get_reputation",
    "get_selection",
    "get_status",
    "table_to_json",
]


def get_policy(state: ServerState, address: str) -> Answer:
    """The participant's health-policy state, with the height it was read at."""
    chain = state.chain
    if chain.get_participant(address) is None:
        raise ApiError(404, f"participant {address!r} not found")
    for _ in range(5):  # read the height around the query: a block may commit in between
        before = chain.height
        view = chain.get_policy_state(address)
        if chain.height == before:
            break
    return {"height": before, **view}, compute_height_headers(before)


def get_extension_params(state: ServerState) -> Answer:
    """keepersim's ``ExtensionParams``, which the chain's ``params`` route does not carry."""
    with state.chain.read() as k:
        height = state.chain.height
        ext = k.get_extension_params()
    body = {"height": height, "extension_params": compute_chain_json(ext)}
    return body, compute_height_headers(height)


def get_participant_nodes(state: ServerState, address: str) -> Answer:
    """The models and ML nodes a participant registered (the chain's Participant has neither)."""
    with state.chain.read() as k:
        height = state.chain.height
        if k.get_participant(address) is None:
            raise ApiError(404, f"participant {address!r} not found")
        nodes = k.get_participant_nodes(address) or ParticipantNodes(address=address)
    body = {"height": height, "participant_nodes": compute_chain_json(nodes)}
    return body, compute_height_headers(height)


def get_declines(state: ServerState, epoch_index: str) -> Answer:
    """Declines per participant in an epoch (the chain's summaries have no such count)."""
    epoch = parse_uint(epoch_index, "epoch_index")
    with state.chain.read() as k:
        latest = k.get_effective_epoch_index()
    if epoch > latest:
        raise ApiError(404, f"epoch {epoch} not found (the latest epoch is {latest})")
    # Read after the check: epochs only grow, so the page's (later) height knows the epoch too.
    page = state.chain.get_page(keys.EPOCH_DECLINES + keys.encode_u64(epoch))
    entries = [EpochDeclines.FromString(raw) for raw in page.values]
    body = {
        "height": page.height,
        "epoch_index": epoch,
        "declines": {e.address: e.declined_requests for e in entries},
    }
    return body, compute_height_headers(page.height)


def table_to_json(table: SelectionTable) -> dict[str, Any]:
    """The selection table: excluded, fallback, panic and each member's weight."""
    weights = dict(zip(table.addresses, compute_member_weights(table), strict=True))
    return {
        "height": table.height,
        "model": table.model,
        "total": table.total,
        "fallback": table.fallback,
        "panic": table.panic,
        "excluded": list(table.excluded),
        "shadow_excluded": list(table.shadow_excluded),
        "candidate_weight": table.candidate_weight,
        "excluded_weight": table.excluded_weight,
        "weights": weights,
    }


def get_selection(state: ServerState, params: Mapping[str, str]) -> Answer:
    table = state.get_table(parse_model(params, "model"))
    return table_to_json(table), compute_height_headers(table.height)


def get_reputation(state: ServerState, epoch_index: str) -> Answer:
    """The epoch group's reputations (cached per epoch: fixed when the group forms)."""
    epoch = parse_uint(epoch_index, "epoch_index")
    height = state.chain.height
    reputation = state.get_reputation(epoch)
    return {"epoch_index": epoch, "reputation": reputation}, compute_height_headers(height)


def get_status(state: ServerState) -> Answer:
    chain = state.chain
    runner = (
        state.runner.status()
        if state.runner is not None
        else {"mode": "posted", "state": "posted", "failure": None}
    )
    height = chain.height
    body = {
        "chain_id": chain.chain_id,
        "height": height,
        "app_hash": chain.app_hash.hex(),
        "policy": chain.get_policy_name(),
        "runner": runner,
        "blocks_delivered": state.sink.blocks,
        "caches": {
            "selection": dataclasses.asdict(state.selection_cache.stats()),
            "reputation": dataclasses.asdict(state.reputation_cache.stats()),
        },
        "faults": state.faults.stats() if state.faults is not None else None,
    }
    return body, compute_height_headers(height)


def get_metrics(state: ServerState) -> Answer:
    """The Prometheus text exposition (no height headers: it has ``keepersim_height``)."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE), {}
