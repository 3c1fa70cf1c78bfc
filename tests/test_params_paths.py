"""``keepersim params`` output, and a real node's params, go back in unchanged through every
path that takes params: a governance entry, a proposal's MsgUpdateParams, a trace's params line
(replay). One reader (keepersim.types.chain_params_json) under all three."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mainnet_data import load_live_params

from keepersim import cli
from keepersim.proposal.load import (
    EXTENSION_UPDATE_TYPE,
    PARAMS_UPDATE_TYPE,
    compute_proposed_params,
    load_proposal,
)
from keepersim.sim.governance import parse_governance
from keepersim.sim.run_errors import GovernanceError
from keepersim.sim.scenario import format_scenario_json, parse_scenario
from keepersim.trace.format import TRACE_VERSION
from keepersim.trace.integrity import append_closing_record
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import ParamsRecord
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.chain_defaults import get_chain_default_params
from keepersim.types.params import (
    PRESETS,
    get_default_extension_params,
    get_default_params,
    get_preset_params,
)

PRESET_NAMES = sorted(PRESETS)
TINY: dict[str, Any] = {
    "name": "paths_tiny",
    "seed": 2,
    "blocks": 40,
    "epoch_length": 60,
    "expiration_blocks": 10,
    "arrivals_per_block": 1.0,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 700, "miss": [[0, 0.1]]},
    ],
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def printed(capsys: pytest.CaptureFixture[str], preset: str) -> dict[str, Any]:
    status, out, err = run(capsys, "params", "--preset", preset)
    assert status == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def other_than(preset: str) -> str:
    return next(name for name in PRESET_NAMES if name != preset)


def live_module_params() -> dict[str, Any]:
    """A real node's answer, with keepersim's default extension params beside it."""
    from keepersim.types.chain_json import compute_chain_json

    return {
        "params": load_live_params(252),
        "extension_params": compute_chain_json(get_default_extension_params()),
    }


# --- governance ------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_governance_entry_takes_keepersim_params_output(
    preset: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = printed(capsys, preset)
    base = get_preset_params(other_than(preset))
    [(height, params)] = parse_governance([{"height": 5, **data}], base, "F")
    assert height == 5 and params == get_preset_params(preset)
    # and from the command line: the run starts and applies it
    scenario = tmp_path / "tiny.json"
    scenario.write_text(format_scenario_json(parse_scenario(TINY, "test")))
    gov = tmp_path / "gov.json"
    gov.write_text(json.dumps([{"height": 5, **data}]))
    argv = ["simulate", str(scenario), "--policy", "none", "--seed", "1", "--store", "memory"]
    status, _, err = run(capsys, *argv, "--governance", str(gov), "--no-progress")
    assert status == 0, err


def test_governance_entry_takes_a_live_nodes_params() -> None:
    """The node's older params: null unsets, absent keys keep the values in force (a patch)."""
    base = get_default_params()
    [(_, params)] = parse_governance([{"height": 5, **live_module_params()}], base, "F")
    assert params.params.epoch_params.epoch_length == 15391
    assert not params.params.poc_params.HasField("model_params")
    ds = params.params.devshard_escrow_params
    assert ds.max_nonce == base.params.devshard_escrow_params.max_nonce  # kept, not zeroed
    assert params.params.maintenance_params == base.params.maintenance_params


def test_governance_null_unsets_and_errors_name_the_path() -> None:
    base = get_preset_params("mainnet")
    [(_, params)] = parse_governance([{"height": 5, "params": {"fee_params": None}}], base, "F")
    assert not params.params.HasField("fee_params")
    with pytest.raises(GovernanceError) as info:
        parse_governance([{"height": 5, "params": {"fee_params": 7}}], base, "F")
    assert str(info.value).startswith("F[0] (height 5): params.fee_params: expected an object")
    with pytest.raises(GovernanceError) as info:
        parse_governance([{"height": 5, "params": {"fee_params": {"x": 1}}}], base, "F")
    assert str(info.value).startswith("F[0] (height 5): params.fee_params.x: unknown field 'x'")
    bad = {"epoch_params": {"epoch_length": "ten"}}
    with pytest.raises(GovernanceError) as info:
        parse_governance([{"height": 5, "params": bad}], base, "F")
    assert str(info.value).startswith("F[0] (height 5): params.epoch_params.epoch_length: ")
    # the chain's rule on a message it needs
    with pytest.raises(GovernanceError, match=r"epoch params cannot be nil"):
        parse_governance([{"height": 5, "params": {"epoch_params": None}}], base, "F")


# --- proposal --------------------------------------------------------------------------------


def write_proposal(path: Path, data: dict[str, Any]) -> Path:
    messages = [
        {"@type": PARAMS_UPDATE_TYPE, "authority": GOV_AUTHORITY, "params": data["params"]},
        {
            "@type": EXTENSION_UPDATE_TYPE,
            "authority": GOV_AUTHORITY,
            "extension_params": data["extension_params"],
        },
    ]
    path.write_text(json.dumps({"messages": messages, "title": "t", "summary": "s"}))
    return path


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_proposal_takes_keepersim_params_output(
    preset: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = printed(capsys, preset)
    base = get_preset_params(other_than(preset))
    proposal = load_proposal(write_proposal(tmp_path / "prop.json", data), base=base)
    assert compute_proposed_params(base, proposal) == get_preset_params(preset)
    assert "warning" not in capsys.readouterr().err  # nothing absent, nothing filled


def test_proposal_takes_a_live_nodes_params(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """MsgUpdateParams replaces the whole Params: the fields the node lacks are filled as the
    upgrades filled them, with a warning naming them."""
    path = write_proposal(tmp_path / "live-prop.json", live_module_params())
    proposal = load_proposal(path)
    assert proposal.params is not None
    assert proposal.params.devshard_escrow_params.max_nonce == 1_000_000
    assert proposal.params.maintenance_params == get_chain_default_params().maintenance_params
    err = capsys.readouterr().err
    assert "keepersim: warning: " in err and "devshard_escrow_params.max_nonce=1000000" in err


# --- replay ----------------------------------------------------------------------------------


def write_trace(path: Path, data: dict[str, Any]) -> Path:
    lines = [
        {
            "type": "header",
            "version": TRACE_VERSION,
            "chain_id": "paths-test",
            "source": "simulate",
            "first_height": "1",
            "last_height": "20",
        },
        {"type": "params", "height": "0", **data},
        {
            "type": "participants",
            "epoch_index": "0",
            "height": "0",
            "participants": [{"index": "p0", "address": "p0", "weight": 100}],
            "participant_nodes": [{"address": "p0", "models": ["m"]}],
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    append_closing_record(path)
    return path


def read_params(path: Path) -> Any:
    return next(r for r in iterate_trace(str(path)) if isinstance(r, ParamsRecord)).params


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_trace_params_line_takes_keepersim_params_output(
    preset: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = write_trace(tmp_path / "t.jsonl", printed(capsys, preset))
    assert read_params(trace) == get_preset_params(preset)
    status, _, err = run(capsys, "replay", str(trace), "--policies", "none", "--no-progress")
    assert status == 0, err


def test_trace_with_a_live_nodes_params_replays(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before the reader: 'devshard_escrow_params.max_nonce: 0 breaks rule'."""
    trace = write_trace(tmp_path / "live.jsonl", live_module_params())
    params = read_params(trace)
    assert params.params.devshard_escrow_params.max_nonce == 1_000_000
    status, _, err = run(capsys, "replay", str(trace), "--policies", "none", "--no-progress")
    assert status == 0, err
    assert f"keepersim: warning: {trace}:2: 13 field(s) absent" in err
