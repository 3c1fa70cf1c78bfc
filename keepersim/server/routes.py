"""The route table: every path the node answers and its handler, in one place.

Paths are the templates of :mod:`keepersim.types.rest_routes` (shared with the exporter); a
template's ``{name}`` parameters reach the handler by name. Chain routes (the gonka ``Query``
service's HTTP bindings, handlers in :mod:`.queries`):

=========================================  =================================================
``get_random_executor?model=&request_id=``  ``{"executor": Participant}``
``participant/{index}``                     ``{"participant": Participant}``
``participant``                             ``{"participant": [...], "pagination": {...},
                                            "block_height": "N"}`` (:mod:`.pagination`)
``inference/{index}``                       ``{"inference": Inference}``
``inference``                               ``{"inference": [...], "pagination": {...}}``
``epoch_performance_summary/{epoch_index}`` ``{"epochPerformanceSummary": [...]}``
``epoch_group_data/{epoch_index}?model_id=`` ``{"epoch_group_data": EpochGroupData}``
``excluded_participants/{epoch_index}``     ``{"items": [...]}`` (0: the current epoch)
``confirmation_poc_events/{epoch_index}``   ``{"events": []}`` (no confirmation PoC modelled)
``params``                                  ``{"params": Params}`` (the chain's params only)
``epoch_info``                              ``{"block_height", "params", "latest_epoch",
                                            "is_confirmation_poc_active",
                                            "active_confirmation_poc_event": null}``
=========================================  =================================================

plus ``/cosmos/base/tendermint/v1beta1/node_info``. keepersim's routes (:mod:`.keepersim_queries`):
``policy/{address}``, ``selection?model=``, ``reputation/{epoch_index}``, ``params``,
``participant_nodes/{address}``, ``declines/{epoch_index}``, ``status``, ``POST blocks``
(:mod:`.blocks`) and ``/metrics`` (Prometheus text). :data:`UNSERVED` names the shared routes
the node does not answer (they get the 404 of an unknown route).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from keepersim.server import keepersim_queries as ks
from keepersim.server import queries as q
from keepersim.server.blocks import process_posted_block
from keepersim.server.responses import Answer, answer
from keepersim.server.state import ServerState
from keepersim.types import rest_routes as r

__all__ = ["METRICS", "ROUTE_TABLE", "UNSERVED", "RouteSpec", "build_routes", "get_state"]

#: Prometheus exposition (not a chain route, so not in :mod:`keepersim.types.rest_routes`).
METRICS: Final = "/metrics"


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route: its path template, the handler and what the handler takes besides the state
    and the path parameters: the query string as ``params``, the request body as ``body``."""

    path: str
    handler: Callable[..., Answer]
    query: bool = False
    body: bool = False
    method: str = "GET"


ROUTE_TABLE: Final[tuple[RouteSpec, ...]] = (
    RouteSpec(r.GET_RANDOM_EXECUTOR, q.get_random_executor, query=True),
    RouteSpec(r.PARTICIPANT_ALL, q.get_participants, query=True),
    RouteSpec(r.PARTICIPANT, q.get_participant),
    RouteSpec(r.INFERENCE_ALL, q.get_inferences, query=True),
    RouteSpec(r.INFERENCE, q.get_inference),
    RouteSpec(r.EPOCH_PERFORMANCE_SUMMARY, q.get_summaries),
    RouteSpec(r.EPOCH_GROUP_DATA, q.get_epoch_group, query=True),
    RouteSpec(r.EXCLUDED_PARTICIPANTS, q.get_excluded),
    RouteSpec(r.CONFIRMATION_POC_EVENTS, q.get_confirmation_poc_events),
    RouteSpec(r.PARAMS, q.get_params),
    RouteSpec(r.EPOCH_INFO, q.get_epoch_info),
    RouteSpec(r.NODE_INFO, q.get_node_info),
    RouteSpec(r.POLICY, ks.get_policy),
    RouteSpec(r.SELECTION, ks.get_selection, query=True),
    RouteSpec(r.REPUTATION, ks.get_reputation),
    RouteSpec(r.EXTENSION_PARAMS, ks.get_extension_params),
    RouteSpec(r.PARTICIPANT_NODES, ks.get_participant_nodes),
    RouteSpec(r.DECLINES, ks.get_declines),
    RouteSpec(r.KEEPERSIM_STATUS, ks.get_status),
    RouteSpec(r.KEEPERSIM_BLOCKS, process_posted_block, body=True, method="POST"),
    RouteSpec(METRICS, ks.get_metrics),
)

#: Shared routes the node does not answer, and why.
UNSERVED: Final[dict[str, str]] = {
    r.EPOCH_GROUP_DATA_ALL: "the list of every epoch's groups: the exporter reads groups by epoch",
    r.BLOCK_BY_HEIGHT: "keepersim's blocks have heights, not times",
}


def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.keepersim
    return state


def _get_endpoint(spec: RouteSpec) -> Callable[[Request], Awaitable[Response]]:
    """The Starlette endpoint calling ``spec.handler`` in the threadpool."""

    async def endpoint(request: Request) -> Response:
        kwargs: dict[str, Any] = dict(request.path_params)
        if spec.query:
            kwargs["params"] = dict(request.query_params)
        if spec.body:
            kwargs["body"] = await request.body()
        return await answer(spec.handler, get_state(request), **kwargs)

    return endpoint


def build_routes(table: tuple[RouteSpec, ...] = ROUTE_TABLE) -> list[Route]:
    """The Starlette routes of ``table``."""
    return [
        Route(s.path, _get_endpoint(s), methods=[s.method], name=s.handler.__name__) for s in table
    ]
