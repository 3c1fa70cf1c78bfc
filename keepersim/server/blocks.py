"""Blocks posted as JSON (``POST /keepersim/v1/blocks``): parsed into messages, delivered through
the app's :class:`~keepersim.server.runner.BlockSink` unless a runner drives the chain (409)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from keepersim.chain import BlockResult
from keepersim.server.responses import Answer, ApiError, compute_height_headers
from keepersim.server.state import ServerState
from keepersim.types.errors import BlockError
from keepersim.types.messages import MsgFinishInference, MsgStartInference, MsgUpdateParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgExcludeParticipant,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)

__all__ = ["MESSAGE_TYPES", "block_result_to_json", "parse_block_json", "process_posted_block"]

#: The messages a posted block may carry, by ``type`` (a ``@type`` URL's last part too).
MESSAGE_TYPES: dict[str, type[Message]] = {
    "MsgStartInference": MsgStartInference,
    "MsgFinishInference": MsgFinishInference,
    "MsgDeclineInference": MsgDeclineInference,
    "MsgUpdateParams": MsgUpdateParams,
    "MsgUpdateExtensionParams": MsgUpdateExtensionParams,
    "MsgRegisterParticipant": MsgRegisterParticipant,
    "MsgExcludeParticipant": MsgExcludeParticipant,
}


def parse_block_json(data: Any) -> tuple[list[Message], bool]:
    """A posted block: ``[{"type": "MsgStartInference", ...}, ...]`` or
    ``{"txs": [...], "strict": false}``. Returns the messages and the strict flag."""
    strict = False
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"txs", "strict"})
        if unknown:
            raise ApiError(400, f"invalid block: unknown key(s) {', '.join(map(repr, unknown))}")
        if "strict" in data:
            if not isinstance(data["strict"], bool):
                raise ApiError(400, "invalid strict: expected true or false")
            strict = data["strict"]
        data = data.get("txs", [])
    if not isinstance(data, list):
        raise ApiError(400, 'invalid block: expected a JSON list of messages or {"txs": [...]}')
    txs: list[Message] = []
    for i, item in enumerate(data):
        where = f"txs[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f'invalid {where}: expected an object with a "type"')
        body = dict(item)
        kind = body.pop("type", None) or body.pop("@type", None)
        if not isinstance(kind, str):
            raise ApiError(
                400, f"invalid {where}.type: missing (one of {', '.join(MESSAGE_TYPES)})"
            )
        name = kind.rsplit(".", 1)[-1]
        cls = MESSAGE_TYPES.get(name)
        if cls is None:
            raise ApiError(
                400,
                f"invalid {where}.type: unknown message {kind!r} (one of {', '.join(MESSAGE_TYPES)})",
            )
        try:
            txs.append(json_format.ParseDict(body, cls()))
        except json_format.ParseError as exc:
            raise ApiError(400, f"invalid {where} ({name}): {exc}") from exc
    return txs, strict


def block_result_to_json(result: BlockResult) -> dict[str, Any]:
    return {
        "height": result.height,
        "app_hash": result.app_hash.hex(),
        "events": [{"type": type(e).__name__, **dataclasses.asdict(e)} for e in result.events],
        "tx_results": [dataclasses.asdict(r) for r in result.tx_results],
        "gas_used": result.gas_used,
        "gas_by_step": dict(result.gas_by_step),
    }


def process_posted_block(state: ServerState, body: bytes) -> Answer:
    """Deliver the posted block (the request ``body``); its result with the new height."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"invalid block: request body is not JSON ({exc})") from None
    txs, strict = parse_block_json(data)
    runner = state.runner
    if runner is not None and runner.running:
        raise ApiError(
            409,
            f"the chain is driven by a {runner.mode} runner; blocks cannot be posted "
            "until it finishes",
        )
    try:
        result = state.sink.deliver(txs, strict=strict)
    except BlockError as exc:
        raise ApiError(400, str(exc)) from exc
    return block_result_to_json(result), compute_height_headers(result.height)
