"""The chain's REST API as the exporter reads it: base URLs, pinned heights, pruning, and the
participants of an epoch from its groups (pure functions; facts from
docs/design/chain-rest-api.md sections 0 and 3, and chain-types-v0.2.14.md section 6)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from keepersim.export.fetch import ExportFetchError
from keepersim.types.messages import ACTIVE, EpochGroupData, MLNodeInfo, Participant
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.rest_routes import GATEWAY_HEIGHT_HEADER, HEIGHT_HEADER, PROXY_PREFIX

__all__ = [
    "INT32_MAX",
    "EpochMembers",
    "compute_api_bases",
    "compute_earliest_exportable_epoch",
    "compute_epoch_members",
    "compute_epoch_participants",
    "compute_pruned_epochs",
    "find_api_base",
    "get_response_height",
]

INT32_MAX = 2**31 - 1
T = TypeVar("T")


def compute_api_bases(node: str) -> list[str]:
    """The bases to try for ``--node``, in order: a URL ending in the proxy's ``/chain-api`` is
    the API itself; any other is tried as given (a bare API server, ``keepersim serve``) and then
    with ``/chain-api`` appended (a public node's host root, as the epoch-158 audit passes it)."""
    base = node.rstrip("/")
    if urlsplit(base).path.endswith(PROXY_PREFIX):
        return [base]
    return [base, base + PROXY_PREFIX]


def find_api_base(node: str, get: Callable[[str], T]) -> tuple[str, T]:
    """The first base of :func:`compute_api_bases` at which ``get(base)`` answers, and its
    answer: a 404 that is not the gateway's (no gRPC code: a proxy's or a router's page) moves
    on to the next base; any other failure is raised."""
    bases = compute_api_bases(node)
    for i, base in enumerate(bases):
        try:
            return base, get(base)
        except ExportFetchError as exc:
            if i + 1 < len(bases) and exc.status_code == 404 and exc.grpc_code is None:
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover - compute_api_bases is never empty


def get_response_height(headers: Mapping[str, str]) -> int | None:
    """The height a query was answered at: ``Grpc-Metadata-X-Cosmos-Block-Height`` (every
    gateway), else ``X-Cosmos-Block-Height`` (newer SDKs); ``headers`` has lower-case names."""
    for name in (GATEWAY_HEIGHT_HEADER, HEIGHT_HEADER):
        value = headers.get(name.lower())
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def compute_earliest_exportable_epoch(latest_epoch: int, threshold: int) -> int:
    """The first epoch whose inferences are complete: ``latest - threshold + 1``
    (``x/inference/keeper/pruning.go`` prunes epochs ``1 .. latest - threshold``; epoch 0's
    inferences are never indexed for pruning)."""
    return max(latest_epoch - threshold + 1, 1) if threshold > 0 else 0


def compute_pruned_epochs(epochs: tuple[int, int], latest_epoch: int, threshold: int) -> list[int]:
    """The epochs of ``epochs`` whose inferences the node has pruned (or is pruning)."""
    earliest = compute_earliest_exportable_epoch(latest_epoch, threshold)
    a, b = epochs
    return [e for e in range(a, b + 1) if 1 <= e < earliest]


@dataclass(frozen=True, slots=True)
class EpochMembers:
    """An epoch's members as its groups hold them: parent weight and reputation, and the
    models (sub-groups) and ML nodes of each (address order)."""

    weights: dict[str, int]
    reputations: dict[str, int]
    nodes: list[ParticipantNodes]


def compute_epoch_members(
    parent: EpochGroupData, subgroups: Sequence[EpochGroupData]
) -> EpochMembers:
    """Members of the parent group; a member's models are the sub-groups it is in (in the
    parent's ``sub_group_models`` order) and its ML nodes those of its validation weights there
    (by node id, first seen first), or the parent's for a member of no sub-group."""
    weights = {w.member_address: w.weight for w in parent.validation_weights}
    reputations = {w.member_address: w.reputation for w in parent.validation_weights}
    models: dict[str, list[str]] = {}
    ml_nodes: dict[str, dict[str, MLNodeInfo]] = {a: {} for a in weights}
    for sub in subgroups:
        for weight in sub.validation_weights:
            if weight.member_address not in weights:
                continue
            models.setdefault(weight.member_address, []).append(sub.model_id)
            nodes = ml_nodes[weight.member_address]
            for node in weight.ml_nodes:
                nodes.setdefault(node.node_id, node)
    for weight in parent.validation_weights:
        if weight.member_address not in models:
            nodes = ml_nodes[weight.member_address]
            for node in weight.ml_nodes:
                nodes.setdefault(node.node_id, node)
    nodes_out = [
        ParticipantNodes(
            address=address,
            models=models.get(address, []),
            ml_nodes=list(ml_nodes[address].values()),
        )
        for address in sorted(weights)
        if models.get(address) or ml_nodes[address]
    ]
    return EpochMembers(weights, reputations, nodes_out)


def compute_epoch_participants(
    listed: Iterable[Participant], members: EpochMembers
) -> tuple[list[Participant], list[str]]:
    """The listed participants who are members of the epoch, with the group's weight (statuses
    as listed, RAMPING included), in address order; and the members the listing lacks (they are
    added with their address, weight and status ACTIVE)."""
    by_address = {p.address: p for p in listed}
    out: list[Participant] = []
    missing: list[str] = []
    for address in sorted(members.weights):
        weight = members.weights[address]
        if weight <= 0:
            continue
        p = Participant()
        found = by_address.get(address)
        if found is not None:
            p.CopyFrom(found)
        else:
            missing.append(address)
            p.index = p.address = address
            p.status = ACTIVE  # a member of the epoch's group
        p.weight = min(weight, INT32_MAX)
        out.append(p)
    return out, missing
