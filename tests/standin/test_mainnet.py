"""The stand-in mainnet node (tests/standin/mainnet.py) answers every route of the shared
mainnet epochs as the recorded node did: the same JSON for every file, and the very bytes of
the files that hold the gateway's body as it came (compact, in proto declaration order)."""

from __future__ import annotations

import json
from email.message import Message
from typing import Any

import pytest

from keepersim.types.epoch_layout import compute_model_file_name
from standin.chain_node import API_PREFIX, PROXY_PREFIX, ChainHistory, StandinNode
from standin.conftest import mainnet_history  # noqa: F401
from standin.mainnet import MAINNET_DATA, MAINNET_EPOCHS

EPOCH_FILES = {
    "params.json": "/params",
    "epoch_group_data_{e}.json": "/epoch_group_data/{e}",
    "epoch_performance_summary_{e}.json": "/epoch_performance_summary/{e}",
    "excluded_participants_{e}.json": "/excluded_participants/{e}",
    "confirmation_poc_events_{e}.json": "/confirmation_poc_events/{e}",
}


def ask(node: StandinNode, route: str) -> tuple[int, bytes]:
    answer = node.process_request("GET", PROXY_PREFIX + API_PREFIX + route, Message())
    return answer.status, answer.body


def routes_of(epoch: int) -> dict[str, str]:
    """file name -> route, the model sub-groups from the recorded parent group."""
    out = {name.format(e=epoch): route.format(e=epoch) for name, route in EPOCH_FILES.items()}
    parent = json.loads(
        (MAINNET_DATA / f"epoch_{epoch}" / f"epoch_group_data_{epoch}.json").read_text()
    )
    for model in parent["epoch_group_data"]["sub_group_models"]:
        out[compute_model_file_name(epoch, model)] = f"/epoch_group_data/{epoch}?model_id={model}"
    return out


@pytest.fixture(scope="module")
def node(mainnet_history: ChainHistory) -> StandinNode:  # noqa: F811
    return StandinNode(mainnet_history)


@pytest.mark.parametrize("epoch", MAINNET_EPOCHS)
def test_every_recorded_answer_is_served_again(node: StandinNode, epoch: int) -> None:
    folder = MAINNET_DATA / f"epoch_{epoch}"
    routes = routes_of(epoch)
    recorded = {p.name for p in folder.glob("*.json")} - {"metadata.json"}
    assert set(routes) == recorded
    for name, route in routes.items():
        raw = (folder / name).read_bytes()
        status, body = ask(node, route)
        assert status == 200, (route, body[:200])
        assert json.loads(body) == json.loads(raw), name
        if not raw.startswith(b"{\n"):  # the gateway's own bytes, kept as they came
            assert body == raw, name


def test_the_recording_node_lacked_some_v0_2_14_fields(mainnet_history: ChainHistory) -> None:  # noqa: F811
    omitted = mainnet_history.latest.omitted_fields
    assert "inference.inference.EpochGroupData.confirmation_weight_scales" in omitted
    assert "inference.inference.Params.maintenance_params" in omitted
    shared: list[Any] = [json.loads(p.read_text()) for p in MAINNET_DATA.glob("epoch_*/*.json")]
    text = json.dumps(shared)
    for name in omitted:
        assert f'"{name.rsplit(".", 1)[1]}"' not in text, name


def test_pruned_and_unknown_epochs(node: StandinNode, mainnet_history: ChainHistory) -> None:  # noqa: F811
    status, body = ask(node, "/epoch_info")
    info = json.loads(body)
    assert info["latest_epoch"]["index"] == str(MAINNET_EPOCHS[-1])
    assert info["params"]["epoch_params"]["inference_pruning_epoch_threshold"] == "2"
    assert json.loads(ask(node, "/inference")[1])["inference"] == []  # pruned
    assert ask(node, "/epoch_group_data/246")[0] == 404
    assert json.loads(ask(node, "/confirmation_poc_events/246")[1]) == {"events": []}
