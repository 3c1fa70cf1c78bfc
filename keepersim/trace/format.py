"""The trace format (``docs/trace-format.md``): its version, record kinds, line order, header, and
the line codec (one JSON object per line, chain objects in the chain's REST JSON).

The order of lines at one height is :data:`LINE_ORDER`: params, epoch_summary, participants,
then the inferences that started at that height (by id). The writer sorts by
(height, :func:`get_line_rank`, key); the reader checks the same order. The last line is the
closing record (:func:`build_end_line`, checked by :mod:`keepersim.trace.integrity`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import orjson
from google.protobuf.message import Message

from keepersim.types.chain_json import compute_chain_json
from keepersim.types.messages import FINISHED, INVALIDATED, VALIDATED, VOTING, Inference

__all__ = [
    "DECLINE_REASON",
    "FINISHED_LIKE",
    "LINE_ORDER",
    "RECORD_KINDS",
    "TRACE_VERSION",
    "UNCLOSED_VERSION",
    "VERSION_1_ERROR",
    "build_end_line",
    "build_header_line",
    "build_inference_line",
    "build_params_line",
    "build_participants_line",
    "build_summary_line",
    "decode_line",
    "encode_line",
    "encode_message",
    "get_line_rank",
    "get_status_name",
]

#: The trace format's version (the header's ``version``): 2 brought the chain's own message
#: shapes, 3 the closing record (a cut trace is told from a whole one).
TRACE_VERSION: Final = 3

#: The version before the closing record: still read, with a warning that a cut cannot be told.
UNCLOSED_VERSION: Final = 2

#: Every line's ``type`` (``end``: the closing record, the last line).
RECORD_KINDS: Final = ("header", "params", "participants", "inference", "epoch_summary", "end")

#: The order of the kinds of lines at one height (the header is first of all).
LINE_ORDER: Final = ("params", "epoch_summary", "participants", "inference")

#: Statuses that imply the executor finished the inference (validation comes after a finish).
FINISHED_LIKE: Final = frozenset({FINISHED, VALIDATED, INVALIDATED, VOTING})

#: The reason of a replayed decline. A trace's declines are capacity pushback (the only decline
#: keepersim has), so a replay sends the reason the simulator gave them.
DECLINE_REASON: Final = "capacity"

VERSION_1_ERROR: Final = (
    "trace format version 1 is no longer read: version 2 has the chain's own message shapes "
    "(docs/trace-format.md); re-create the trace with `keepersim simulate ... --trace-out` or "
    "`keepersim export`"
)

_RANKS: Final = {kind: rank for rank, kind in enumerate(LINE_ORDER)}


def get_line_rank(kind: str) -> int:
    """Where a line of ``kind`` goes among the lines of its height (:data:`LINE_ORDER`)."""
    return _RANKS[kind]


def get_status_name(status: int) -> str:
    value = Inference.DESCRIPTOR.fields_by_name["status"].enum_type
    assert value is not None
    found = value.values_by_number.get(status)
    return found.name if found is not None else str(status)


def encode_message(msg: Message) -> dict[str, Any]:
    """A message as the node's REST API shows it (original names, defaults, u64 as strings)."""
    return compute_chain_json(msg)


def encode_line(obj: dict[str, Any]) -> str:
    """One trace line (without its newline): compact JSON, UTF-8 text kept as is."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


#: The JSON value of one line (``decode_line(raw)``, raw bytes or str); raises
#: ``orjson.JSONDecodeError`` (a ValueError). orjson's own function: a wrapper would cost a call
#: per line.
decode_line: Final[Callable[[bytes | str], Any]] = orjson.loads


def build_header_line(
    *,
    chain_id: str,
    source: str,
    first_height: int,
    last_height: int,
    scenario: str | dict[str, Any] | None = None,
    seed: int | None = None,
    policy: str | None = None,
) -> dict[str, Any]:
    """The header line (the first of every trace)."""
    header: dict[str, Any] = {
        "type": "header",
        "version": TRACE_VERSION,
        "chain_id": chain_id,
        "source": source,
        "first_height": str(first_height),
        "last_height": str(last_height),
    }
    if scenario is not None:
        header["scenario"] = scenario
    if seed is not None:
        header["seed"] = seed
    if policy is not None:
        header["policy"] = policy
    return header


def build_params_line(
    height: int, params: dict[str, Any], extension_params: dict[str, Any]
) -> dict[str, Any]:
    """A ``params`` line from the chain's Params JSON and keepersim's ExtensionParams JSON."""
    return {
        "type": "params",
        "height": str(height),
        "params": params,
        "extension_params": extension_params,
    }


def build_participants_line(
    epoch_index: int,
    height: int,
    participants: list[dict[str, Any]],
    participant_nodes: list[dict[str, Any]],
    validation_weights: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``participants`` line from the chain's Participant JSON and keepersim's
    ParticipantNodes JSON; ``validation_weights``: the epoch group's ValidationWeight JSON (weight,
    reputation, ML nodes), left out when None."""
    line: dict[str, Any] = {
        "type": "participants",
        "epoch_index": str(epoch_index),
        "height": str(height),
        "participants": participants,
        "participant_nodes": participant_nodes,
    }
    if validation_weights is not None:
        line["validation_weights"] = validation_weights
    return line


def build_inference_line(inference: dict[str, Any]) -> dict[str, Any]:
    """An ``inference`` line from the chain's Inference JSON."""
    return {"type": "inference", **inference}


def build_summary_line(
    epoch_index: int,
    height: int,
    summaries: list[dict[str, Any]],
    epoch_declines: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An ``epoch_summary`` line; ``epoch_declines`` None leaves them out (not recorded)."""
    line: dict[str, Any] = {
        "type": "epoch_summary",
        "epoch_index": str(epoch_index),
        "height": str(height),
        "summaries": summaries,
    }
    if epoch_declines is not None:
        line["epoch_declines"] = epoch_declines
    return line


def build_end_line(lines: int, sha256: str) -> dict[str, Any]:
    """The closing record: the number of lines before it (the header included) and the SHA-256
    (hex) of their exact bytes, newlines included. Written only when the whole trace is."""
    return {"type": "end", "lines": lines, "sha256": sha256}
