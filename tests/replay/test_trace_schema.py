"""The shipped schema is the generated one; the fast paths agree with jsonschema and ParseDict."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import (
    header_line,
    inference_line,
    make_params,
    make_participants,
    params_line,
    participants_line,
    summary_line,
)

from keepersim.replay.fastpath import FastParseError, MessageBuilder, SchemaCompiler
from keepersim.replay.schema_gen import SCHEMA_PATH, build_trace_schema, format_schema
from keepersim.replay.trace import get_schema
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Params,
    Participant,
)


def test_shipped_schema_is_generated() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == format_schema(build_trace_schema()), (
        "trace.schema.json is stale: run .venv/bin/python -m keepersim.replay.schema_gen"
    )
    jsonschema.Draft202012Validator.check_schema(get_schema())


def test_schema_field_sets_follow_the_protos() -> None:
    defs = get_schema()["$defs"]
    for message in (Inference, Participant, EpochPerformanceSummary, Params):
        names = {f.name for f in message.DESCRIPTOR.fields}
        assert set(defs[f"pb.{message.DESCRIPTOR.name}"]["properties"]) == names
    assert set(defs["inference"]["properties"]) == {f.name for f in Inference.DESCRIPTOR.fields} | {
        "type"
    }


def _whole_schema_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(get_schema())


VALID_LINES: list[dict[str, Any]] = [
    header_line(1, 100, scenario="s", seed=3, policy="gonka"),
    params_line(make_params()),
    participants_line(make_participants(3)),
    inference_line("a", 3, "p0", "FINISHED", end=5, epoch_id="0", max_tokens="100"),
    inference_line("b", 3, "p0", "EXPIRED"),
    inference_line("c", 3, "p0", "DECLINED", finished_before_start=False),
    summary_line(0, 40, [{"participant_id": "p0", "inference_count": "3", "claimed": False}]),
]


@pytest.mark.parametrize("line", VALID_LINES)
def test_valid_lines_pass_both_checks(line: dict[str, Any]) -> None:
    compiler = SchemaCompiler(get_schema())
    assert compiler.compile_ref(f"#/$defs/{line['type']}")(line)
    assert _whole_schema_validator().is_valid(line)


# Mutations of valid lines: the compiled check must say exactly what jsonschema says.
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "0", "7", "-3", "18446744073709551616", "1.5", "x", "FINISHED", "DONE"]),
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
_COMPILED = {t: SchemaCompiler(get_schema()).compile_ref(f"#/$defs/{t}") for t in _TYPES}
_REFERENCE = {
    t: jsonschema.Draft202012Validator({"$ref": f"#/$defs/{t}", "$defs": get_schema()["$defs"]})
    for t in _TYPES
}


@settings(max_examples=200, deadline=None)
@given(mutated_lines())
def test_compiled_check_agrees_with_jsonschema(line: Any) -> None:
    record_type = line.get("type") if isinstance(line, dict) else None
    if record_type not in _TYPES:
        return
    assert _COMPILED[record_type](line) == _REFERENCE[record_type].is_valid(line)


@settings(max_examples=150, deadline=None)
@given(mutated_lines())
def test_builder_agrees_with_parse_dict(line: Any) -> None:
    if not isinstance(line, dict) or line.get("type") != "inference":
        return
    body = {k: v for k, v in line.items() if k != "type"}
    try:
        expected: Inference | None = json_format.ParseDict(body, Inference())
    except json_format.ParseError:
        expected = None
    try:
        built = MessageBuilder(Inference.DESCRIPTOR, Inference).build(body)
    except FastParseError:
        return  # the reader falls back to ParseDict, which decides
    # Whatever the fast builder accepts, ParseDict accepts the same way.
    assert expected is not None and built == expected


def test_builder_handles_nested_and_repeated() -> None:
    data = participants_line(make_participants(2))["participants"][0]
    built = MessageBuilder(Participant.DESCRIPTOR, Participant).build(data)
    assert built == json_format.ParseDict(data, Participant())
    params = params_line(make_params())["params"]
    assert MessageBuilder(Params.DESCRIPTOR, Params).build(params) == make_params()


def test_compiler_refuses_unknown_keywords() -> None:
    with pytest.raises(ValueError, match="does not know keywords"):
        SchemaCompiler({}).compile({"type": "string", "format": "date"})


def test_schema_file_is_json() -> None:
    assert json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]["uint64"]["title"]
