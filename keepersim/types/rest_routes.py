"""The REST routes, headers and page limits keepersim's server and exporter share.

Chain routes are the ``google.api.http`` GET bindings of gonka's ``Query`` service
(``inference-chain/proto/inference/inference/query.proto`` at ee730031) under
:data:`CHAIN_PREFIX`; keepersim's own routes live under :data:`KEEPERSIM_PREFIX` (the chain has
no route for extension params, declines or policy state). Templates use the proto's path
parameter names; :func:`compute_route_path` fills them. On public nodes the API sits behind the
proxy's :data:`PROXY_PREFIX` (``proxy/nginx.unified.conf.template:258-276``). Facts:
docs/design/chain-types-v0.2.14.md section 6 and docs/design/chain-rest-api.md section 3.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BLOCK_BY_HEIGHT",
    "CHAIN_PREFIX",
    "CONFIRMATION_POC_EVENTS",
    "DECLINES",
    "DEFAULT_PAGE_LIMIT",
    "EPOCH_GROUP_DATA",
    "EPOCH_GROUP_DATA_ALL",
    "EPOCH_INFO",
    "EPOCH_PERFORMANCE_SUMMARY",
    "EXCLUDED_PARTICIPANTS",
    "EXTENSION_PARAMS",
    "GATEWAY_HEIGHT_HEADER",
    "GET_RANDOM_EXECUTOR",
    "HEIGHT_HEADER",
    "HEIGHT_REQUEST_HEADER",
    "INFERENCE",
    "INFERENCE_ALL",
    "KEEPERSIM_BLOCKS",
    "KEEPERSIM_PREFIX",
    "KEEPERSIM_STATUS",
    "MAX_PAGE_LIMIT",
    "NODE_INFO",
    "PARAMS",
    "PARTICIPANT",
    "PARTICIPANT_ALL",
    "PARTICIPANT_NODES",
    "POLICY",
    "PROXY_PREFIX",
    "REPUTATION",
    "SELECTION",
    "compute_route_path",
]

#: The proxy's location for the chain's REST API on public nodes (stripped before the node).
PROXY_PREFIX: Final = "/chain-api"
CHAIN_PREFIX: Final = "/productscience/inference/inference"
KEEPERSIM_PREFIX: Final = "/keepersim/v1"

# Chain routes (query.proto; response keys in docs/design/chain-types-v0.2.14.md section 6.2).
PARAMS: Final = f"{CHAIN_PREFIX}/params"
EPOCH_INFO: Final = f"{CHAIN_PREFIX}/epoch_info"
PARTICIPANT_ALL: Final = f"{CHAIN_PREFIX}/participant"
PARTICIPANT: Final = f"{CHAIN_PREFIX}/participant/{{index}}"
INFERENCE_ALL: Final = f"{CHAIN_PREFIX}/inference"
INFERENCE: Final = f"{CHAIN_PREFIX}/inference/{{index}}"
GET_RANDOM_EXECUTOR: Final = f"{CHAIN_PREFIX}/get_random_executor"
EPOCH_GROUP_DATA_ALL: Final = f"{CHAIN_PREFIX}/epoch_group_data"
#: ``?model_id=`` selects a model's sub-group; empty is the parent group.
EPOCH_GROUP_DATA: Final = f"{CHAIN_PREFIX}/epoch_group_data/{{epoch_index}}"
#: Added in v0.2.6 (82c43a42); older nodes answer 501 / gRPC code 12. List key
#: ``epochPerformanceSummary``.
EPOCH_PERFORMANCE_SUMMARY: Final = f"{CHAIN_PREFIX}/epoch_performance_summary/{{epoch_index}}"
#: List key ``items``; epoch 0 means the effective epoch.
EXCLUDED_PARTICIPANTS: Final = f"{CHAIN_PREFIX}/excluded_participants/{{epoch_index}}"
#: ``ListConfirmationPoCEvents`` (query.proto:422 at ee730031; handler
#: ``x/inference/keeper/query_confirmation_poc_events.go``): list key ``events``, the epoch's
#: ``ConfirmationPoCEvent`` rows in ``(epoch, event_sequence)`` order, unpaginated; an epoch
#: without events (or unknown) gives ``[]``.
CONFIRMATION_POC_EVENTS: Final = f"{CHAIN_PREFIX}/confirmation_poc_events/{{epoch_index}}"
#: The Cosmos SDK's node info (``default_node_info.network`` is the chain id).
NODE_INFO: Final = "/cosmos/base/tendermint/v1beta1/node_info"
#: The Cosmos SDK's block at a height (``block.header.time``: when the block was made).
BLOCK_BY_HEIGHT: Final = "/cosmos/base/tendermint/v1beta1/blocks/{height}"

# keepersim's own routes (``keepersim serve``).
POLICY: Final = f"{KEEPERSIM_PREFIX}/policy/{{address}}"
SELECTION: Final = f"{KEEPERSIM_PREFIX}/selection"
REPUTATION: Final = f"{KEEPERSIM_PREFIX}/reputation/{{epoch_index}}"
EXTENSION_PARAMS: Final = f"{KEEPERSIM_PREFIX}/params"
PARTICIPANT_NODES: Final = f"{KEEPERSIM_PREFIX}/participant_nodes/{{address}}"
DECLINES: Final = f"{KEEPERSIM_PREFIX}/declines/{{epoch_index}}"
KEEPERSIM_STATUS: Final = f"{KEEPERSIM_PREFIX}/status"
KEEPERSIM_BLOCKS: Final = f"{KEEPERSIM_PREFIX}/blocks"

# Heights (cosmos-sdk server/api/server.go, baseapp/grpcserver.go; chain-rest-api.md 3.4).
#: Request header pinning a query to a height.
HEIGHT_REQUEST_HEADER: Final = "x-cosmos-block-height"
#: Response header of newer SDKs (and keepersim serve).
HEIGHT_HEADER: Final = "X-Cosmos-Block-Height"
#: Response header as grpc-gateway v1 forwards the gRPC header (every chain node sends it).
GATEWAY_HEIGHT_HEADER: Final = "Grpc-Metadata-X-Cosmos-Block-Height"

#: cosmos-sdk ``types/query/pagination.go`` DefaultLimit.
DEFAULT_PAGE_LIMIT: Final = 100
#: keepersim serve's bound on ``pagination.limit`` (and the exporter's ``--page-limit``).
MAX_PAGE_LIMIT: Final = 1000


def compute_route_path(template: str, **values: object) -> str:
    """``template`` with its ``{name}`` parameters filled (``str(value)``; not URL-quoted)."""
    return template.format(**{k: str(v) for k, v in values.items()})
