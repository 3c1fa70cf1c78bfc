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
from keepersim.keeper.keeper import Keeper
from keepersim.module.params_load import get_loaded_policy
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.errors import InvalidMessageError, UnauthorizedError
from keepersim.types.events import ParamsUpdated, ParticipantDeactivated
from keepersim.types.messages import ACTIVE, INACTIVE, ExcludedParticipant, Params, Participant
from keepersim.types.pb.inference.inference.tx_pb2 import (
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgExcludeParticipant,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
    Tx,
)


def _require_gov_authority(authority: str, msg_name: str) -> None:
    if authority != GOV_AUTHORITY:
        raise UnauthorizedError(
            f"{msg_name}.authority {authority!r} is not the governance account {GOV_AUTHORITY!r}"
        )


def process_update_params(ctx: BlockContext, msg: MsgUpdateParams) -> None:
    """Governance of the chain's params: signed by the x/gov module account (derived, not a
    param), the whole params checked to load with the extension params they will run with,
    effective from the next block."""
    keeper = ctx.keeper
    _require_gov_authority(msg.authority, "MsgUpdateParams")
    if not msg.HasField("params"):
        raise InvalidMessageError("MsgUpdateParams.params is missing")
    get_loaded_policy(ModuleParams(params=msg.params, extension_params=get_next_extension(keeper)))
    keeper.set_pending_params(msg.params)
    keeper.emit(ParamsUpdated(ctx.height, ctx.height + 1, msg.authority))


def process_update_extension_params(ctx: BlockContext, msg: MsgUpdateExtensionParams) -> None:
    """Governance of keepersim's extension params: the same authority and checks as
    MsgUpdateParams, against the chain params they will run with."""
    keeper = ctx.keeper
    _require_gov_authority(msg.authority, "MsgUpdateExtensionParams")
    if not msg.HasField("extension_params"):
        raise InvalidMessageError("MsgUpdateExtensionParams.extension_params is missing")
    get_loaded_policy(
        ModuleParams(params=get_next_params(keeper), extension_params=msg.extension_params)
    )
    keeper.set_pending_extension_params(msg.extension_params)
    keeper.emit(ParamsUpdated(ctx.height, ctx.height + 1, msg.authority))


def get_next_params(keeper: Keeper) -> Params:
    """The chain params of the next block: the pending update, or those in force."""
    return keeper.get_pending_params() or keeper.get_params()


def get_next_extension(keeper: Keeper) -> ExtensionParams:
    """The extension params of the next block: the pending update, or those in force."""
    return keeper.get_pending_extension_params() or keeper.get_extension_params()


def process_register_participant(ctx: BlockContext, msg: MsgRegisterParticipant) -> None:
    """Register or update a participant: its URL now; its weight, models and ML nodes count from
    the next epoch group (the chain learns them from hardware declarations and the PoC)."""
    if not msg.creator or "\x00" in msg.creator:
        raise InvalidMessageError("MsgRegisterParticipant.creator is empty or has a 0x00 byte")
    if msg.weight < 0:
        raise InvalidMessageError(
            f"MsgRegisterParticipant.weight must be >= 0, got {msg.weight} for {msg.creator!r}"
        )
    keeper = ctx.keeper
    participant = keeper.get_participant(msg.creator)
    if participant is None:
        participant = Participant(
            index=msg.creator, address=msg.creator, status=ACTIVE, join_height=ctx.height
        )
    participant.inference_url = msg.url
    participant.weight = msg.weight
    keeper.set_participant(participant)
    keeper.set_participant_nodes(
        ParticipantNodes(address=msg.creator, models=msg.models, ml_nodes=msg.ml_nodes)
    )


def process_exclude_participant(ctx: BlockContext, msg: MsgExcludeParticipant) -> None:
    """A recorded exclusion replayed: the participant leaves selection for the rest of the epoch
    and the chain's ExcludedParticipant entry is written at this height, as
    ``recordExclusion`` does (x/inference/keeper/participant_status.go:135-148, gonka ee730031).
    Upstream sets INVALID for ``consecutive_failures`` and ``statistical_invalidations``
    (calculations/status.go:63,67) and INACTIVE otherwise; both remove the participant from the
    epoch's groups (participant_status.go:126-133). keepersim sets INACTIVE for every reason, its
    one "out for the rest of the epoch" status (reset at the boundary). A participant already out
    is left as it is (upstream's ``AlreadySet``, status.go:55-57)."""
    _require_gov_authority(msg.authority, "MsgExcludeParticipant")
    if not msg.reason:
        raise InvalidMessageError("MsgExcludeParticipant.reason is empty")
    keeper = ctx.keeper
    participant = keeper.get_participant(msg.address)
    if participant is None:
        raise InvalidMessageError(f"MsgExcludeParticipant: unknown participant {msg.address!r}")
    if participant.status != ACTIVE:
        return
    participant.status = INACTIVE
    keeper.set_participant(participant)
    keeper.set_excluded(
        ExcludedParticipant(
            epoch_index=keeper.get_effective_epoch_index(),
            address=msg.address,
            reason=msg.reason,
            exclusion_block_height=ctx.height,
        )
    )
    keeper.emit(ParticipantDeactivated(ctx.height, msg.address, "", msg.reason))


_HANDLERS: dict[type[Message], Callable[[BlockContext, Any], None]] = {
    MsgStartInference: process_start_inference,
    MsgFinishInference: process_finish_inference,
    MsgDeclineInference: process_decline_inference,
    MsgUpdateParams: process_update_params,
    MsgUpdateExtensionParams: process_update_extension_params,
    MsgRegisterParticipant: process_register_participant,
    MsgExcludeParticipant: process_exclude_participant,
}


# A module message's kind is its class name (the usual case: one dict lookup, as the dispatch).
_KINDS: dict[type[Message], str] = {cls: cls.__name__ for cls in _HANDLERS}

Handler = Callable[[BlockContext, Any], None]


def get_message_kind(msg: Message) -> str:
    kind = _KINDS.get(type(msg))
    if kind is not None:
        return kind
    if isinstance(msg, Tx):
        return msg.WhichOneof("msg") or "empty"
    return type(msg).__name__


def get_message_route(msg: Message) -> tuple[str, Handler]:
    """The message's kind (get_message_kind) and the handler that processes it: its own for a
    module message (the chain's per-message loop calls it directly), else process_msg (which
    unwraps a Tx or rejects it)."""
    cls = type(msg)
    handler = _HANDLERS.get(cls)
    if handler is not None:
        return _KINDS.get(cls) or cls.__name__, handler
    return get_message_kind(msg), process_msg


def process_msg(ctx: BlockContext, msg: Message) -> None:
    """Dispatch one message (or a Tx wrapping one) to its handler."""
    handler = _HANDLERS.get(type(msg))  # a module message itself (the usual case)
    if handler is None:
        if isinstance(msg, Tx):
            kind = msg.WhichOneof("msg")
            if kind is None:
                raise InvalidMessageError("Tx carries no message")
            msg = getattr(msg, kind)
        handler = _HANDLERS.get(type(msg))
        if handler is None:
            raise InvalidMessageError(f"not a module message: {type(msg).__name__}")
    handler(ctx, msg)
