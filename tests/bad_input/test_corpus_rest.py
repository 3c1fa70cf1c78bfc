"""Bad REST query and path parameters of ``keepersim serve``'s app: 400 with a JSON error
naming the parameter and what was expected; never a 500."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.chain import Chain
from keepersim.server.app import create_app
from keepersim.types.messages import MLNodeInfo, Participant
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

P = "/productscience/inference/inference"


def _genesis() -> Genesis:
    """Three participants registering model "m" and one ML node; the code defaults with the
    shortest PoC the chain accepts (1 + 1 blocks)."""
    params = get_default_params()
    epoch = params.params.epoch_params
    epoch.poc_stage_duration = epoch.poc_validation_duration = 1
    epoch.poc_exchange_duration = epoch.poc_validation_delay = 0
    epoch.set_new_validators_delay = 0
    genesis = Genesis(chain_id="keepersim-corpus")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for i in range(3):
        genesis.inference.participant_list.append(Participant(address=f"p{i}", weight=1000))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(
                address=f"p{i}",
                models=["m"],
                ml_nodes=[
                    MLNodeInfo(node_id=f"p{i}-n", poc_weight=1000, timeslot_allocation=[True])
                ],
            )
        )
    return genesis


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    chain = Chain.open(memory=True, genesis=_genesis())
    chain.deliver_block([])
    with TestClient(create_app(chain), raise_server_exceptions=False) as c:
        yield c
    chain.close()


# (url, parameter named in the message)
CASES: list[tuple[str, str]] = [
    (f"{P}/participant?pagination.limit=abc", "pagination.limit"),
    (f"{P}/participant?pagination.limit=%C2%B2", "pagination.limit"),  # '²' (str.isdigit)
    (f"{P}/participant?pagination.limit=-1", "pagination.limit"),
    (f"{P}/participant?pagination.limit=0", "pagination.limit"),
    (f"{P}/participant?pagination.limit=5000", "pagination.limit"),
    (f"{P}/inference?pagination.limit=99999999999999999999999", "pagination.limit"),
    (f"{P}/inference?pagination.offset=1e3", "pagination.offset"),
    (f"{P}/participant?pagination.key=!!!", "pagination.key"),
    (f"{P}/participant?pagination.key=AAAA&pagination.offset=3", "pagination.offset"),
    (f"{P}/participant?pagination.count_total=maybe", "pagination.count_total"),
    (f"{P}/participant?pagination.reverse=true", "pagination.reverse"),
    (f"{P}/epoch_performance_summary/abc", "epoch_index"),
    (f"{P}/epoch_performance_summary/%C2%B2", "epoch_index"),
    (f"{P}/epoch_performance_summary/18446744073709551616", "epoch_index"),
    (f"{P}/epoch_group_data/x", "epoch_index"),
    (f"{P}/epoch_group_data/1?model_id=%00", "model_id"),
    (f"{P}/excluded_participants/1.5", "epoch_index"),
    (f"{P}/get_random_executor?model=%00", "model"),
    ("/keepersim/v1/selection?model=%00", "model"),
    ("/keepersim/v1/reputation/-2", "epoch_index"),
    ("/keepersim/v1/declines/-2", "epoch_index"),
]


@pytest.mark.parametrize(("url", "param"), CASES)
def test_bad_parameter_is_a_400_naming_it(client: TestClient, url: str, param: str) -> None:
    answer = client.get(url)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["code"] == 3 and f"invalid {param}" in body["message"], body
    assert "Traceback" not in answer.text


def test_bad_posted_block_is_a_400(client: TestClient) -> None:
    answer = client.post("/keepersim/v1/blocks", content=b"{not json")
    assert answer.status_code == 400 and "invalid block" in answer.json()["message"]


@settings(max_examples=80, deadline=None)
@given(
    param=st.sampled_from(["pagination.limit", "pagination.offset", "pagination.count_total"]),
    value=st.text(min_size=1, max_size=12).filter(
        lambda s: not (s.isascii() and s.isdigit()) and s.lower() not in ("true", "false")
    ),
)
def test_random_bad_pagination_value(client: TestClient, param: str, value: str) -> None:
    if value.strip() in ("", "0", "1"):
        return  # empty means the default; 0 / 1 are booleans for count_total
    answer = client.get(f"{P}/participant", params={param: value})
    assert answer.status_code == 400, (value, answer.text)
    assert param in answer.json()["message"]


@settings(max_examples=40, deadline=None)
@given(
    epoch=st.text(
        min_size=1,
        max_size=10,
        # No surrogates: no HTTP client can send them (they have no UTF-8 form).
        alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
    )
)
def test_random_bad_epoch_index(client: TestClient, epoch: str) -> None:
    if epoch.isascii() and epoch.isdigit():
        return
    for route in ("/keepersim/v1/reputation", "/keepersim/v1/declines"):
        answer = client.get(f"{route}/{quote(epoch, safe='')}")
        assert answer.status_code in (400, 404), (epoch, answer.text)  # 404: not this route
        assert answer.status_code != 500
