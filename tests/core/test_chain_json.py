"""The chain's JSON codec (``keepersim.types.chain_json``): gogo jsonpb's OrigName + EmitDefaults
shape (docs/design/chain-types-v0.2.14.md, section 6.1), round trips over every chain-named
message, golden examples written from the rules and from the chain's real output, and parse
errors naming the field's path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepersim.types.chain_json import NON_NULLABLE_FIELDS, compute_chain_json, parse_chain_json
from keepersim.types.errors import ChainJsonError, KeepersimError
from keepersim.types.messages import (
    ACTIVE,
    INACTIVE,
    CurrentEpochStats,
    Decimal,
    EpochGroupData,
    EpochPerformanceSummary,
    Inference,
    MLNodeInfo,
    MsgUpdateParams,
    Params,
    Participant,
    ValidationWeight,
)
from keepersim.types.pb.inference.inference import (
    epoch_group_data_pb2,
    epoch_pb2,
    epoch_performance_summary_pb2,
    excluded_participant_pb2,
    genesis_pb2,
    inference_pb2,
    inference_timeout_pb2,
    params_pb2,
    participant_pb2,
    tx_pb2,
)
from keepersim.types.pb.keepersim.v1 import extension_params_pb2, health_pb2
from keepersim.types.pb.keepersim.v1 import tx_pb2 as v1_tx_pb2

F = FieldDescriptor
CHAIN_MODULES = (
    participant_pb2,
    inference_pb2,
    inference_timeout_pb2,
    epoch_pb2,
    epoch_group_data_pb2,
    epoch_performance_summary_pb2,
    excluded_participant_pb2,
    params_pb2,
    tx_pb2,
    genesis_pb2,
)
#: Every message of the chain's package that keepersim has today (the vendoring step brings the
#: rest), and keepersim.v1's Tx (oneofs), policy state (bytes) and an override (proto3 optional).
MESSAGES: list[type[Message]] = [
    GetMessageClass(d) for m in CHAIN_MODULES for d in m.DESCRIPTOR.message_types_by_name.values()
] + [v1_tx_pb2.Tx, health_pb2.PolicyStateEntry, extension_params_pb2.ConsecutiveOverride]
RANGES = {
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
}
SIXTY_FOUR = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64}


def is_synthetic(field: FieldDescriptor) -> bool:
    oneof = field.containing_oneof
    return oneof is not None and oneof.name == "_" + field.name


def draw_scalar(data: st.DataObject, field: FieldDescriptor) -> Any:
    kind = field.type
    if kind in RANGES:
        low, high = RANGES[kind]
        return data.draw(st.integers(low, high) | st.sampled_from([low, high, 0]))
    if kind == F.TYPE_BOOL:
        return data.draw(st.booleans())
    if kind == F.TYPE_DOUBLE:
        return data.draw(st.floats(allow_nan=False))
    if kind == F.TYPE_FLOAT:
        return data.draw(st.floats(width=32, allow_nan=False))
    if kind == F.TYPE_STRING:
        return data.draw(st.text(max_size=6))
    if kind == F.TYPE_BYTES:
        return data.draw(st.binary(max_size=6))
    if kind == F.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return data.draw(st.sampled_from(known) | st.integers(-3, 40))  # open enums
    raise AssertionError(f"no strategy for {field.full_name}")  # pragma: no cover


def draw_message(data: st.DataObject, message: Message, depth: int) -> None:
    """Fill ``message`` with random values: every kind of field, set or not."""
    oneof_done: set[str] = set()
    for field in message.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        if oneof is not None and not is_synthetic(field):
            if oneof.name in oneof_done or not data.draw(st.booleans()):
                continue
            oneof_done.add(oneof.name)
        elif not data.draw(st.booleans()):
            continue
        target = getattr(message, field.name)
        if field.type == F.TYPE_MESSAGE:
            if depth <= 0:
                continue
            if field.is_repeated:
                for _ in range(data.draw(st.integers(0, 2))):
                    draw_message(data, target.add(), depth - 1)
            else:
                target.SetInParent()
                draw_message(data, target, depth - 1)
        elif field.is_repeated:
            target.extend(draw_scalar(data, field) for _ in range(data.draw(st.integers(0, 3))))
        else:
            setattr(message, field.name, draw_scalar(data, field))


def set_non_nullable(message: Message) -> Message:
    """``message`` as it reads back: non-nullable fields (Go values) always set."""
    for field in message.DESCRIPTOR.fields:
        if field.type != F.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        if f"{message.DESCRIPTOR.full_name}.{field.name}" in NON_NULLABLE_FIELDS:
            getattr(message, field.name).SetInParent()
        if field.is_repeated:
            for item in getattr(message, field.name):
                set_non_nullable(item)
        elif message.HasField(field.name):
            set_non_nullable(getattr(message, field.name))
    return message


def key_orders(printed: Any, descriptor: Descriptor) -> list[tuple[list[str], list[str]]]:
    """(keys printed, keys the declaration order asks for) for every nested object."""
    out = []
    for field_ in descriptor.fields:
        value = printed.get(field_.name)
        if field_.type == F.TYPE_MESSAGE and value is not None:
            for item in value if field_.is_repeated else [value]:
                out.extend(key_orders(item, field_.message_type))
    expected = [f.name for f in descriptor.fields if f.name in printed]
    return [(list(printed), expected), *out]


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.DESCRIPTOR.full_name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_and_key_order(cls: type[Message], data: st.DataObject) -> None:
    message = cls()
    draw_message(data, message, depth=3)
    printed = compute_chain_json(message)
    wire = json.loads(json.dumps(printed))  # what an HTTP client gets
    expected = set_non_nullable(cls.FromString(message.SerializeToString()))
    assert parse_chain_json(wire, cls, where="test") == expected
    for keys, expected in key_orders(printed, cls.DESCRIPTOR):
        assert keys == expected
    # every field is printed, except unset members of a real oneof (gogo skips a nil oneof)
    for field in cls.DESCRIPTOR.fields:
        in_oneof = field.containing_oneof is not None and not is_synthetic(field)
        assert (field.name in printed) == (not in_oneof or message.HasField(field.name))
        value = printed.get(field.name)
        if field.type in SIXTY_FOUR and value is not None:
            assert all(isinstance(v, str) for v in (value if field.is_repeated else [value]))


def test_summary_golden_from_the_chain() -> None:
    """The shared reference's summary, as a node printed it (gonka-inference-module.md): the
    chain's own message prints it byte for byte."""
    chain = (
        '{"epoch_index":"55","participant_id":"gonka14cu...","inference_count":"1",'
        '"missed_requests":"5","earned_coins":"0","rewarded_coins":"0","burned_coins":"0",'
        '"validated_inferences":"3","invalidated_inferences":"0","claimed":false}'
    )
    message = EpochPerformanceSummary(
        epoch_index=55,
        participant_id="gonka14cu...",
        inference_count=1,
        missed_requests=5,
        validated_inferences=3,
    )
    assert parse_chain_json(json.loads(chain), EpochPerformanceSummary, where="chain") == message
    printed = json.dumps(compute_chain_json(message), separators=(",", ":"))
    assert printed == chain


def test_participant_golden_nulls_and_enums() -> None:
    participant = Participant(
        index="gonka1a",
        address="gonka1a",
        weight=7,
        join_height=12,
        status=ACTIVE,
        coin_balance=-(2**63),
    )
    assert compute_chain_json(participant) == {
        "index": "gonka1a",
        "address": "gonka1a",
        "weight": 7,
        "join_time": "0",
        "join_height": "12",
        "last_inference_time": "0",
        "inference_url": "",
        "status": "ACTIVE",
        "coin_balance": "-9223372036854775808",
        "validator_key": "",
        "consecutive_invalid_inferences": "0",
        "worker_public_key": "",
        "epochs_completed": 0,
        "current_epoch_stats": None,
    }
    assert compute_chain_json(MLNodeInfo(node_id="n1", poc_weight=2**63 - 1)) == {
        "node_id": "n1",
        "throughput": "0",
        "poc_weight": "9223372036854775807",
        "timeslot_allocation": [],
    }
    participant.status = 9  # a number the enum does not know: a bare number
    participant.current_epoch_stats.invalidLLR.CopyFrom(Decimal(value=-98, exponent=-2))
    printed = compute_chain_json(participant)
    assert printed["status"] == 9
    stats = printed["current_epoch_stats"]
    assert list(stats)[7:9] == ["invalidLLR", "inactiveLLR"]  # camelCase where the proto has it
    assert stats["invalidLLR"] == {"value": "-98", "exponent": -2}
    assert stats["inactiveLLR"] is None
    assert stats["inference_count"] == "0"


def test_what_message_to_dict_gets_wrong_is_fixed() -> None:
    """The post-pass is needed: MessageToDict omits unset messages and puts set fields first."""
    message = Inference(actual_cost=5, index="i")
    loose = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    assert list(loose)[:2] != ["index", "inference_id"]
    printed = compute_chain_json(message)
    assert list(printed) == [f.name for f in Inference.DESCRIPTOR.fields]
    assert printed["actual_cost"] == "5" and printed["status"] == "STARTED"
    assert "epoch_params" not in json_format.MessageToDict(Params())
    assert compute_chain_json(Params())["epoch_params"] is None


def test_non_nullable_fields_print_objects() -> None:
    for path in NON_NULLABLE_FIELDS:  # every entry names a real singular message field
        message_name, _, field_name = path.rpartition(".")
        cls = next(c for c in MESSAGES if c.DESCRIPTOR.full_name == message_name)
        field = cls.DESCRIPTOR.fields_by_name[field_name]
        assert field.type == F.TYPE_MESSAGE and not field.is_repeated
    printed = compute_chain_json(MsgUpdateParams(authority="gov"))
    assert printed["params"] == compute_chain_json(Params())
    assert printed["params"]["epoch_params"] is None  # nested ones stay nullable
    assert compute_chain_json(genesis_pb2.GenesisState())["params"] is not None
    assert compute_chain_json(genesis_pb2.GenesisState())["genesis_only_params"] is not None
    assert compute_chain_json(genesis_pb2.GenesisState())["mlnode_version"] is None
    # absent or null, a non-nullable field reads as set and empty (a Go value, always marshalled)
    for data in ({"authority": "gov"}, {"authority": "gov", "params": None}):
        parsed = parse_chain_json(data, MsgUpdateParams, where="t")
        assert parsed.HasField("params") and parsed.params == Params()
        assert parsed.SerializeToString() == b"\n\x03gov\x12\x00"
    parsed_state = parse_chain_json({}, genesis_pb2.GenesisState, where="t")
    assert parsed_state.HasField("params") and not parsed_state.HasField("mlnode_version")


def test_bytes_oneof_and_optional() -> None:
    assert compute_chain_json(health_pb2.PolicyStateEntry()) == {"key": None, "value": None}
    entry = health_pb2.PolicyStateEntry(key=b"\x00\xff", value=b"x")
    assert compute_chain_json(entry) == {"key": "AP8=", "value": "eA=="}
    assert parse_chain_json({"key": None, "value": ""}, health_pb2.PolicyStateEntry, where="t") == (
        health_pb2.PolicyStateEntry()
    )
    assert compute_chain_json(v1_tx_pb2.Tx()) == {}
    tx = v1_tx_pb2.Tx()
    member = v1_tx_pb2.Tx.DESCRIPTOR.oneofs[0].fields[1]
    getattr(tx, member.name).SetInParent()
    assert list(compute_chain_json(tx)) == [member.name]
    # proto3 optional (keepersim's own messages): unset prints null and reads back unset
    cb = extension_params_pb2.ConsecutiveOverride(address="a")
    optional = [f for f in cb.DESCRIPTOR.fields if is_synthetic(f)]
    assert optional, "ConsecutiveOverride has proto3 optional fields"
    printed = compute_chain_json(cb)
    assert all(printed[f.name] is None for f in optional)
    assert not any(
        parse_chain_json(printed, type(cb), where="t").HasField(f.name) for f in optional
    )


def test_parse_accepts_what_gogo_accepts() -> None:
    data = {
        "index": "a",
        "weight": "3",  # int32 quoted
        "join_height": 12,  # int64 unquoted
        "status": 2,  # enum by number
        "epochsCompleted": 4,  # the JSON (camelCase) name
        "current_epoch_stats": None,
        "coin_balance": "-5",
    }
    participant = parse_chain_json(data, Participant, where="t")
    assert participant == Participant(
        index="a", weight=3, join_height=12, status=INACTIVE, epochs_completed=4, coin_balance=-5
    )
    assert not participant.HasField("current_epoch_stats")
    nodes = {
        "member_address": "a",
        "ml_nodes": [{"node_id": "n", "poc_weight": "-5", "timeslot_allocation": [True]}],
    }
    assert parse_chain_json(nodes, ValidationWeight, where="t") == ValidationWeight(
        member_address="a",
        ml_nodes=[MLNodeInfo(node_id="n", poc_weight=-5, timeslot_allocation=[True])],
    )
    group = parse_chain_json({"sub_group_models": None}, EpochGroupData, where="t")
    assert list(group.sub_group_models) == []


#: (data, the path the error names, words in it, the message parsed: Participant if not given)
PARSE_ERRORS: list[tuple[Any, ...]] = [
    ({"index": "a", "new_field": 1}, "new_field", "unknown field"),
    (
        {"current_epoch_stats": {"inference_count": "1", "x": 2}},
        "current_epoch_stats.x",
        "unknown field of inference.inference.CurrentEpochStats",
    ),
    (
        {"ml_nodes": [{}, {"node_id": "n", "y": []}]},
        "ml_nodes[1].y",
        "unknown field",
        ValidationWeight,
    ),
    ({"weight": 1.5}, "weight", "int32"),
    ({"weight": 2**31}, "weight", "does not fit in an int32"),
    ({"join_height": "+5"}, "join_height", "int64"),
    ({"join_height": "1e3"}, "join_height", "int64"),
    ({"join_height": True}, "join_height", "int64"),
    ({"ml_nodes": [{"poc_weight": "x"}]}, "ml_nodes[0].poc_weight", "int64", ValidationWeight),
    (
        {"current_epoch_stats": {"invalidLLR": {"value": []}}},
        "current_epoch_stats.invalidLLR.value",
        "int64",
    ),
    ({"status": "RUNNING"}, "status", "unknown ParticipantStatus name 'RUNNING'"),
    ({"status": "1"}, "status", "unknown ParticipantStatus"),
    ({"sub_group_models": ["m", None]}, "sub_group_models[1]", "null", EpochGroupData),
    ({"sub_group_models": "m"}, "sub_group_models", "list", EpochGroupData),
    ({"index": 5}, "index", "string"),
    (
        {"ml_nodes": [{"timeslot_allocation": ["true"]}]},
        "ml_nodes[0].timeslot_allocation[0]",
        "true or false",
        ValidationWeight,
    ),
    ({"current_epoch_stats": []}, "current_epoch_stats", "CurrentEpochStats"),
    ({"join_height": "1", "joinHeight": "2"}, "joinHeight", "given twice"),
]


@pytest.mark.parametrize(
    ("data", "path", "words", "cls"),
    [row if len(row) == 4 else (*row, Participant) for row in PARSE_ERRORS],
)
def test_parse_errors_name_the_path(
    data: dict[str, Any], path: str, words: str, cls: type[Message]
) -> None:
    with pytest.raises(ChainJsonError) as info:
        parse_chain_json(data, cls, where="GET http://node/participant/a")
    error = info.value
    assert isinstance(error, KeepersimError)
    assert str(error).startswith("GET http://node/participant/a: ")
    assert error.path == path
    assert f": {path}: " in str(error)
    assert words in str(error)
    assert "\n" not in str(error)


def test_parse_rejects_a_non_object_and_a_second_oneof_member() -> None:
    with pytest.raises(ChainJsonError, match=r"^f\.json: expected a JSON object \(Participant\)"):
        parse_chain_json([], Participant, where="f.json")
    members = [f.name for f in v1_tx_pb2.Tx.DESCRIPTOR.oneofs[0].fields[:2]]
    with pytest.raises(ChainJsonError, match="already set") as info:
        parse_chain_json({members[0]: {}, members[1]: {}}, v1_tx_pb2.Tx, where="t")
    assert info.value.path == members[1]


def test_upstream_params_ignore_unknown_reports_every_path() -> None:
    """A newer chain's params (fields after ee730031): strict parsing names the first unknown
    field; ``ignore_unknown`` keeps what keepersim knows and reports every path it skipped."""
    data = {
        "epoch_params": {
            "epoch_length": "40",
            "epoch_future_knob": "1",
            "poc_stage_duration": "10",
            "poc_future_allocation": {"value": "5", "exponent": -1},
        },
        "validation_params": {"expiration_blocks": "150", "future_cutoff": "3"},
        "future_params": None,
    }
    with pytest.raises(ChainJsonError) as info:
        parse_chain_json(data, Params, where="params")
    assert info.value.path == "epoch_params.epoch_future_knob"
    ignored: list[str] = []
    params = parse_chain_json(data, Params, where="params", ignore_unknown=True, ignored=ignored)
    assert ignored == [
        "epoch_params.epoch_future_knob",
        "epoch_params.poc_future_allocation",
        "validation_params.future_cutoff",
        "future_params",
    ]
    assert params.validation_params.expiration_blocks == 150
    assert params.epoch_params.epoch_length == 40 and params.epoch_params.poc_stage_duration == 10
    with pytest.raises(ValueError, match="ignored"):
        parse_chain_json(data, Params, where="params", ignore_unknown=True)


def test_stats_round_trip_keeps_set_but_empty_messages() -> None:
    """A set, all-zero message prints an object (not null) and reads back set."""
    participant = Participant(current_epoch_stats=CurrentEpochStats())
    printed = compute_chain_json(participant)
    assert printed["current_epoch_stats"] is not None
    assert parse_chain_json(printed, Participant, where="t").HasField("current_epoch_stats")


def make_map_message() -> type[Message]:
    """A message with maps, repeated bytes and a double: the chain's messages have none of these
    today, but the codec is generic (the vendored protos may bring some)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    fd = descriptor_pb2.FileDescriptorProto(name="codec_test.proto", package="codec.test")
    fd.syntax = "proto3"
    sub = fd.message_type.add(name="Sub")
    sub.field.add(name="n", number=1, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    top = fd.message_type.add(name="Top")
    for entry_name, key_type, value_type, type_name in (
        ("ByHeightEntry", F.TYPE_INT64, F.TYPE_STRING, ""),
        ("ByNameEntry", F.TYPE_STRING, F.TYPE_MESSAGE, ".codec.test.Sub"),
    ):
        entry = top.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=key_type, label=F.LABEL_OPTIONAL)
        value = entry.field.add(name="value", number=2, type=value_type, label=F.LABEL_OPTIONAL)
        if type_name:
            value.type_name = type_name
    for number, (name, type_name) in enumerate(
        (
            ("by_height", ".codec.test.Top.ByHeightEntry"),
            ("by_name", ".codec.test.Top.ByNameEntry"),
        ),
        start=1,
    ):
        top.field.add(
            name=name,
            number=number,
            type=F.TYPE_MESSAGE,
            label=F.LABEL_REPEATED,
            type_name=type_name,
        )
    top.field.add(name="blobs", number=3, type=F.TYPE_BYTES, label=F.LABEL_REPEATED)
    top.field.add(name="ratio", number=4, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return GetMessageClass(pool.FindMessageTypeByName("codec.test.Top"))


def test_maps_repeated_bytes_and_doubles() -> None:
    cls = make_map_message()
    message = cls()
    for height in (10, -2, 3):
        message.by_height[height] = f"h{height}"
    message.by_name["b"].n = 2
    message.by_name["a"].SetInParent()
    message.blobs.extend([b"", b"\x01"])
    message.ratio = float("inf")
    printed = compute_chain_json(message)
    assert printed == {
        "by_height": {"-2": "h-2", "3": "h3", "10": "h10"},
        "by_name": {"a": {"n": "0"}, "b": {"n": "2"}},
        "blobs": ["", "AQ=="],
        "ratio": "Infinity",
    }
    assert list(printed["by_height"]) == ["-2", "3", "10"]  # key order, numeric for int keys
    assert parse_chain_json(json.loads(json.dumps(printed)), cls, where="t") == message
    with pytest.raises(ChainJsonError) as info:
        parse_chain_json({"by_height": {"x": "h"}}, cls, where="t")
    assert info.value.path == "by_height['x']"
    with pytest.raises(ChainJsonError) as info:
        parse_chain_json({"by_name": {"a": {"m": 1}}}, cls, where="t")
    assert info.value.path == "by_name['a'].m"
    with pytest.raises(ChainJsonError, match="base64"):
        parse_chain_json({"blobs": ["not base64!"]}, cls, where="t")
    with pytest.raises(ChainJsonError, match="JSON number"):
        parse_chain_json({"ratio": "fast"}, cls, where="t")
