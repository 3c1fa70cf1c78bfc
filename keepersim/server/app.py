"""The keepersim node: a Starlette app answering a chain node's REST queries over a :class:`Chain`.

Chain routes, under ``/productscience/inference/inference/`` (the gonka ``Query`` service's HTTP
bindings; bodies are the chain's JSON as its REST gateway prints it, by
:func:`~keepersim.types.chain_json.compute_chain_json`: proto field names in declaration order,
every field present, 64-bit integers as strings, enums as names, ``null`` for unset messages):

=========================================  =================================================
``get_random_executor?model=&request_id=``  ``{"executor": Participant}``; the draw's seed uses
                                            ``request_id`` or a server counter (``srv-N``)
``participant/{index}``                     ``{"participant": Participant}`` (the chain's: no models
                                            or ML nodes; see ``participant_nodes`` below)
``participant``                             ``{"participant": [...], "pagination": {...},
                                            "block_height": "N"}``
``inference/{index}``                       ``{"inference": Inference}`` (declined: ``STARTED``
                                            with ``end_block_height`` set)
``inference``                               ``{"inference": [...], "pagination": {...}}``
``epoch_performance_summary/{epoch_index}`` ``{"epochPerformanceSummary": [...]}`` (the chain's
                                            by-epoch list: one per participant, address order)
``epoch_group_data/{epoch_index}?model_id=`` ``{"epoch_group_data": EpochGroupData}``
``excluded_participants/{epoch_index}``     ``{"items": [...]}`` (0: the current epoch)
``params``                                  ``{"params": Params}`` (the chain's params only)
``epoch_info``                              ``{"block_height", "params", "latest_epoch",
                                            "is_confirmation_poc_active",
                                            "active_confirmation_poc_event": null}``
=========================================  =================================================

plus ``/cosmos/base/tendermint/v1beta1/node_info`` (``default_node_info.network`` is the chain
id). Every chain answer carries ``X-Cosmos-Block-Height`` and, as the chain's REST gateway
sends it, ``Grpc-Metadata-X-Cosmos-Block-Height``: the height it was read at (for
``get_random_executor``, the height of the selection table the executor was drawn from). The
keepersim routes below carry them too (``/metrics`` has ``keepersim_height``). After a runner
failure the chain stays at its last committed block and the headers keep saying so.

Pagination (Cosmos ``PageRequest``): ``pagination.key`` (base64 of the key to start at, as a
previous ``next_key``), ``pagination.offset`` (not with a key), ``pagination.limit`` (default
100, at most 1000), ``pagination.count_total`` (``total`` is counted only then, as in Cosmos;
otherwise ``"0"``). ``pagination.reverse=true`` is not supported (400). A page is read in one
consistent view of the last committed block.

Errors: JSON ``{"code": <gRPC code>, "message": ..., "details": []}`` (the gateway's shape): 400
for a bad parameter (the message names it), 404 for an unknown id / epoch / model, 409 for a
block posted while a runner drives the chain, 503 when no executor can be selected or a cold
cache computation did not finish within the bounded wait (``Retry-After: 1``).

keepersim routes (plain JSON numbers; messages printed as the chain routes print theirs):
``GET /keepersim/v1/policy/{address}``, ``GET /keepersim/v1/selection?model=`` (the selection
table: excluded, fallback, panic, weights), ``GET /keepersim/v1/reputation/{epoch_index}``,
``GET /keepersim/v1/params`` (keepersim's ``ExtensionParams``, which the chain's ``params`` route
does not carry), ``GET /keepersim/v1/participant_nodes/{address}`` (the models and ML nodes a
participant registered, ``keepersim.v1.ParticipantNodes``; the chain's Participant has neither),
``GET /keepersim/v1/declines/{epoch_index}`` (declines per participant in that epoch; the chain's
summaries have no such count), ``GET /keepersim/v1/status``, ``POST /keepersim/v1/blocks`` and
``GET /metrics`` (Prometheus text).

Caches (:class:`~keepersim.server.cache.SingleFlightCache`):

* selection tables, keyed by model, with a TTL of one *block*: the cache's clock is the chain's
  committed height, so an entry computed at height h expires when block h+1 commits. At a new
  block exactly one request recomputes the table; concurrent requests get the previous block's
  table at once (stale-while-refresh; the answer's height says which table was used). A failed
  computation keeps serving the previous table and is retried after ``refresh_retry_blocks``.
  Selection errors that are answers (unknown model, nobody selectable) are cached like tables.
  Only the very first request for a model waits (at most ``cold_wait`` seconds, then 503).
  If a block commits while the table is being recomputed, the new table may serve one block
  longer (the entry's expiry is set from the height at the end of the computation).
* reputations per epoch (the epoch group's), keyed by epoch index, never expiring (they are
  fixed when the group forms).

Chain calls run in the threadpool (``run_in_threadpool``), so the event loop never blocks on
the chain; the chain is thread-safe and a query sees the last committed block only.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import itertools
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from google.protobuf import json_format
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from keepersim.chain import BlockResult, Chain
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.selection import SelectionTable, compute_draw, compute_selection_seed
from keepersim.server.cache import CacheUnavailableError, SingleFlightCache
from keepersim.server.faults import FaultInjector, FaultMiddleware
from keepersim.server.metrics import CONTENT_TYPE, ServerMetrics
from keepersim.server.runner import BlockSink, Runner
from keepersim.store.kv import prefix_end
from keepersim.types import keys, rest_routes
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.errors import (
    BlockError,
    KeepersimError,
    NoExecutorsError,
    UnknownModelError,
)
from keepersim.types.messages import (
    Epoch,
    EpochPerformanceSummary,
    Inference,
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
    Participant,
)
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)
from keepersim.types.rest_routes import (
    CHAIN_PREFIX,
    DEFAULT_PAGE_LIMIT,
    GATEWAY_HEIGHT_HEADER,
    HEIGHT_HEADER,
    MAX_PAGE_LIMIT,
    compute_route_path,
)

__all__ = [
    "CHAIN_PREFIX",
    "GATEWAY_HEIGHT_HEADER",
    "HEIGHT_HEADER",
    "ApiError",
    "BackgroundServer",
    "ServerConfig",
    "ServerState",
    "TableAnswer",
    "create_app",
    "parse_block_json",
]


# gRPC status codes used in error bodies (the gateway's mapping).
_GRPC_CODES = {400: 3, 404: 5, 409: 9, 429: 8, 500: 13, 503: 14}

MESSAGE_TYPES: dict[str, type[Message]] = {
    "MsgStartInference": MsgStartInference,
    "MsgFinishInference": MsgFinishInference,
    "MsgDeclineInference": MsgDeclineInference,
    "MsgUpdateParams": MsgUpdateParams,
    "MsgUpdateExtensionParams": MsgUpdateExtensionParams,
    "MsgRegisterParticipant": MsgRegisterParticipant,
}


class ApiError(Exception):
    """An HTTP error answer: status and message (the message names the bad parameter)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Tunables of one app.

    Attributes:
        cold_wait: seconds a request waits for another request's first computation of a cached
            value before it gets a 503.
        refresh_retry_blocks: blocks to wait after a failed table refresh before trying again
            (the previous table is served meanwhile).
        cache_entries: most keys (models / epochs) each cache keeps.
        default_page_limit / max_page_limit: ``pagination.limit`` default and bound.
    """

    cold_wait: float = 5.0
    refresh_retry_blocks: int = 1
    cache_entries: int = 64
    default_page_limit: int = DEFAULT_PAGE_LIMIT
    max_page_limit: int = MAX_PAGE_LIMIT


@dataclass(frozen=True, slots=True)
class TableAnswer:
    """What the selection cache holds for a model: a table, or the error selection gave."""

    height: int
    table: SelectionTable | None
    error: KeepersimError | None


class ServerState:
    """Everything the routes share: the chain, metrics, caches, the block sink and runner."""

    def __init__(
        self,
        chain: Chain,
        *,
        config: ServerConfig | None = None,
        metrics: ServerMetrics | None = None,
        sink: BlockSink | None = None,
        runner: Runner | None = None,
        faults: FaultInjector | None = None,
        table_compute: Callable[[str], SelectionTable] | None = None,
    ) -> None:
        self.chain = chain
        self.config = config or ServerConfig()
        self.metrics = metrics or ServerMetrics()
        self.sink = sink or (runner.sink if runner is not None else BlockSink(chain, self.metrics))
        if self.sink.metrics is None:
            self.sink.metrics = self.metrics
        self.runner = runner
        self.faults = faults
        self._table_compute = table_compute or chain.get_selection_table
        self._counter = itertools.count()
        self._counter_lock = threading.Lock()
        self.selection_cache: SingleFlightCache[str, TableAnswer] = SingleFlightCache(
            self._compute_table,
            ttl=1.0,
            refresh_retry=float(self.config.refresh_retry_blocks),
            cold_wait=self.config.cold_wait,
            clock=self._height_clock,
            max_entries=self.config.cache_entries,
            on_event=self.metrics.get_cache_hook("selection"),
        )
        self.reputation_cache: SingleFlightCache[int, dict[str, int]] = SingleFlightCache(
            self._compute_reputation,
            ttl=math.inf,
            cold_wait=self.config.cold_wait,
            max_entries=self.config.cache_entries,
            on_event=self.metrics.get_cache_hook("reputation"),
        )
        self.started = time.time()

    def _height_clock(self) -> float:
        return float(self.chain.height)

    def next_request_id(self) -> str:
        with self._counter_lock:
            return f"srv-{next(self._counter)}"

    # cached computations ---------------------------------------------------------------

    def _compute_table(self, model: str) -> TableAnswer:
        height = self.chain.height
        try:
            table = self._table_compute(model)
        except (UnknownModelError, NoExecutorsError) as exc:
            return TableAnswer(height, None, exc)
        return TableAnswer(table.height, table, None)

    def _compute_reputation(self, epoch: int) -> dict[str, int]:
        with self.chain.read() as k:
            group = k.get_epoch_group(epoch, "")
        if group is None:
            raise ApiError(404, f"no epoch group for epoch {epoch}")
        return {m.member_address: int(m.reputation) for m in group.validation_weights}

    def get_table(self, model: str) -> SelectionTable:
        try:
            answer = self.selection_cache.get(model)
        except CacheUnavailableError as exc:
            raise ApiError(
                503,
                f"selection table for model {model!r} is not available yet: its first "
                f"computation did not finish within {self.config.cold_wait:g}s; retry later",
                {"Retry-After": "1"},
            ) from exc
        if answer.error is not None:
            if isinstance(answer.error, UnknownModelError):
                raise ApiError(404, str(answer.error))
            raise ApiError(503, str(answer.error), {"Retry-After": "1"})
        assert answer.table is not None
        return answer.table

    def get_reputation(self, epoch: int) -> dict[str, int]:
        try:
            return self.reputation_cache.get(epoch)
        except CacheUnavailableError as exc:
            raise ApiError(
                503,
                f"reputations of epoch {epoch} are not available yet: their first computation "
                f"did not finish within {self.config.cold_wait:g}s; retry later",
                {"Retry-After": "1"},
            ) from exc

    # blocks ------------------------------------------------------------------------------

    def deliver_posted(self, txs: list[Message], strict: bool) -> BlockResult:
        if self.runner is not None and self.runner.running:
            raise ApiError(
                409,
                f"the chain is driven by a {self.runner.mode} runner; blocks cannot be posted "
                "until it finishes",
            )
        try:
            return self.sink.deliver(txs, strict=strict)
        except BlockError as exc:
            raise ApiError(400, str(exc)) from exc


# --------------------------------------------------------------------------------------------
# Parameter parsing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageRequest:
    key: bytes | None
    offset: int
    limit: int
    count_total: bool


def _parse_bool(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return False
    low = value.lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ApiError(400, f"invalid {name}: expected true or false, got {value!r}")


def _parse_uint(value: str, name: str) -> int:
    if not (value.isascii() and value.isdigit()):  # str.isdigit alone accepts '²
        raise ApiError(400, f"invalid {name}: expected an unsigned integer, got {value!r}")
    n = int(value)
    if n > keys.U64_MAX:
        raise ApiError(400, f"invalid {name}: {value} does not fit in a uint64")
    return n


def _parse_model(params: Mapping[str, str], name: str) -> str:
    """A model id query parameter (default ""): any text without a NUL byte (a store key)."""
    value = params.get(name, "")
    if "\x00" in value:
        raise ApiError(400, f"invalid {name}: expected a model id without NUL bytes, got {value!r}")
    return value


def _decode_key(text: str) -> bytes:
    # A '+' sent unencoded in a query string arrives as a space; accept URL-safe base64 too.
    raw = text.replace(" ", "+").replace("-", "+").replace("_", "/")
    raw += "=" * (-len(raw) % 4)
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400, f"invalid pagination.key: not base64 (as a previous next_key): {text!r}"
        ) from None


def parse_page(params: Mapping[str, str], config: ServerConfig) -> PageRequest:
    key_text = params.get("pagination.key")
    key = _decode_key(key_text) if key_text else None
    offset_text = params.get("pagination.offset")
    offset = _parse_uint(offset_text, "pagination.offset") if offset_text else 0
    if key is not None and offset:
        raise ApiError(400, "invalid pagination.offset: cannot be used with pagination.key")
    limit_text = params.get("pagination.limit")
    limit = config.default_page_limit
    if limit_text:
        limit = _parse_uint(limit_text, "pagination.limit")
        if not 1 <= limit <= config.max_page_limit:
            raise ApiError(
                400,
                f"invalid pagination.limit: must be between 1 and {config.max_page_limit}, "
                f"got {limit}",
            )
    if _parse_bool(params, "pagination.reverse"):
        raise ApiError(400, "invalid pagination.reverse: reverse pagination is not supported")
    return PageRequest(key, offset, limit, _parse_bool(params, "pagination.count_total"))


def _list_prefix(
    store: Any, prefix: bytes, page: PageRequest, decode: Callable[[bytes], Message]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page of a collection: items (JSON) and the PageResponse JSON."""
    end = prefix_end(prefix)
    start = prefix + (page.key or b"")
    items: list[dict[str, Any]] = []
    next_key: bytes | None = None
    skipped = 0
    for key, raw in store.iterate(start, end):
        if skipped < page.offset:
            skipped += 1
            continue
        if len(items) == page.limit:
            next_key = key[len(prefix) :]
            break
        items.append(compute_chain_json(decode(raw)))
    total = 0
    if page.count_total:
        total = sum(1 for _ in store.iterate(prefix, end))
    return items, {
        "next_key": None if next_key is None else base64.b64encode(next_key).decode(),
        "total": str(total),
    }


# --------------------------------------------------------------------------------------------
# Blocks posted as JSON
# --------------------------------------------------------------------------------------------


def parse_block_json(data: Any) -> tuple[list[Message], bool]:
    """A posted block: ``[{"type": "MsgStartInference", ...}, ...]`` or
    ``{"txs": [...], "strict": false}``. Returns the messages and the strict flag."""
    strict = False
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"txs", "strict"})
        if unknown:
            raise ApiError(400, f"invalid block: unknown key(s) {', '.join(map(repr, unknown))}")
        if "strict" in data:
            if not isinstance(data["strict"], bool):
                raise ApiError(400, "invalid strict: expected true or false")
            strict = data["strict"]
        data = data.get("txs", [])
    if not isinstance(data, list):
        raise ApiError(400, 'invalid block: expected a JSON list of messages or {"txs": [...]}')
    txs: list[Message] = []
    for i, item in enumerate(data):
        where = f"txs[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f'invalid {where}: expected an object with a "type"')
        body = dict(item)
        kind = body.pop("type", None) or body.pop("@type", None)
        if not isinstance(kind, str):
            raise ApiError(
                400, f"invalid {where}.type: missing (one of {', '.join(MESSAGE_TYPES)})"
            )
        name = kind.rsplit(".", 1)[-1]
        cls = MESSAGE_TYPES.get(name)
        if cls is None:
            raise ApiError(
                400,
                f"invalid {where}.type: unknown message {kind!r} (one of {', '.join(MESSAGE_TYPES)})",
            )
        try:
            txs.append(json_format.ParseDict(body, cls()))
        except json_format.ParseError as exc:
            raise ApiError(400, f"invalid {where} ({name}): {exc}") from exc
    return txs, strict


def block_result_to_json(result: BlockResult) -> dict[str, Any]:
    return {
        "height": result.height,
        "app_hash": result.app_hash.hex(),
        "events": [{"type": type(e).__name__, **dataclasses.asdict(e)} for e in result.events],
        "tx_results": [dataclasses.asdict(r) for r in result.tx_results],
    }


def table_to_json(table: SelectionTable) -> dict[str, Any]:
    weights: dict[str, int] = {}
    previous = 0
    for address, cumulative in zip(table.addresses, table.cumulative, strict=True):
        weights[address] = cumulative - previous
        previous = cumulative
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


# --------------------------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------------------------

Answer = tuple[Any, dict[str, str]]


def _error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    body = {"code": _GRPC_CODES.get(status, 2), "message": message, "details": []}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


async def _answer(fn: Callable[..., Answer], *args: Any) -> Response:
    try:
        payload, headers = await run_in_threadpool(fn, *args)
    except ApiError as exc:
        return _error_response(exc.status, exc.message, exc.headers)
    except KeepersimError as exc:
        return _error_response(400, f"{type(exc).__name__}: {exc}")
    if isinstance(payload, Response):
        return payload
    return JSONResponse(payload, headers=headers)


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.keepersim
    return state


def _height_headers(height: int) -> dict[str, str]:
    return {HEIGHT_HEADER: str(height), GATEWAY_HEIGHT_HEADER: str(height)}


# chain queries (sync, run in the threadpool) -------------------------------------------------


def _q_random_executor(state: ServerState, params: Mapping[str, str]) -> Answer:
    model = _parse_model(params, "model")
    request_id = params.get("request_id") or state.next_request_id()
    table = state.get_table(model)
    seed = compute_selection_seed(state.chain.chain_id, table.height, model, request_id)
    address = compute_draw(table, seed)
    participant = state.chain.get_participant(address)
    if participant is None:  # pragma: no cover - a table member is always a participant
        raise ApiError(500, f"selected executor {address!r} is not a participant")
    state.metrics.record_selection(table.fallback)
    headers = _height_headers(table.height)
    headers["X-Keepersim-Request-Id"] = request_id
    headers["X-Keepersim-Fallback"] = "true" if table.fallback else "false"
    headers["X-Keepersim-Panic"] = "true" if table.panic else "false"
    return {"executor": compute_chain_json(participant)}, headers


def _q_record(
    state: ServerState, index: str, kind: str, get: Callable[[Keeper, str], Message | None]
) -> Answer:
    """One record by index, as ``{kind: record}``, or a 404 naming it."""
    with state.chain.read() as k:
        height = state.chain.height
        record = get(k, index)
    if record is None:
        raise ApiError(404, f"{kind} {index!r} not found")
    return {kind: compute_chain_json(record)}, _height_headers(height)


def _q_participant(state: ServerState, index: str) -> Answer:
    return _q_record(state, index, "participant", Keeper.get_participant)


def _q_participants(state: ServerState, params: Mapping[str, str]) -> Answer:
    page = parse_page(params, state.config)
    with state.chain.read() as k:
        height = state.chain.height
        items, pagination = _list_prefix(k.store, keys.PARTICIPANTS, page, Participant.FromString)
    body = {"participant": items, "pagination": pagination, "block_height": str(height)}
    return body, _height_headers(height)


def _q_inference(state: ServerState, index: str) -> Answer:
    return _q_record(state, index, "inference", Keeper.get_inference)


def _q_inferences(state: ServerState, params: Mapping[str, str]) -> Answer:
    page = parse_page(params, state.config)
    with state.chain.read() as k:
        height = state.chain.height
        items, pagination = _list_prefix(k.store, keys.INFERENCES, page, Inference.FromString)
    return {"inference": items, "pagination": pagination}, _height_headers(height)


def _q_summaries(state: ServerState, epoch_text: str) -> Answer:
    epoch = _parse_uint(epoch_text, "epoch_index")
    with state.chain.read() as k:
        height = state.chain.height
        latest = k.get_effective_epoch_index()
        if epoch > latest:
            raise ApiError(404, f"epoch {epoch} not found (the latest epoch is {latest})")
        summaries: list[EpochPerformanceSummary] = k.get_summaries_for_epoch(epoch)
    body = {"epochPerformanceSummary": [compute_chain_json(s) for s in summaries]}
    return body, _height_headers(height)


def _q_epoch_group(state: ServerState, epoch_text: str, params: Mapping[str, str]) -> Answer:
    epoch = _parse_uint(epoch_text, "epoch_index")
    model = _parse_model(params, "model_id")
    with state.chain.read() as k:
        height = state.chain.height
        group = k.get_epoch_group(epoch, model)
    if group is None:
        what = f"epoch {epoch}" + (f", model {model!r}" if model else "")
        raise ApiError(404, f"epoch group data not found for {what}")
    return {"epoch_group_data": compute_chain_json(group)}, _height_headers(height)


def _q_excluded(state: ServerState, epoch_text: str) -> Answer:
    epoch = _parse_uint(epoch_text, "epoch_index")
    with state.chain.read() as k:
        height = state.chain.height
        if epoch == 0:
            epoch = k.get_effective_epoch_index()
        items = [compute_chain_json(e) for e in k.iterate_excluded(epoch)]
    return {"items": items}, _height_headers(height)


def _q_params(state: ServerState) -> Answer:
    with state.chain.read() as k:
        height = state.chain.height
        params = k.get_params()
    return {"params": compute_chain_json(params)}, _height_headers(height)


def _q_epoch_info(state: ServerState) -> Answer:
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
    return body, _height_headers(height)


def _q_node_info(state: ServerState) -> Answer:
    from keepersim import __name__ as package

    body = {
        "default_node_info": {
            "network": state.chain.chain_id,
            "moniker": "keepersim",
            "version": _version(),
        },
        "application_version": {"name": package, "app_name": package, "version": _version()},
    }
    return body, _height_headers(state.chain.height)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("keepersim")
    except Exception:  # pragma: no cover - not installed
        return "0"


# keepersim routes ----------------------------------------------------------------------------


def _k_policy(state: ServerState, address: str) -> Answer:
    chain = state.chain
    if chain.get_participant(address) is None:
        raise ApiError(404, f"participant {address!r} not found")
    for _ in range(5):  # read the height around the query: a block may commit in between
        before = chain.height
        view = chain.get_policy_state(address)
        if chain.height == before:
            break
    return {"height": before, **view}, _height_headers(before)


def _k_params(state: ServerState) -> Answer:
    with state.chain.read() as k:
        height = state.chain.height
        ext = k.get_extension_params()
    return {"height": height, "extension_params": compute_chain_json(ext)}, _height_headers(height)


def _k_participant_nodes(state: ServerState, address: str) -> Answer:
    with state.chain.read() as k:
        height = state.chain.height
        if k.get_participant(address) is None:
            raise ApiError(404, f"participant {address!r} not found")
        nodes = k.get_participant_nodes(address) or ParticipantNodes(address=address)
    body = {"height": height, "participant_nodes": compute_chain_json(nodes)}
    return body, _height_headers(height)


def _k_declines(state: ServerState, epoch_text: str) -> Answer:
    epoch = _parse_uint(epoch_text, "epoch_index")
    prefix = keys.EPOCH_DECLINES + keys.encode_u64(epoch)
    with state.chain.read() as k:
        height = state.chain.height
        latest = k.get_effective_epoch_index()
        if epoch > latest:
            raise ApiError(404, f"epoch {epoch} not found (the latest epoch is {latest})")
        entries = [
            EpochDeclines.FromString(raw) for _, raw in k.store.iterate(prefix, prefix_end(prefix))
        ]
    body = {
        "height": height,
        "epoch_index": epoch,
        "declines": {e.address: e.declined_requests for e in entries},
    }
    return body, _height_headers(height)


def _k_selection(state: ServerState, params: Mapping[str, str]) -> Answer:
    table = state.get_table(_parse_model(params, "model"))
    return table_to_json(table), _height_headers(table.height)


def _k_reputation(state: ServerState, epoch_text: str) -> Answer:
    epoch = _parse_uint(epoch_text, "epoch_index")
    height = state.chain.height
    reputation = state.get_reputation(epoch)
    return {"epoch_index": epoch, "reputation": reputation}, _height_headers(height)


def _k_status(state: ServerState) -> Answer:
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
    return body, _height_headers(height)


def _k_post_block(state: ServerState, data: Any) -> Answer:
    txs, strict = parse_block_json(data)
    result = state.deliver_posted(txs, strict)
    return block_result_to_json(result), _height_headers(result.height)


# endpoint wrappers ---------------------------------------------------------------------------


async def random_executor_endpoint(request: Request) -> Response:
    return await _answer(_q_random_executor, _state(request), dict(request.query_params))


async def participant_endpoint(request: Request) -> Response:
    return await _answer(_q_participant, _state(request), request.path_params["index"])


async def participants_endpoint(request: Request) -> Response:
    return await _answer(_q_participants, _state(request), dict(request.query_params))


async def inference_endpoint(request: Request) -> Response:
    return await _answer(_q_inference, _state(request), request.path_params["index"])


async def inferences_endpoint(request: Request) -> Response:
    return await _answer(_q_inferences, _state(request), dict(request.query_params))


async def summaries_endpoint(request: Request) -> Response:
    return await _answer(_q_summaries, _state(request), request.path_params["epoch"])


async def epoch_group_endpoint(request: Request) -> Response:
    return await _answer(
        _q_epoch_group, _state(request), request.path_params["epoch"], dict(request.query_params)
    )


async def excluded_endpoint(request: Request) -> Response:
    return await _answer(_q_excluded, _state(request), request.path_params["epoch"])


async def params_endpoint(request: Request) -> Response:
    return await _answer(_q_params, _state(request))


async def epoch_info_endpoint(request: Request) -> Response:
    return await _answer(_q_epoch_info, _state(request))


async def node_info_endpoint(request: Request) -> Response:
    return await _answer(_q_node_info, _state(request))


async def policy_endpoint(request: Request) -> Response:
    return await _answer(_k_policy, _state(request), request.path_params["address"])


async def selection_endpoint(request: Request) -> Response:
    return await _answer(_k_selection, _state(request), dict(request.query_params))


async def reputation_endpoint(request: Request) -> Response:
    return await _answer(_k_reputation, _state(request), request.path_params["epoch"])


async def keepersim_params_endpoint(request: Request) -> Response:
    return await _answer(_k_params, _state(request))


async def participant_nodes_endpoint(request: Request) -> Response:
    return await _answer(_k_participant_nodes, _state(request), request.path_params["address"])


async def declines_endpoint(request: Request) -> Response:
    return await _answer(_k_declines, _state(request), request.path_params["epoch"])


async def status_endpoint(request: Request) -> Response:
    return await _answer(_k_status, _state(request))


async def post_block_endpoint(request: Request) -> Response:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _error_response(400, f"invalid block: request body is not JSON ({exc})")
    return await _answer(_k_post_block, _state(request), data)


async def metrics_endpoint(request: Request) -> Response:
    body = await run_in_threadpool(_state(request).metrics.render)
    return Response(body, media_type=CONTENT_TYPE)


async def not_found(request: Request, exc: Exception) -> Response:
    return _error_response(404, f"no route for {request.method} {request.url.path}")


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return _error_response(405, f"method {request.method} not allowed on {request.url.path}")


async def server_error(request: Request, exc: Exception) -> Response:
    return _error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def create_app(
    chain: Chain,
    *,
    config: ServerConfig | None = None,
    metrics: ServerMetrics | None = None,
    sink: BlockSink | None = None,
    runner: Runner | None = None,
    faults: FaultInjector | None = None,
    table_compute: Callable[[str], SelectionTable] | None = None,
    start_runner: bool = True,
) -> Starlette:
    """The app over ``chain``. ``runner`` (its sink feeds the same metrics) is started with the
    app's lifespan unless ``start_runner`` is False, and stopped at shutdown. ``faults`` wraps
    the app in :class:`~keepersim.server.faults.FaultMiddleware`. ``table_compute`` replaces
    ``chain.get_selection_table`` (tests inject a slow one)."""
    state = ServerState(
        chain,
        config=config,
        metrics=metrics,
        sink=sink,
        runner=runner,
        faults=faults,
        table_compute=table_compute,
    )
    state.metrics.sync_policy_states(chain)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runner is not None and start_runner and not runner.running:
            runner.start()
        try:
            yield
        finally:
            if runner is not None and start_runner:
                await run_in_threadpool(runner.stop, 10.0)

    r = rest_routes
    epoch = "{epoch}"  # the endpoints' path parameter for an epoch index
    routes = [
        Route(r.GET_RANDOM_EXECUTOR, random_executor_endpoint),
        Route(r.PARTICIPANT_ALL, participants_endpoint),
        Route(r.PARTICIPANT, participant_endpoint),
        Route(r.INFERENCE_ALL, inferences_endpoint),
        Route(r.INFERENCE, inference_endpoint),
        Route(
            compute_route_path(r.EPOCH_PERFORMANCE_SUMMARY, epoch_index=epoch), summaries_endpoint
        ),
        Route(compute_route_path(r.EPOCH_GROUP_DATA, epoch_index=epoch), epoch_group_endpoint),
        Route(compute_route_path(r.EXCLUDED_PARTICIPANTS, epoch_index=epoch), excluded_endpoint),
        Route(r.PARAMS, params_endpoint),
        Route(r.EPOCH_INFO, epoch_info_endpoint),
        Route(r.NODE_INFO, node_info_endpoint),
        Route(r.POLICY, policy_endpoint),
        Route(r.SELECTION, selection_endpoint),
        Route(compute_route_path(r.REPUTATION, epoch_index=epoch), reputation_endpoint),
        Route(r.EXTENSION_PARAMS, keepersim_params_endpoint),
        Route(r.PARTICIPANT_NODES, participant_nodes_endpoint),
        Route(compute_route_path(r.DECLINES, epoch_index=epoch), declines_endpoint),
        Route(r.KEEPERSIM_STATUS, status_endpoint),
        Route(r.KEEPERSIM_BLOCKS, post_block_endpoint, methods=["POST"]),
        Route("/metrics", metrics_endpoint),
    ]
    middleware = []
    if faults is not None:
        middleware.append(Middleware(FaultMiddleware, injector=faults))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: method_not_allowed, 500: server_error},
    )
    app.state.keepersim = state
    return app


# --------------------------------------------------------------------------------------------
# Serving in a background thread (tests, benchmarks)
# --------------------------------------------------------------------------------------------


class BackgroundServer:
    """uvicorn serving ``app`` in a daemon thread on ``host`` (port 0: a free port)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.port = port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread = threading.Thread(
            target=self.server.run, name="keepersim-uvicorn", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn stopped before it started (port in use?)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start within {timeout:g}s")
            time.sleep(0.01)
        for server in self.server.servers:
            for sock in server.sockets:
                self.port = int(sock.getsockname()[1])
                break
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
