"""The shipped schema is the generated one; the reader's validator (jsonschema-rs) agrees with
the reference jsonschema, and the direct protobuf builder with parse_chain_json (the reader's
reference parser)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import (
    declined_line,
    header_line,
    inference_line,
    make_params,
    make_participants,
    params_line,
    participants_line,
    summary_line,
)

from keepersim.trace.build import FastParseError, MessageBuilder
from keepersim.trace.records import InferenceRecord
from keepersim.trace.schema import SCHEMA_PATH, build_trace_schema, format_schema, get_schema
from keepersim.trace.validate import check_line, get_validator
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Params,
    Participant,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes


def test_shipped_schema_is_generated() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == format_schema(build_trace_schema()), (
        "trace.schema.json is stale: run .venv/bin/python -m keepersim.trace.schema"
    )
    jsonschema.Draft202012Validator.check_schema(get_schema())


def test_schema_field_sets_follow_the_protos() -> None:
    defs = get_schema()["$defs"]
    messages = (
        Inference,
        Participant,
        EpochPerformanceSummary,
        Params,
        ExtensionParams,
        ParticipantNodes,
        EpochDeclines,
    )
    for message in messages:
        names = {f.name for f in message.DESCRIPTOR.fields}
        assert set(defs[f"pb.{message.DESCRIPTOR.name}"]["properties"]) == names
    # Every sub-message of the chain's Params has its schema too (e.g. the PoC's).
    assert defs["pb.PocParams"]["title"] == "a inference.inference.PocParams object"
    assert set(defs["params"]["required"]) == {"type", "height", "params", "extension_params"}
    assert set(defs["inference"]["properties"]) == {f.name for f in Inference.DESCRIPTOR.fields} | {
        "type"
    }


def _whole_schema_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(get_schema())


VALID_LINES: list[dict[str, Any]] = [
    header_line(1, 100, scenario="s", seed=3, policy="gonka"),
    params_line(make_params()),
    participants_line(make_participants(3)),  # current_epoch_stats: null (unset, as printed)
    inference_line("a", 3, "p0", "FINISHED", end=5, epoch_id="0", max_tokens="100"),
    inference_line("b", 3, "p0", "EXPIRED", proposal_details=None),
    declined_line("c", 3, "p0"),
    summary_line(
        0,
        40,
        [{"participant_id": "p0", "inference_count": "3", "claimed": False}],
        [{"epoch_index": "0", "address": "p0", "declined_requests": "2"}],
    ),
]


def test_unset_messages_print_null() -> None:
    """The lines above are in the gateway's shape, nulls included (the schema must take them)."""
    assert participants_line(make_participants(1))["participants"][0]["current_epoch_stats"] is None


@pytest.mark.parametrize("line", VALID_LINES)
def test_valid_lines_pass_both_checks(line: dict[str, Any]) -> None:
    assert get_validator(line["type"]).is_valid(line)
    assert check_line(line["type"], line) is None
    assert _whole_schema_validator().is_valid(line)


# Mutations of valid lines: jsonschema-rs must say exactly what jsonschema says.
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "",
            "0",
            "7",
            "-3",
            "18446744073709551616",
            "1.5",
            "x",
            "FINISHED",
            "DONE",
            "1_0",
            " 5",
            "+5",
        ]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "value", "exponent"]), st.integers(), max_size=2),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


@st.composite
def mutated_lines(draw: st.DrawFn) -> Any:
    line = copy.deepcopy(draw(st.sampled_from(VALID_LINES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(line) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = line
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(_VALUES)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "weight", "status", "type"]))] = draw(_VALUES)
    return line


_TYPES = ("header", "params", "participants", "inference", "epoch_summary")
_REFERENCE = {
    t: jsonschema.Draft202012Validator({"$ref": f"#/$defs/{t}", "$defs": get_schema()["$defs"]})
    for t in _TYPES
}


@settings(max_examples=200, deadline=None)
@given(mutated_lines())
def test_validator_agrees_with_jsonschema(line: Any) -> None:
    record_type = line.get("type") if isinstance(line, dict) else None
    if record_type not in _TYPES:
        return
    valid = _REFERENCE[record_type].is_valid(line)
    assert get_validator(record_type).is_valid(line) == valid
    problem = check_line(record_type, line)
    assert (problem is None) == valid
    if problem is not None:  # a field path inside the line and a reason
        field, reason = problem
        assert field.startswith(record_type) and reason


def _check_builder(data: Any, message_class: Any) -> None:
    try:
        expected = parse_chain_json(data, message_class, where="test")
    except ChainJsonError:
        expected = None
    builder = MessageBuilder(message_class.DESCRIPTOR, message_class)
    try:
        kwargs = builder.compute_flat_kwargs(data) if isinstance(data, dict) else None
    except FastParseError:
        kwargs = None
    if kwargs is not None:  # the flat path (nearly every inference line) builds the same
        assert expected is not None and builder.construct(kwargs) == expected
        if message_class is Inference and get_validator("inference").is_valid(
            {"type": "inference", **data}
        ):  # and the record of a valid line (the reader's) reads the same values
            _check_record(kwargs, expected)
    try:
        built = builder.build(data)
    except FastParseError:
        assert kwargs is None
        return  # the reader falls back to parse_chain_json, which decides
    # Whatever the fast builder accepts, parse_chain_json accepts the same way.
    assert expected is not None and built == expected


def _check_record(kwargs: dict[str, Any], inference: Inference) -> None:
    """A record built from the line's values (the reader's way) equals the one built from
    its Inference, value by value, and builds that Inference when asked."""
    fast = InferenceRecord.from_kwargs(7, dict(kwargs))
    slow = InferenceRecord(7, inference)
    for name in InferenceRecord.__slots__:
        if not name.startswith("_"):
            assert getattr(fast, name) == getattr(slow, name), name
    assert fast.is_finished() == slow.is_finished()
    assert fast.is_declined() == slow.is_declined()
    assert fast.inference == inference and fast == slow


@settings(max_examples=150, deadline=None)
@given(mutated_lines())
def test_builder_agrees_with_parse_chain_json(line: Any) -> None:
    if not isinstance(line, dict):
        return
    record_type = line.get("type")
    if record_type == "inference":
        _check_builder({k: v for k, v in line.items() if k != "type"}, Inference)
    elif record_type == "params":
        _check_builder(line.get("params"), Params)
        _check_builder(line.get("extension_params"), ExtensionParams)
    elif record_type == "participants":
        lists = {"participants": Participant, "participant_nodes": ParticipantNodes}
        for key, message_class in lists.items():
            items = line.get(key)
            for item in items if isinstance(items, list) else []:
                _check_builder(item, message_class)


_STATUSES = ["STARTED", "FINISHED", "VALIDATED", "INVALIDATED", "VOTING", "EXPIRED"]
_UINT64 = st.one_of(st.integers(0, 2**64 + 5), st.sampled_from([2**64 - 1, 2**64, 0, 1])).map(str)
_INT64 = st.integers(-(2**63) - 2, 2**63 + 2).map(str)


@st.composite
def flat_inference_lines(draw: st.DrawFn) -> dict[str, Any]:
    """Inference lines with only string values (the reader's flat path): any status, the
    optional fields or not, integers up to and past their ranges."""
    text = st.text(max_size=6)
    line: dict[str, Any] = {
        "inference_id": draw(st.text(min_size=1, max_size=6)),
        "model": draw(st.text(min_size=1, max_size=3)),
        "assigned_to": draw(st.text(min_size=1, max_size=4)),
        "start_block_height": draw(_UINT64),
    }
    optional = {
        "status": st.sampled_from(_STATUSES),
        "end_block_height": _UINT64,
        "executed_by": text,
        "requested_by": text,
        "index": text,
        "prompt_token_count": _UINT64,
        "completion_token_count": _UINT64,
        "max_tokens": _UINT64,
        "epoch_id": _UINT64,
        "actual_cost": _INT64,
        "request_timestamp": _INT64,
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        line[key] = draw(optional[key])
    return line


@settings(max_examples=300, deadline=None)
@given(flat_inference_lines())
def test_flat_inference_lines_build_as_parse_chain_json(data: dict[str, Any]) -> None:
    """The reader's flat path (compute_flat_kwargs, and the record of its values) against
    parse_chain_json, on valid lines and on lines with an integer out of range."""
    assert get_validator("inference").is_valid({"type": "inference", **data})
    builder = MessageBuilder(Inference.DESCRIPTOR, Inference)
    try:
        expected = parse_chain_json(data, Inference, where="test")
    except ChainJsonError:
        with pytest.raises(FastParseError):
            builder.compute_flat_kwargs(data)
        return
    kwargs = builder.compute_flat_kwargs(data)
    assert kwargs is not None and builder.construct(kwargs) == expected
    _check_record(kwargs, expected)


def test_builder_handles_nested_repeated_and_null() -> None:
    line = participants_line(make_participants(2))
    for data, message_class in (
        (line["participants"][0], Participant),
        (line["participant_nodes"][0], ParticipantNodes),
    ):
        built = MessageBuilder(message_class.DESCRIPTOR, message_class).build(data)
        assert built == parse_chain_json(data, message_class, where="test")
    assert built == make_participants(2)[0][1]  # models and ML nodes survive
    params = make_params()
    line = params_line(params)
    assert MessageBuilder(Params.DESCRIPTOR, Params).build(line["params"]) == params.params
    extension = MessageBuilder(ExtensionParams.DESCRIPTOR, ExtensionParams)
    assert extension.build(line["extension_params"]) == params.extension_params
    # null is unset, as parse_chain_json reads it
    empty = MessageBuilder(Participant.DESCRIPTOR, Participant).build(
        {"address": "x", "current_epoch_stats": None}
    )
    assert not empty.HasField("current_epoch_stats")


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        (
            {**participants_line(make_participants(1))},
            "participants.participants[0].current_epoch_stats.inference_count",
            "expected a uint64 string, got 5",
        ),
        (
            {**header_line(1, 9), "seed": -1},
            "header.seed",
            "expected a seed (integer or uint64 string), got -1",
        ),
        ({**header_line(1, 9), "version": 4}, "header.version", "expected trace format version 3"),
    ],
)
def test_nested_errors_name_the_field(line: dict[str, Any], field: str, reason: str) -> None:
    """A nullable message's bad field is named inside it, not as 'not any of the options'."""
    if line["type"] == "participants":
        line["participants"][0]["current_epoch_stats"] = {"inference_count": 5}
    problem = check_line(line["type"], line)
    assert problem is not None
    assert problem[0] == field and problem[1].startswith(reason)


def test_schema_file_is_json() -> None:
    assert json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]["uint64"]["title"]
