"""Message handlers: a thin dispatch over the keeper's rules."""

from __future__ import annotations

from keepersim.keeper.context import BlockContext
from keepersim.keeper.inferences import (
    process_decline_inference,
    process_finish_inference,
    process_start_inference,
)
from keepersim.types.errors import InvalidMessageError, UnauthorizedError
from keepersim.types.events import ParamsUpdated
from keepersim.types.params import validate_params
from keepersim.types.pb.tx_pb2 import MsgSubmitNewParticipant, MsgUpdateParams, Tx
from keepersim.types.pb.types_pb2 import ACTIVE, Participant


def process_update_params(ctx: BlockContext, msg: MsgUpdateParams) -> None:
    """Governance: authority checked, the whole params validated, effective from the next block."""
    keeper = ctx.keeper
    authority = keeper.get_params().authority
    if msg.authority != authority:
        raise UnauthorizedError(
            f"MsgUpdateParams.authority {msg.authority!r} is not the governance account {authority!r}"
        )
    if not msg.HasField("params"):
        raise InvalidMessageError("MsgUpdateParams.params is missing")
    validate_params(msg.params)
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


def process_tx(ctx: BlockContext, tx: Tx) -> None:
    kind = tx.WhichOneof("msg")
    if kind == "start_inference":
        process_start_inference(ctx, tx.start_inference)
    elif kind == "finish_inference":
        process_finish_inference(ctx, tx.finish_inference)
    elif kind == "decline_inference":
        process_decline_inference(ctx, tx.decline_inference)
    elif kind == "update_params":
        process_update_params(ctx, tx.update_params)
    elif kind == "submit_new_participant":
        process_submit_new_participant(ctx, tx.submit_new_participant)
    else:
        raise InvalidMessageError("Tx carries no message")
