"""The one reader of the chain's Params JSON (keepersim.types.chain_params_json): the real
mainnet answers (epochs 247-252, a v0.2.12 node), absent fields filled as the upgrade handlers
fill them, nulls, number forms, errors naming the path."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mainnet_data import EPOCHS, load_live_params

from keepersim.types.chain_defaults import get_chain_default_params
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.chain_params import validate_chain_params
from keepersim.types.chain_params_json import (
    FilledField,
    get_absent_fields,
    parse_chain_params,
    parse_module_params_json,
)
from keepersim.types.chain_upgrades import UPGRADE_FIELD_SOURCES
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import Params
from keepersim.types.params import get_default_params

#: What the live node's params lack against v0.2.14's Params (the node ran v0.2.12: its
#: approved devshard binary is release v0.2.12's, and MiniMax, added by v0.2.13, is missing).
LIVE_ABSENT = [
    "poc_params.validation_vote_threshold_bps",
    "devshard_escrow_params.max_nonce",
    "devshard_escrow_params.devshard_requests_enabled",
    "devshard_escrow_params.default_inference_seal_grace_nonces",
    "devshard_escrow_params.default_inference_seal_grace_seconds",
    "devshard_escrow_params.create_devshard_fee",
    "devshard_escrow_params.fee_per_nonce",
    "devshard_escrow_params.refusal_timeout",
    "devshard_escrow_params.execution_timeout",
    "devshard_escrow_params.validation_rate",
    "devshard_escrow_params.vote_threshold_factor",
    "devshard_escrow_params.default_auto_seal_every_n_nonces",
    "maintenance_params",
]


def collect() -> tuple[list[tuple[str, list[FilledField]]], Any]:
    calls: list[tuple[str, list[FilledField]]] = []
    return calls, lambda where, filled: calls.append((where, filled))


@pytest.mark.parametrize("epoch", EPOCHS)
def test_live_params_lack_exactly_the_v0_2_13_and_v0_2_14_fields(epoch: int) -> None:
    data = load_live_params(epoch)
    assert get_absent_fields(data) == LIVE_ABSENT
    # every field the handlers table cites is one of them, and each is cited
    assert sorted(UPGRADE_FIELD_SOURCES) == sorted(LIVE_ABSENT)


@pytest.mark.parametrize("epoch", EPOCHS)
def test_live_params_read_filled_as_the_upgrade_handlers_fill_them(epoch: int) -> None:
    calls, sink = collect()
    params = parse_chain_params(load_live_params(epoch), where="p.json", on_filled=sink)
    validate_chain_params(params)  # before the fill: "max_nonce must be positive"
    ds = params.devshard_escrow_params
    # v0_2_13 setDevshardEscrowParams: MaxNonce = 1_000_000, DefaultDevshardRequestsEnabled
    assert (ds.max_nonce, ds.devshard_requests_enabled) == (1_000_000, True)
    # v0_2_14 backfillDevshardEscrowParamDefaults: 10 x group_size (16), the params.go defaults
    assert ds.default_inference_seal_grace_nonces == 10 * ds.group_size == 160
    assert ds.default_inference_seal_grace_seconds == 3600
    assert (ds.create_devshard_fee, ds.fee_per_nonce) == (10_000, 1_000)
    assert (ds.refusal_timeout, ds.execution_timeout) == (60, 32 * 60)
    assert (ds.validation_rate, ds.vote_threshold_factor) == (1000, 50)
    assert ds.default_auto_seal_every_n_nonces == 0  # no handler sets it
    # present fields are the node's, even where v0.2.13's handler later changed them
    assert ds.max_escrows_per_epoch == 100
    assert params.poc_params.validation_vote_threshold_bps == 5000
    assert params.maintenance_params == get_chain_default_params().maintenance_params
    assert params.epoch_params.epoch_length == 15391
    assert not params.poc_params.HasField("model_params")  # null: unset
    assert len(calls) == 1 and calls[0][0] == "p.json"
    assert [f.path for f in calls[0][1]] == LIVE_ABSENT
    assert all(f.source for f in calls[0][1])


def test_the_warning_is_one_line_naming_every_field_once(capsys: Any) -> None:
    data = load_live_params(252)
    parse_chain_params(data, where="warn-test.json")
    parse_chain_params(data, where="warn-test.json")  # the same text is not repeated
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keepersim: warning: warn-test.json: 13 ")
    for path in LIVE_ABSENT:
        assert f"{path}=" in err
    assert "v0_2_13 setDevshardEscrowParams" in err and "initMaintenanceParams" in err


def test_complete_params_fill_nothing() -> None:
    calls, sink = collect()
    printed = compute_chain_json(get_chain_default_params())
    assert parse_chain_params(printed, where="x", on_filled=sink) == get_chain_default_params()
    assert calls == []


def test_without_fill_absent_reads_as_zero() -> None:
    data = load_live_params(247)
    calls, sink = collect()
    params = parse_chain_params(data, where="x", fill_absent=False, on_filled=sink)
    assert params.devshard_escrow_params.max_nonce == 0 and calls == []
    assert not params.HasField("maintenance_params")


def test_seal_grace_follows_the_nodes_group_size_with_the_floor() -> None:
    data = load_live_params(247)
    for group_size, expected in ((3, 30), (1, 20), (0, 160)):  # 0: DefaultDevshardGroupSize
        d = copy.deepcopy(data)
        d["devshard_escrow_params"]["group_size"] = group_size
        p = parse_chain_params(d, where="x", on_filled=None)
        assert p.devshard_escrow_params.default_inference_seal_grace_nonces == expected


# Paths of DefaultParams' JSON that no upgrade table entry covers, for the fallback property.
def _paths(data: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if path in UPGRADE_FIELD_SOURCES or any(
            s.startswith(path + ".") for s in UPGRADE_FIELD_SOURCES
        ):
            if isinstance(value, dict):
                out.extend(_paths(value, path))
            continue
        out.append(path)
        if isinstance(value, dict):
            out.extend(_paths(value, path))
    return out


DEFAULT_JSON = compute_chain_json(get_chain_default_params())
FALLBACK_PATHS = _paths(DEFAULT_JSON)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FALLBACK_PATHS), min_size=1, max_size=6, unique=True))
def test_other_absent_fields_take_default_params(paths: list[str]) -> None:
    """Any field no upgrade handler covers, removed from DefaultParams' JSON, reads back as
    DefaultParams' value (a node older than v0.2.12)."""
    data = copy.deepcopy(DEFAULT_JSON)
    removed = []
    for path in paths:
        *parents, name = path.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and name in node:
            del node[name]
            removed.append(path)
    calls, sink = collect()
    assert parse_chain_params(data, where="x", on_filled=sink) == get_chain_default_params()
    filled = [f.path for _, fs in calls for f in fs]
    assert set(filled) <= set(removed) and filled
    assert all("DefaultParams" in f.source for _, fs in calls for f in fs)


def test_number_forms_and_null_read_as_the_gateway_prints() -> None:
    data = compute_chain_json(get_chain_default_params())
    alt = json.loads(json.dumps(data))
    v = alt["validation_params"]
    v["expiration_blocks"] = int(v["expiration_blocks"])  # 64-bit as a number
    v["pass_value"]["value"] = int(v["pass_value"]["value"])  # decimal value as a number
    assert parse_chain_params(alt, where="x") == parse_chain_params(data, where="x")
    alt["dynamic_pricing_params"] = None
    assert not parse_chain_params(alt, where="x").HasField("dynamic_pricing_params")


def test_errors_name_the_file_and_the_path_from_the_root() -> None:
    data = {"params": compute_chain_json(get_chain_default_params()), "extension_params": {}}
    data["params"]["epoch_params"]["epoch_length"] = "x"
    with pytest.raises(ChainJsonError) as info:
        parse_module_params_json(data, where="F.json")
    assert str(info.value).startswith("F.json: params.epoch_params.epoch_length: expected an int64")
    data = {"params": {}, "extension_params": {"cb_miss_threshold_pct": "x"}}
    with pytest.raises(ChainJsonError, match=r"^F: extension_params.cb_miss_threshold_pct: "):
        parse_module_params_json(data, where="F", on_filled=None)
    with pytest.raises(ChainJsonError, match=r"^F: extension_params: required"):
        parse_module_params_json({"params": {}}, where="F")


def test_module_params_json_round_trips_the_defaults() -> None:
    from keepersim.types.chain_params_json import compute_module_params_json

    params = get_default_params()
    assert parse_module_params_json(compute_module_params_json(params), where="x") == params
    assert isinstance(params.params, Params)
