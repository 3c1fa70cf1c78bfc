"""Invalid proposals: `keepersim proposal` exits 2 with one line naming the rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepersim.cli import main
from keepersim.proposal import (
    EXTENSION_UPDATE_TYPE,
    PARAMS_UPDATE_TYPE,
    ProposalError,
    compute_proposed_params,
    parse_proposal,
)
from keepersim.types.bech32 import GOV_AUTHORITY, compute_module_address
from keepersim.types.params import get_default_params


def _run_invalid(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    status = main(["proposal", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "proposal.json").exists()
    return lines[0]


def test_unknown_type(proposal_doc, write_proposal, tmp_path, capsys):
    proposal_doc["messages"][0]["@type"] = "/cosmos.bank.v1beta1.MsgSend"
    line = _run_invalid(write_proposal(proposal_doc), tmp_path, capsys)
    assert "messages[0].@type: unknown message type '/cosmos.bank.v1beta1.MsgSend'" in line
    assert PARAMS_UPDATE_TYPE in line and EXTENSION_UPDATE_TYPE in line


@pytest.mark.parametrize(
    "authority",
    [compute_module_address("gov", "cosmos"), compute_module_address("distribution"), "", None],
)
def test_wrong_authority_names_the_gov_account(
    proposal_doc, write_proposal, tmp_path, capsys, authority
):
    proposal_doc["messages"][1]["authority"] = authority
    line = _run_invalid(write_proposal(proposal_doc), tmp_path, capsys)
    assert (
        "messages[1] (/keepersim.v1.MsgUpdateExtensionParams).authority: invalid authority" in line
    )
    assert f"expected the x/gov module account {GOV_AUTHORITY}" in line
    if authority and authority.startswith("cosmos"):
        assert "the chain's is 'gonka'" in line


@pytest.mark.parametrize(
    ("message", "path", "value", "rule"),
    [
        (0, ("epoch_params", "poc_stage_duration"), "0", "poc stage duration must be positive"),
        (1, ("cb_miss_threshold_pct",), 200, "in [1, 100]"),
        (1, ("health_params", "policy"), "nope", "one of ("),
    ],
)
def test_invalid_params_name_the_rule(
    proposal_doc, write_proposal, tmp_path, capsys, message, path, value, rule
):
    key = "params" if message == 0 else "extension_params"
    target = proposal_doc["messages"][message][key]
    for name in path[:-1]:
        target = target[name]
    target[path[-1]] = value
    line = _run_invalid(write_proposal(proposal_doc), tmp_path, capsys)
    assert f"{key}.{'.'.join(path)}" in line
    assert f"breaks rule: {rule}" in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"messages": [', "invalid JSON at line 1, column 15"),
        ("[1, 2]", "expected a proposal object, got a list"),
        ('{"messages": [], "title": "t", "summary": "s"}', "'messages' must be a non-empty list"),
    ],
)
def test_malformed_files(write_proposal, tmp_path, capsys, text, expected):
    line = _run_invalid(write_proposal(text), tmp_path, capsys)
    assert expected in line


def test_missing_file(tmp_path, capsys):
    line = _run_invalid(tmp_path / "nope.json", tmp_path, capsys)
    assert "nope.json: cannot read the proposal" in line


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"title": ""}, "proposal title cannot be empty"),
        ({"summary": " "}, "proposal summary cannot be empty"),
        ({"deposit": "ten gonka"}, "deposit 'ten gonka': invalid coins"),
        ({"expedited": "no"}, "'expedited' must be true or false"),
    ],
)
def test_submit_proposal_basics(proposal_doc, write_proposal, tmp_path, capsys, change, expected):
    proposal_doc.update(change)
    assert expected in _run_invalid(write_proposal(proposal_doc), tmp_path, capsys)


def test_a_part_updated_twice_is_rejected(proposal_doc):
    proposal_doc["messages"].append(proposal_doc["messages"][1])
    with pytest.raises(
        ProposalError, match=r"messages\[2\]: a second /keepersim.v1.MsgUpdateExtensionParams"
    ):
        parse_proposal(proposal_doc, "p.json")


def test_each_message_replaces_its_part_only(proposal_doc):
    both = parse_proposal(proposal_doc, "p.json")
    ext_only = dict(proposal_doc, messages=[proposal_doc["messages"][1]])
    proposal = parse_proposal(ext_only, "p.json")
    assert proposal.params is None and proposal.get_message_types() == [EXTENSION_UPDATE_TYPE]
    base = get_default_params()
    proposed = compute_proposed_params(base, proposal)
    assert proposed.params == base.params
    assert proposed.extension_params.cb_miss_threshold_pct == 10
    assert compute_proposed_params(base, both).params == both.params


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(["messages", "title", "summary", "deposit", "expedited", "metadata"]),
    value=_JSON,
)
def test_any_value_is_accepted_or_a_proposal_error(
    proposal_doc: dict[str, Any], field: str, value: Any
) -> None:
    doc = json.loads(json.dumps(proposal_doc))
    doc[field] = value
    try:
        parse_proposal(doc, "p.json")
    except ProposalError as exc:
        assert str(exc).startswith("p.json") and "\n" not in str(exc)
