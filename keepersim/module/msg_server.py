"""Message handlers: a thin dispatch over the keeper's rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from keepersim.keeper.context import BlockContext
from keepersim.keeper.inferences import (
    process_decline_inference,
    process_finish_inference,
    process_start_inference,
)
from keepersim.module.params_load import get_loaded_policy
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.errors import InvalidMessageError, UnauthorizedError
from keepersim.types.events import ParamsUpdated
from keepersim.types.pb.inference.inference.tx_pb2 import (
    MsgFinishInference,
    MsgStartInference,
    MsgSubmitNewParticipant,
    MsgUpdateParams,
)
from keepersim.types.pb.inference.inference.types_pb2 import ACTIVE, Participant
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference, Tx


def process_update_params(ctx: BlockContext, msg: MsgUpdateParams) -> None:
    """Governance: signed by the x/gov module account (derived, not a param), the whole params
    checked to load, effective from the next block."""
    keeper = ctx.keeper
    if msg.authority != GOV_AUTHORITY:
        raise UnauthorizedError(
            f"MsgUpdateParams.authority {msg.authority!r} is not the governance account "
            f"{GOV_AUTHORITY!r}"
        )
    if not msg.HasField("params"):
        raise InvalidMessageError("MsgUpdateParams.params is missing")
    get_loaded_policy(msg.params)
    keeper.set_pending_params(msg.params)
    keeper.emit(ParamsUpdated(ctx.height, ctx.height + 1, msg.authority))


def process_submit_new_participant(ctx: BlockContext, msg: MsgSubmitNewParticipant) -> None:
    """Register or update a participant; its weight counts from the next epoch group."""
    if not msg.creator or "\x00" in msg.creator:
        raise InvalidMessageError("MsgSubmitNewParticipant.creator is empty or has a 0x00 byte")
    if msg.weight < 0:
        raise InvalidMessageError(
            f"MsgSubmitNewParticipant.weight must be >= 0, got {msg.weight} for {msg.creator!r}"
        )
    keeper = ctx.keeper
    participant = keeper.get_participant(msg.creator)
    if participant is None:
        participant = Participant(
            index=msg.creator, address=msg.creator, status=ACTIVE, join_height=ctx.height
        )
    participant.inference_url = msg.url
    participant.weight = msg.weight
    del participant.models[:]
    participant.models.extend(msg.models)
    del participant.ml_nodes[:]
    participant.ml_nodes.extend(msg.ml_nodes)
    keeper.set_participant(participant)


_HANDLERS: dict[type[Message], Callable[[BlockContext, Any], None]] = {
    MsgStartInference: process_start_inference,
    MsgFinishInference: process_finish_inference,
    MsgDeclineInference: process_decline_inference,
    MsgUpdateParams: process_update_params,
    MsgSubmitNewParticipant: process_submit_new_participant,
}


def get_message_kind(msg: Message) -> str:
    if isinstance(msg, Tx):
        return msg.WhichOneof("msg") or "empty"
    return type(msg).__name__


def process_msg(ctx: BlockContext, msg: Message) -> None:
    """Dispatch one message (or a Tx wrapping one) to its handler."""
    if isinstance(msg, Tx):
        kind = msg.WhichOneof("msg")
        if kind is None:
            raise InvalidMessageError("Tx carries no message")
        msg = getattr(msg, kind)
    handler = _HANDLERS.get(type(msg))
    if handler is None:
        raise InvalidMessageError(f"not a module message: {type(msg).__name__}")
    handler(ctx, msg)
