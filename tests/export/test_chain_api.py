"""The exporter's pure rules for the chain's REST API: base URLs, heights from headers,
pruning, Retry-After, and an epoch's members from its groups."""

from __future__ import annotations

import email.utils
import time

from hypothesis import given
from hypothesis import strategies as st

from keepersim.export.chain_api import (
    compute_api_bases,
    compute_earliest_exportable_epoch,
    compute_epoch_members,
    compute_pruned_epochs,
    get_response_height,
)
from keepersim.export.fetch import parse_retry_after
from keepersim.types.messages import EpochGroupData, MLNodeInfo, ValidationWeight


@given(
    st.sampled_from(["http://h:8000", "https://node.example", "http://h/base"]),
    st.sampled_from(["", "/"]),
    st.booleans(),
)
def test_api_bases_never_double_the_prefix(root: str, slash: str, with_prefix: bool) -> None:
    node = root + ("/chain-api" if with_prefix else "") + slash
    bases = compute_api_bases(node)
    assert all("/chain-api/chain-api" not in b and not b.endswith("/") for b in bases)
    if with_prefix:
        assert bases == [root + "/chain-api"]
    else:
        assert bases == [root, root + "/chain-api"]


def test_height_prefers_the_gateway_header() -> None:
    both = {"grpc-metadata-x-cosmos-block-height": "95", "x-cosmos-block-height": "94"}
    assert get_response_height(both) == 95
    assert get_response_height({"x-cosmos-block-height": "7"}) == 7
    assert get_response_height({"grpc-metadata-x-cosmos-block-height": "x"}) is None
    assert get_response_height({}) is None


@given(st.integers(0, 50), st.integers(1, 10), st.integers(0, 50), st.integers(0, 50))
def test_pruned_epochs_are_those_before_the_earliest_exportable(
    latest: int, threshold: int, a: int, span: int
) -> None:
    b = a + span
    earliest = compute_earliest_exportable_epoch(latest, threshold)
    pruned = compute_pruned_epochs((a, b), latest, threshold)
    assert pruned == [e for e in range(a, b + 1) if 1 <= e <= latest - threshold]
    assert all(e < earliest for e in pruned)
    assert earliest == max(latest - threshold + 1, 1)


def test_retry_after_seconds_and_dates() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    got = parse_retry_after(later)
    assert got is not None and 25 <= got <= 31
    assert parse_retry_after(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0


def _weight(address: str, weight: int, reputation: int, *nodes: str) -> ValidationWeight:
    return ValidationWeight(
        member_address=address,
        weight=weight,
        reputation=reputation,
        ml_nodes=[MLNodeInfo(node_id=n, poc_weight=weight) for n in nodes],
    )


def test_members_from_the_parent_and_model_groups() -> None:
    parent = EpochGroupData(
        epoch_index=3,
        sub_group_models=["m1", "m2"],
        validation_weights=[
            _weight("b", 20, 7, "b-p"),
            _weight("a", 10, 5, "a-p"),
            _weight("c", 30, 0, "c-p"),
        ],
    )
    m1 = EpochGroupData(
        epoch_index=3,
        model_id="m1",
        validation_weights=[_weight("a", 10, 0, "a-1"), _weight("stranger", 1, 0, "s")],
    )
    m2 = EpochGroupData(
        epoch_index=3,
        model_id="m2",
        validation_weights=[_weight("a", 10, 0, "a-1", "a-2"), _weight("b", 20, 0, "b-2")],
    )
    members = compute_epoch_members(parent, [m1, m2])
    assert members.weights == {"b": 20, "a": 10, "c": 30}
    assert members.reputations == {"b": 7, "a": 5, "c": 0}
    got = {n.address: (list(n.models), [m.node_id for m in n.ml_nodes]) for n in members.nodes}
    # a member of no model group keeps the parent's ML nodes; one outside the parent is ignored
    assert got == {"a": (["m1", "m2"], ["a-1", "a-2"]), "b": (["m2"], ["b-2"]), "c": ([], ["c-p"])}
