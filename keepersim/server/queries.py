"""The chain's ``Query`` routes: each handler answers one route of :mod:`.routes` as the chain's
REST gateway prints it (:func:`~keepersim.types.chain_json.compute_chain_json`: proto field names
in declaration order, every field present, 64-bit integers as strings, enums as names, ``null``
for unset messages), with the height it read at.

Handlers run in the threadpool and read through the :class:`~keepersim.chain.Chain` front door:
its getters, :meth:`~keepersim.chain.Chain.get_page`, or :meth:`~keepersim.chain.Chain.read` (a
read-only keeper held on one committed block, so several reads agree with one height). Path
parameters arrive by their template names (``index``, ``epoch_index``), the query string as
``params``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from google.protobuf.message import Message

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.selection import compute_draw, compute_selection_seed
from keepersim.server.pagination import get_chain_page, parse_page
from keepersim.server.query_params import parse_model, parse_uint
from keepersim.server.responses import Answer, ApiError, compute_height_headers
from keepersim.server.state import ServerState
from keepersim.types import keys
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.messages import Epoch, EpochPerformanceSummary, Inference, Participant

__all__ = [
    "get_confirmation_poc_events",
    "get_epoch_group",
    "get_epoch_info",
    "get_excluded",
    "get_inference",
    "get_inferences",
    "get_node_info",
    "get_params",
    "get_participant",
    "get_participants",
    "get_random_executor",
    "get_summaries",
]


def get_random_executor(state: ServerState, params: Mapping[str, str]) -> Answer:
    """``{"executor": Participant}`` drawn from the cached table; the draw's seed uses
    ``request_id`` or a server counter (``srv-N``); the height is the table's."""
    model = parse_model(params, "model")
    request_id = params.get("request_id") or state.next_request_id()
    table = state.get_table(model)
    seed = compute_selection_seed(state.chain.chain_id, table.height, model, request_id)
    address = compute_draw(table, seed)
    participant = state.chain.get_participant(address)
    if participant is None:  # pragma: no cover - a table member is always a participant
        raise ApiError(500, f"selected executor {address!r} is not a participant")
    state.metrics.record_selection(table.fallback)
    headers = compute_height_headers(table.height)
    headers["X-Keepersim-Request-Id"] = request_id
    headers["X-Keepersim-Fallback"] = "true" if table.fallback else "false"
    headers["X-Keepersim-Panic"] = "true" if table.panic else "false"
    return {"executor": compute_chain_json(participant)}, headers


def _get_record(
    state: ServerState, index: str, kind: str, get: Callable[[Keeper, str], Message | None]
) -> Answer:
    """One record by index, as ``{kind: record}``, or a 404 naming it."""
    with state.chain.read() as k:
        height = state.chain.height
        record = get(k, index)
    if record is None:
        raise ApiError(404, f"{kind} {index!r} not found")
    return {kind: compute_chain_json(record)}, compute_height_headers(height)


def get_participant(state: ServerState, index: str) -> Answer:
    """``{"participant": Participant}`` (the chain's: no models or ML nodes)."""
    return _get_record(state, index, "participant", Keeper.get_participant)


def get_participants(state: ServerState, params: Mapping[str, str]) -> Answer:
    page = parse_page(params, state.config)
    height, items, pagination = get_chain_page(
        state.chain, keys.PARTICIPANTS, page, Participant.FromString
    )
    body = {"participant": items, "pagination": pagination, "block_height": str(height)}
    return body, compute_height_headers(height)


def get_inference(state: ServerState, index: str) -> Answer:
    """``{"inference": Inference}`` (declined: ``STARTED`` with ``end_block_height`` set)."""
    return _get_record(state, index, "inference", Keeper.get_inference)


def get_inferences(state: ServerState, params: Mapping[str, str]) -> Answer:
    page = parse_page(params, state.config)
    height, items, pagination = get_chain_page(
        state.chain, keys.INFERENCES, page, Inference.FromString
    )
    return {"inference": items, "pagination": pagination}, compute_height_headers(height)


def get_summaries(state: ServerState, epoch_index: str) -> Answer:
    """The chain's by-epoch list: one summary per participant, address order."""
    epoch = parse_uint(epoch_index, "epoch_index")
    with state.chain.read() as k:
        height = state.chain.height
        latest = k.get_effective_epoch_index()
        if epoch > latest:
            raise ApiError(404, f"epoch {epoch} not found (the latest epoch is {latest})")
        summaries: list[EpochPerformanceSummary] = k.get_summaries_for_epoch(epoch)
    body = {"epochPerformanceSummary": [compute_chain_json(s) for s in summaries]}
    return body, compute_height_headers(height)


def get_epoch_group(state: ServerState, epoch_index: str, params: Mapping[str, str]) -> Answer:
    """``{"epoch_group_data": EpochGroupData}``; ``model_id`` selects a model's sub-group."""
    epoch = parse_uint(epoch_index, "epoch_index")
    model = parse_model(params, "model_id")
    with state.chain.read() as k:
        height = state.chain.height
        group = k.get_epoch_group(epoch, model)
    if group is None:
        what = f"epoch {epoch}" + (f", model {model!r}" if model else "")
        raise ApiError(404, f"epoch group data not found for {what}")
    return {"epoch_group_data": compute_chain_json(group)}, compute_height_headers(height)


def get_excluded(state: ServerState, epoch_index: str) -> Answer:
    """``{"items": [...]}``; epoch 0 is the current epoch."""
    epoch = parse_uint(epoch_index, "epoch_index")
    with state.chain.read() as k:
        height = state.chain.height
        if epoch == 0:
            epoch = k.get_effective_epoch_index()
        items = [compute_chain_json(e) for e in k.iterate_excluded(epoch)]
    return {"items": items}, compute_height_headers(height)


def get_confirmation_poc_events(state: ServerState, epoch_index: str) -> Answer:
    """``{"events": []}``: keepersim models no confirmation PoC, so every epoch has none (the
    chain answers ``[]`` too for an epoch without events:
    ``x/inference/keeper/query_confirmation_poc_events.go`` at ee730031)."""
    parse_uint(epoch_index, "epoch_index")
    return {"events": []}, compute_height_headers(state.chain.height)


def get_params(state: ServerState) -> Answer:
    """``{"params": Params}``: the chain's params only (keepersim's are its own route)."""
    with state.chain.read() as k:
        height = state.chain.height
        params = k.get_params()
    return {"params": compute_chain_json(params)}, compute_height_headers(height)


def get_epoch_info(state: ServerState) -> Answer:
    with state.chain.read() as k:
        height = state.chain.height
        params = k.get_params()
        index = k.get_effective_epoch_index()
        epoch = k.get_epoch(index)
    body = {
        "block_height": str(height),
        "params": compute_chain_json(params),
        "latest_epoch": compute_chain_json(epoch if epoch is not None else Epoch(index=index)),
        "is_confirmation_poc_active": False,
        "active_confirmation_poc_event": None,  # no confirmation PoC in keepersim: nil
    }
    return body, compute_height_headers(height)


def get_node_info(state: ServerState) -> Answer:
    """The Cosmos SDK's node info: ``default_node_info.network`` is the chain id."""
    from keepersim import __name__ as package

    body = {
        "default_node_info": {
            "network": state.chain.chain_id,
            "moniker": "keepersim",
            "version": _version(),
        },
        "application_version": {"name": package, "app_name": package, "version": _version()},
    }
    return body, compute_height_headers(state.chain.height)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("keepersim")
    except Exception:  # pragma: no cover - not installed
        return "0"
