"""The chain's JSON as its REST gateway prints it (gogo jsonpb ``OrigName`` + ``EmitDefaults``;
docs/design/chain-types-v0.2.14.md section 6.1) reads into keepersim's messages with no field
dropped, and prints back the same.

The payloads below are what ``/productscience/inference/inference/participant/{id}``,
``/inference/{id}`` and ``/epoch_group_data/{epoch}?model_id=`` return in their payload field:
proto field names (camelCase where the .proto has it), 64-bit integers as decimal strings, 32-bit
ones as numbers, enums by name, unset messages as ``null``, every field present. Which fields
there are comes from the descriptors, so a field keepersim lacks, or one a payload lacks, fails.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from keepersim.types import messages
from keepersim.types.chain_json import compute_chain_json, parse_chain_json

F = FieldDescriptor
SIXTY_FOUR = {F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64}


def decimal(value: int, exponent: int) -> dict[str, Any]:
    return {"value": str(value), "exponent": exponent}


PARTICIPANT_JSON: dict[str, Any] = {
    "index": "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpjnp7du",
    "address": "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpjnp7du",
    "weight": 1250,
    "join_time": "1753228800123",
    "join_height": "1204331",
    "last_inference_time": "1753315200456",
    "inference_url": "http://node-7.example:8080",
    "status": "RAMPING",
    "coin_balance": "9000000000",
    "validator_key": "Ag8d2ENe4v2i1yK3kQm4x0nL3Yq2b8zZx1Y9p0eX0pQm",
    "consecutive_invalid_inferences": "3",
    "worker_public_key": "A1b2C3d4",
    "epochs_completed": 57,
    "current_epoch_stats": {
        "inference_count": "118",
        "missed_requests": "9",
        "earned_coins": "9223372036854775825",
        "rewarded_coins": "4000000",
        "burned_coins": "12",
        "validated_inferences": "31",
        "invalidated_inferences": "2",
        "invalidLLR": decimal(-1098612288668, -12),
        "inactiveLLR": decimal(2484906649788, -12),
        "confirmationPoCRatio": None,
    },
}

INFERENCE_JSON: dict[str, Any] = {
    "index": "inf-7f3a",
    "inference_id": "inf-7f3a",
    "prompt_hash": "9b74c9897bac770ffc029102a200c5de",
    "prompt_payload": '{"model":"Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"}',
    "response_hash": "e3b0c44298fc1c149afbf4c8996fb924",
    "response_payload": '{"choices":[{"index":0}]}',
    "prompt_token_count": "812",
    "completion_token_count": "377",
    "requested_by": "gonka1requester",
    "executed_by": "gonka1executor",
    "status": "VALIDATED",
    "start_block_height": "1204400",
    "end_block_height": "1204403",
    "start_block_timestamp": "1753315200000",
    "end_block_timestamp": "1753315218000",
    "model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "max_tokens": "5000",
    "actual_cost": "1189000",
    "escrow_amount": "5812000",
    "proposal_details": None,
    "epoch_group_id": "88",
    "assigned_to": "gonka1executor",
    "validated_by": ["gonka1val1", "gonka1val2"],
    "node_version": "v3.0.8",
    "epoch_id": "88",
    "epoch_poc_start_block_height": "1198080",
    "transferred_by": "gonka1ta",
    "request_timestamp": "1753315199000000000",
    "transfer_signature": "c2lnMQ==",
    "execution_signature": "c2lnMg==",
    "original_prompt": '{"messages":[{"role":"user"}]}',
    "per_token_price": "1000",
    "original_prompt_hash": "2cf24dba5fb0a30e",
}

#: mainnet's values where docs/design/chain-types-v0.2.14.md section 3 gives them
#: (expiration_blocks 150, downtime 0.98 / 0.99 / 100, binom_test_p0 0.40), Appendix C elsewhere
#: but for the zeros (every scalar here is set, so that a dropped one would show).
VALIDATION_PARAMS_JSON: dict[str, Any] = {
    "false_positive_rate": decimal(5, -2),
    "min_ramp_up_measurements": 10,
    "pass_value": decimal(99, -2),
    "min_validation_average": decimal(1, -2),
    "max_validation_average": decimal(1, 0),
    "expiration_blocks": "150",
    "epochs_to_max": "30",
    "full_validation_traffic_cutoff": "10000",
    "min_validation_halfway": decimal(5, -2),
    "min_validation_traffic_cutoff": "100",
    "miss_percentage_cutoff": decimal(1, -2),
    "miss_requests_penalty": decimal(1, 0),
    "timestamp_expiration": "60",
    "timestamp_advance": "30",
    "estimated_limits_per_block_kb": "2048",
    "invalid_reputation_preserve": decimal(5, -1),
    "bad_participant_invalidation_rate": decimal(2, -1),
    "invalidation_h_threshold": decimal(4, 0),
    "downtime_good_percentage": decimal(98, -2),
    "downtime_bad_percentage": decimal(99, -2),
    "downtime_h_threshold": decimal(1, 2),
    "downtime_reputation_preserve": decimal(25, -2),
    "quick_failure_threshold": decimal(1, -6),
    "binom_test_p0": decimal(4, -1),
    "claim_validation_enabled": True,
    "logprobs_mode": "processed_logprobs",
}

EPOCH_GROUP_DATA_JSON: dict[str, Any] = {
    "poc_start_block_height": "1198080",
    "epoch_group_id": "88",
    "epoch_policy": "gonka1policy",
    "effective_block_height": "1198140",
    "last_block_height": "1213499",
    "member_seed_signatures": [{"member_address": "gonka1a", "signature": "c2VlZA=="}],
    "validation_weights": [
        {
            "member_address": "gonka1a",
            "weight": "52000",
            "reputation": 100,
            "ml_nodes": [
                {
                    "node_id": "node-1",
                    "throughput": "900",
                    "poc_weight": "26000",
                    "timeslot_allocation": [True, False],
                }
            ],
            "confirmation_weight": "51000",
            "voting_power": "7",
        }
    ],
    "unit_of_compute_price": "100",
    "number_of_requests": "15000",
    "previous_epoch_requests": "14200",
    "validation_params": VALIDATION_PARAMS_JSON,
    "total_weight": "52000",
    "model_id": "Qwen/QwQ-32B",
    "sub_group_models": ["Qwen/QwQ-32B"],
    "epoch_index": "88",
    "model_snapshot": {
        "proposed_by": "genesis",
        "id": "Qwen/QwQ-32B",
        "units_of_compute_per_token": "1000",
        "context_window": "32768",
        "quantization": "FP8",
        "coins_per_input_token": "4",
        "coins_per_output_token": "8",
        "hf_repo": "Qwen/QwQ-32B",
        "hf_commit": "976055f8c83f394f35dbd3ab09a285a984907bd0",
        "model_args": ["--quantization", "fp8"],
        "v_ram": "32",
        "throughput_per_nonce": "1000",
        "validation_threshold": decimal(85, -2),
    },
    "total_throughput": "1800",
    "confirmation_weight_scales": [
        {"model_id": "Qwen/QwQ-32B", "weight_scale_factor": decimal(5, -1)}
    ],
}

CASES = [
    (messages.Participant, PARTICIPANT_JSON),
    (messages.Inference, INFERENCE_JSON),
    (messages.EpochGroupData, EPOCH_GROUP_DATA_JSON),
]


def compute_shape_problems(data: Any, descriptor: Any, path: str) -> list[str]:
    """Where ``data`` is not a complete gateway object of ``descriptor``: keys not exactly the
    descriptor's fields in declaration order, a 64-bit integer not a string, a 32-bit one not a
    number, an enum not a name; recursing into every object present."""
    names = [f.name for f in descriptor.fields]
    if list(data) != names:
        missing = [n for n in names if n not in data]
        extra = [k for k in data if k not in names]
        return [
            f"{path or descriptor.name}: keys missing {missing}, extra {extra}, or out of order"
        ]
    problems: list[str] = []
    for field in descriptor.fields:
        value, where = data[field.name], f"{path}.{field.name}" if path else field.name
        items = value if field.is_repeated else [value]
        for item in items:
            if field.type == F.TYPE_MESSAGE:
                if item is not None:
                    problems += compute_shape_problems(item, field.message_type, where)
            elif field.type in SIXTY_FOUR and not isinstance(item, str):
                problems.append(f"{where}: a 64-bit integer prints as a string")
            elif field.type == F.TYPE_ENUM and item not in field.enum_type.values_by_name:
                problems.append(f"{where}: an enum prints as one of its names")
            elif field.type in (F.TYPE_INT32, F.TYPE_UINT32) and not isinstance(item, int):
                problems.append(f"{where}: a 32-bit integer prints as a number")
    return problems


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=lambda x: getattr(x, "__name__", ""))
def test_payload_has_every_field_in_the_gateways_shape(
    cls: type[Message], payload: dict[str, Any]
) -> None:
    assert compute_shape_problems(payload, cls.DESCRIPTOR, "") == []


def compute_defaults(data: Any, descriptor: Any, path: str) -> list[str]:
    """The scalars and lists of ``data`` at their zero value (a dropped field would print
    those, so the round trip could not tell)."""
    out: list[str] = []
    for field in descriptor.fields:
        value, where = data[field.name], f"{path}.{field.name}"
        if field.type == F.TYPE_MESSAGE:
            for item in value if field.is_repeated else [value]:
                if item is not None:
                    out += compute_defaults(item, field.message_type, where)
        if value in ("", "0", 0, False, [], "UNSPECIFIED", "STARTED"):
            out.append(where)
    return out


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=lambda x: getattr(x, "__name__", ""))
def test_payload_sets_every_scalar(cls: type[Message], payload: dict[str, Any]) -> None:
    # exponents are 32-bit numbers: 0 is a real value there (1 = {1, 0})
    defaults = [d for d in compute_defaults(payload, cls.DESCRIPTOR, "") if "exponent" not in d]
    assert defaults == []


def test_shape_check_catches_a_missing_field_and_a_wrong_form() -> None:
    """The completeness check itself can fail."""
    dropped = {k: v for k, v in PARTICIPANT_JSON.items() if k != "coin_balance"}
    assert compute_shape_problems(dropped, messages.Participant.DESCRIPTOR, "") != []
    bad = copy.deepcopy(PARTICIPANT_JSON)
    bad["current_epoch_stats"]["earned_coins"] = 3
    bad["status"] = 4
    assert compute_shape_problems(bad, messages.Participant.DESCRIPTOR, "") == [
        "status: an enum prints as one of its names",
        "current_epoch_stats.earned_coins: a 64-bit integer prints as a string",
    ]


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=lambda x: getattr(x, "__name__", ""))
def test_gateway_json_reads_and_prints_back_unchanged(
    cls: type[Message], payload: dict[str, Any]
) -> None:
    """Nothing is dropped: every key and value, in the gateway's order, comes back."""
    parsed = parse_chain_json(copy.deepcopy(payload), cls, where=f"{cls.__name__} payload")
    printed = compute_chain_json(parsed)
    assert json.dumps(printed) == json.dumps(payload)
    # and the wire form holds it too (nothing kept only on the side)
    again = cls.FromString(parsed.SerializeToString())
    assert compute_chain_json(again) == payload


def test_ramping_survives_json() -> None:
    parsed = parse_chain_json(PARTICIPANT_JSON, messages.Participant, where="participant")
    assert parsed.status == messages.RAMPING == 4
    assert compute_chain_json(parsed)["status"] == "RAMPING"
    assert parsed.current_epoch_stats.earned_coins == 2**63 + 17
    assert not parsed.current_epoch_stats.HasField("confirmationPoCRatio")
