"""Build the trace JSON Schema (``schema/trace.schema.json``) from the protobuf descriptors.

The shipped schema file is generated, so the field sets and JSON types of the chain objects
(Params, Participant, Inference, EpochPerformanceSummary) and of keepersim's own ones on the
same lines (keepersim.v1 ExtensionParams, ParticipantNodes, EpochDeclines) can never drift from
the ``.proto`` files: ``tests/trace/test_schema.py`` fails when the file is out of date.
Regenerate with

    .venv/bin/python -m keepersim.trace.schema

JSON shapes follow protobuf JSON with the original field names: 64-bit integers are strings,
32-bit integers are numbers, enums are names. As the chain's REST gateway prints them, an unset
singular message (and an unset proto3 ``optional`` scalar of keepersim's) may be ``null``. Where
the trace format is stricter than the proto (heights are never negative), the schema says so
(``_FIELD_OVERRIDES``).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from keepersim.trace.format import RECORD_KINDS, TRACE_VERSION, UNCLOSED_VERSION
from keepersim.types.chain_json import NON_NULLABLE_FIELDS
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Params,
    Participant,
    ValidationWeight,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

SCHEMA_PATH: Final = Path(__file__).resolve().parent / "schema" / "trace.schema.json"

RECORD_TYPES: Final = RECORD_KINDS

_UINT64: Final = {"$ref": "#/$defs/uint64"}
_INT64: Final = {"$ref": "#/$defs/int64"}

_SCALARS: Final[dict[int, dict[str, Any]]] = {
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT64: _UINT64,
    FieldDescriptor.TYPE_FIXED64: _UINT64,
    FieldDescriptor.TYPE_INT32: {"$ref": "#/$defs/int32"},
    FieldDescriptor.TYPE_SINT32: {"$ref": "#/$defs/int32"},
    FieldDescriptor.TYPE_SFIXED32: {"$ref": "#/$defs/int32"},
    FieldDescriptor.TYPE_UINT32: {"$ref": "#/$defs/uint32"},
    FieldDescriptor.TYPE_FIXED32: {"$ref": "#/$defs/uint32"},
    FieldDescriptor.TYPE_BOOL: {"title": "a boolean", "type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"title": "a string", "type": "string"},
    FieldDescriptor.TYPE_DOUBLE: {"title": "a number", "type": "number"},
    FieldDescriptor.TYPE_FLOAT: {"title": "a number", "type": "number"},
}

# Stricter than the proto: heights in a trace are never negative; ids, executors and models
# must be present for the replay to send the messages.
_FIELD_OVERRIDES: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "Inference": {
        "start_block_height": _UINT64,
        "end_block_height": _UINT64,
        "inference_id": {"$ref": "#/$defs/nonEmptyString"},
        "model": {"$ref": "#/$defs/nonEmptyString"},
        "assigned_to": {"$ref": "#/$defs/nonEmptyString"},
    },
    "Participant": {"address": {"$ref": "#/$defs/nonEmptyString"}},
    "EpochPerformanceSummary": {"participant_id": {"$ref": "#/$defs/nonEmptyString"}},
    "ParticipantNodes": {"address": {"$ref": "#/$defs/nonEmptyString"}},
    "EpochDeclines": {"address": {"$ref": "#/$defs/nonEmptyString"}},
}
_REQUIRED: Final[dict[str, list[str]]] = {
    "Inference": ["inference_id", "model", "assigned_to", "start_block_height"],
    "Participant": ["address"],
    "EpochPerformanceSummary": ["participant_id"],
    "ParticipantNodes": ["address"],
    "EpochDeclines": ["address"],
}


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_nullable(field: FieldDescriptor) -> bool:
    """A singular field the gateway may print as ``null``: a message (unless upstream marks it
    non-nullable) or a proto3 ``optional`` scalar."""
    if _is_repeated(field):
        return False
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        owner = field.containing_type
        assert owner is not None
        return f"{owner.full_name}.{field.name}" not in NON_NULLABLE_FIELDS
    oneof = field.containing_oneof
    return oneof is not None and len(oneof.fields) == 1 and oneof.name == "_" + field.name


def _field_schema(field: FieldDescriptor, defs: dict[str, Any]) -> dict[str, Any]:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        value = _field_schema(entry.fields_by_name["value"], defs)
        return {"title": "a map", "type": "object", "additionalProperties": value}
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        message_type = field.message_type
        assert message_type is not None
        item: dict[str, Any] = {"$ref": f"#/$defs/{_message_schema(message_type, defs)}"}
    elif field.type == FieldDescriptor.TYPE_ENUM:
        enum_type = field.enum_type
        assert enum_type is not None
        names = [v.name for v in enum_type.values]
        item = {"title": f"one of the {enum_type.name} names {names}", "enum": names}
    else:
        item = dict(_SCALARS[field.type])
    if _is_repeated(field):
        return {"title": "a list", "type": "array", "items": item}
    if _is_nullable(field):
        return {"anyOf": [item, {"title": "null (unset)", "type": "null"}]}
    return item


def _message_schema(descriptor: Descriptor, defs: dict[str, Any]) -> str:
    """The ``$defs`` key of a message's schema (added with the schemas of its fields)."""
    key = f"pb.{descriptor.name}"
    existing = defs.get(key)
    if existing is not None:
        if existing and existing["title"] != f"a {descriptor.full_name} object":
            raise ValueError(f"two messages named {descriptor.name}: {existing['title']}")
        return key
    defs[key] = {}  # placeholder against recursion
    overrides = _FIELD_OVERRIDES.get(descriptor.name, {})
    properties: dict[str, Any] = {}
    for field in descriptor.fields:
        properties[field.name] = overrides.get(field.name) or _field_schema(field, defs)
    schema: dict[str, Any] = {
        "title": f"a {descriptor.full_name} object",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    required = _REQUIRED.get(descriptor.name)
    if required:
        schema["required"] = required
    defs[key] = schema
    return key


def build_trace_schema() -> dict[str, Any]:
    """The JSON Schema of one trace line (draft 2020-12)."""
    defs: dict[str, Any] = {
        "uint64": {
            "title": "a uint64 string",
            "type": "string",
            "pattern": "^(0|[1-9][0-9]{0,19})$",
        },
        "int64": {
            "title": "an int64 string",
            "type": "string",
            "pattern": "^-?(0|[1-9][0-9]{0,18})$",
        },
        "uint32": {
            "title": "a uint32 number",
            "type": "integer",
            "minimum": 0,
            "maximum": 4294967295,
        },
        "int32": {
            "title": "an int32 number",
            "type": "integer",
            "minimum": -2147483648,
            "maximum": 2147483647,
        },
        "nonEmptyString": {"title": "a non-empty string", "type": "string", "minLength": 1},
    }
    for message in (
        Params,
        ExtensionParams,
        Participant,
        ParticipantNodes,
        ValidationWeight,
        Inference,
        EpochPerformanceSummary,
        EpochDeclines,
    ):
        _message_schema(message.DESCRIPTOR, defs)

    def record(type_name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "title": f"a {type_name} line",
            "type": "object",
            "properties": {"type": {"const": type_name}, **properties},
            "required": ["type", *required],
            "additionalProperties": False,
        }

    defs["header"] = record(
        "header",
        {
            "version": {
                "title": f"trace format version {TRACE_VERSION} (or {UNCLOSED_VERSION})",
                "enum": [UNCLOSED_VERSION, TRACE_VERSION],
            },
            "chain_id": {"$ref": "#/$defs/nonEmptyString"},
            "source": {"title": "one of ['simulate', 'export']", "enum": ["simulate", "export"]},
            "first_height": _UINT64,
            "last_height": _UINT64,
            "scenario": {
                "title": "a scenario name or object",
                "type": ["string", "object", "null"],
            },
            "seed": {
                "title": "a seed (integer or uint64 string)",
                "anyOf": [{"type": "integer", "minimum": 0}, _UINT64, {"type": "null"}],
            },
            "policy": {"title": "a policy name", "type": ["string", "null"]},
        },
        ["version", "chain_id", "source", "first_height", "last_height"],
    )
    defs["params"] = record(
        "params",
        {
            "height": _UINT64,
            "params": {"$ref": "#/$defs/pb.Params"},
            "extension_params": {"$ref": "#/$defs/pb.ExtensionParams"},
        },
        ["height", "params", "extension_params"],
    )
    defs["participants"] = record(
        "participants",
        {
            "epoch_index": _UINT64,
            "height": _UINT64,
            "participants": {
                "title": "a list of Participant objects",
                "type": "array",
                "items": {"$ref": "#/$defs/pb.Participant"},
            },
            "participant_nodes": {
                "title": "a list of keepersim.v1.ParticipantNodes objects",
                "type": "array",
                "items": {"$ref": "#/$defs/pb.ParticipantNodes"},
            },
            "validation_weights": {
                "title": "a list of ValidationWeight objects",
                "type": "array",
                "items": {"$ref": "#/$defs/pb.ValidationWeight"},
            },
        },
        ["epoch_index", "height", "participants", "participant_nodes"],
    )
    inference = defs["pb.Inference"]
    defs["inference"] = {
        "title": "an inference line (an Inference object with its type)",
        "type": "object",
        "properties": {"type": {"const": "inference"}, **inference["properties"]},
        "required": ["type", *inference["required"]],
        "additionalProperties": False,
    }
    defs["epoch_summary"] = record(
        "epoch_summary",
        {
            "epoch_index": _UINT64,
            "height": _UINT64,
            "summaries": {
                "title": "a list of EpochPerformanceSummary objects",
                "type": "array",
                "items": {"$ref": "#/$defs/pb.EpochPerformanceSummary"},
            },
            "epoch_declines": {
                "title": "a list of keepersim.v1.EpochDeclines objects",
                "type": "array",
                "items": {"$ref": "#/$defs/pb.EpochDeclines"},
            },
        },
        ["epoch_index", "height", "summaries"],
    )
    defs["end"] = record(
        "end",
        {
            "lines": {
                "title": "the number of lines before the closing record",
                "type": "integer",
                "minimum": 1,
            },
            "sha256": {
                "title": "a SHA-256 (64 lowercase hex digits)",
                "type": "string",
                "pattern": "^[0-9a-f]{64}$",
            },
        },
        ["lines", "sha256"],
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "keepersim/trace/schema/trace.schema.json",
        "title": "keepersim trace line",
        "description": (
            "One line of a keepersim trace (JSON lines, docs/trace-format.md): chain objects in "
            "protobuf JSON with the original field names, 64-bit integers as strings, enums as "
            "names. Generated by keepersim.trace.schema from the .proto files; do not edit."
        ),
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"title": f"one of {list(RECORD_TYPES)}", "enum": list(RECORD_TYPES)}
        },
        "allOf": [
            {
                "if": {"properties": {"type": {"const": t}}, "required": ["type"]},
                "then": {"$ref": f"#/$defs/{t}"},
            }
            for t in RECORD_TYPES
        ],
        "$defs": defs,
    }


@cache
def get_schema() -> dict[str, Any]:
    """The shipped trace line schema (``keepersim/trace/schema/trace.schema.json``)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def format_schema(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_schema(build_trace_schema()), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
