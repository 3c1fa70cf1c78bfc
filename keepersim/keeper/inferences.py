"""Inference lifecycle: start, finish (either order), decline (pushback) and expiry.

The classic (v0.2.13) lifecycle: gonka-ai/gonka 8a35022b keeper/msg_server_start_inference.go
and msg_server_finish_inference.go. Which half arrived is read as upstream reads it
(types/inference.go): the start assigned ``assigned_to``, the finish set ``executed_by``. A
decline is keepersim's own (keepersim.v1.MsgDeclineInference): the chain's record stays as the start
left it (STARTED) with ``end_block_height`` set to the decline's height, a combination the
chain never writes (:func:`is_declined`).

Each handler checks everything before it writes and before it calls the policy (a rejected
message's writes are taken back in any case: keepersim.keeper.context).
"""

from __future__ import annotations

from keepersim.keeper.context import BlockContext
from keepersim.keeper.outcomes import process_outcome
from keepersim.types.errors import (
    DuplicateInferenceError,
    InferenceExpiredError,
    InferenceStateError,
    InvalidMessageError,
    UnknownInferenceError,
    UnknownParticipantError,
)
from keepersim.types.events import (
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    InferenceStarted,
    Outcome,
)
from keepersim.types.messages import (
    EXPIRED,
    FINISHED,
    STARTED,
    Inference,
    InferenceStatus,
)
from keepersim.types.pb.inference.inference.tx_pb2 import MsgFinishInference, MsgStartInference
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference


def is_start_processed(inference: Inference) -> bool:
    """StartInference has run (upstream ``StartProcessed``: it always assigns AssignedTo)."""
    return inference.assigned_to != ""


def is_finish_processed(inference: Inference) -> bool:
    """FinishInference has run (upstream ``FinishedProcessed``)."""
    return inference.executed_by != ""


def is_declined(inference: Inference) -> bool:
    """Declined with pushback: still STARTED, yet ended (:func:`is_declined_state`)."""
    return is_declined_state(inference.status, inference.end_block_height)


def is_declined_state(status: int, end_block_height: int) -> bool:
    """A (status, end height) of a declined inference: still STARTED, yet ended (the chain sets
    ``end_block_height`` only on a finish, so it never stores this combination)."""
    return status == STARTED and end_block_height != 0


def _require_field(value: str, msg_name: str, field: str) -> None:
    if not value:
        raise InvalidMessageError(f"{msg_name}.{field} is empty")
    if "\x00" in value:
        raise InvalidMessageError(f"{msg_name}.{field} contains a 0x00 byte")


def _require_fields(msg_name: str, fields: tuple[str, ...], *values: str) -> None:
    """Each of ``values`` (of the fields named ``fields``, in order) set and without a 0x00 byte
    (:func:`_require_field`), checked in one go for the usual message (a tuple's ``in``, not a
    dict view's: several times faster), field by field for the error."""
    if "" in values or "\x00" in "".join(values):
        for field, value in zip(fields, values, strict=True):
            _require_field(value, msg_name, field)


def _unknown_participant(msg_name: str, field: str, address: str) -> UnknownParticipantError:
    return UnknownParticipantError(f"{msg_name}.{field}: unknown participant {address!r}")


def process_start_inference(ctx: BlockContext, msg: MsgStartInference) -> None:
    inference_id, assigned_to, model = msg.inference_id, msg.assigned_to, msg.model
    _require_fields(
        "MsgStartInference",
        ("inference_id", "assigned_to", "model"),
        inference_id,
        assigned_to,
        model,
    )
    keeper = ctx.keeper
    if not keeper.has_participant(assigned_to):
        raise _unknown_participant("MsgStartInference", "assigned_to", assigned_to)
    existing = keeper.get_inference(inference_id)
    if existing is not None and is_start_processed(existing):
        raise DuplicateInferenceError(f"inference {inference_id!r} was already started")
    height = ctx.height
    requested_by = msg.requested_by or msg.creator
    epoch_id = keeper.get_effective_epoch_index()
    if existing is not None:
        inference = existing  # the finish came first: the start completes it; no expiry queued
    else:
        keeper.set_timeout(height + ctx.expiration_blocks, inference_id)
        # The stored record, built once from the message's fields (set one by one: a third
        # cheaper than the keyword constructor, the same bytes).
        inference = Inference()
        inference.inference_id = inference_id
        inference.status = STARTED
    inference.index = inference_id
    inference.model = model
    inference.requested_by = requested_by
    inference.assigned_to = assigned_to
    inference.start_block_height = height
    inference.epoch_id = epoch_id
    inference.max_tokens = msg.max_tokens
    inference.prompt_token_count = msg.prompt_token_count
    keeper.set_inference(inference)
    ctx.process_policy_start(assigned_to, inference)
    keeper.emit(InferenceStarted(height, inference_id, assigned_to))


def process_finish_inference(ctx: BlockContext, msg: MsgFinishInference) -> None:
    inference_id = msg.inference_id
    executor = msg.executed_by or msg.creator
    _require_fields("MsgFinishInference", ("inference_id", "executed_by"), inference_id, executor)
    keeper = ctx.keeper
    if not keeper.has_participant(executor):
        raise _unknown_participant("MsgFinishInference", "executed_by", executor)
    inference = keeper.get_inference(inference_id)
    if inference is None:
        inference = Inference(inference_id=inference_id, index=inference_id)
    else:
        status = inference.status
        if status == EXPIRED:
            raise InferenceExpiredError(
                f"inference {inference_id!r} expired at its timeout; finish rejected"
            )
        if is_declined(inference):
            raise InferenceStateError(f"inference {inference_id!r} cannot finish: declined")
        if status != STARTED or is_finish_processed(inference):
            raise InferenceStateError(
                f"inference {inference_id!r} cannot finish: status {InferenceStatus.Name(status)}"
            )
    height = ctx.height
    inference.status = FINISHED
    inference.executed_by = executor
    inference.end_block_height = height
    inference.completion_token_count = msg.completion_token_count
    prompt_token_count = msg.prompt_token_count
    if prompt_token_count:
        inference.prompt_token_count = prompt_token_count
    keeper.set_inference(inference)
    process_outcome(ctx, executor, Outcome.SUCCESS, inference)
    keeper.emit(InferenceFinished(height, inference_id, executor, inference.start_block_height))


def process_decline_inference(ctx: BlockContext, msg: MsgDeclineInference) -> None:
    """Capacity pushback: a neutral outcome that never counts as a failure."""
    _require_field(msg.inference_id, "MsgDeclineInference", "inference_id")
    keeper = ctx.keeper
    inference = keeper.get_inference(msg.inference_id)
    if inference is None:
        raise UnknownInferenceError(f"MsgDeclineInference: unknown inference {msg.inference_id!r}")
    if msg.creator and msg.creator != inference.assigned_to:
        raise InvalidMessageError(
            f"MsgDeclineInference.creator {msg.creator!r} is not the assigned executor "
            f"{inference.assigned_to!r}"
        )
    if inference.status != STARTED or is_finish_processed(inference) or is_declined(inference):
        raise InferenceStateError(f"inference {msg.inference_id!r} is not in progress")
    inference.end_block_height = ctx.height
    keeper.set_inference(inference)
    process_outcome(ctx, inference.assigned_to, Outcome.NEUTRAL, inference)
    keeper.emit(InferenceDeclined(ctx.height, msg.inference_id, inference.assigned_to, msg.reason))


def process_inference_expiry(ctx: BlockContext) -> None:
    """End block: every inference still STARTED at its expiration height becomes a miss."""
    keeper = ctx.keeper
    due = keeper.get_timeouts_due(ctx.height)
    for _, inference_id in due:
        inference = keeper.get_inference(inference_id)
        if inference is None or inference.status != STARTED or is_declined(inference):
            continue
        inference.status = EXPIRED
        keeper.set_inference(inference)
        process_outcome(ctx, inference.assigned_to, Outcome.MISS, inference)
        keeper.emit(
            InferenceExpired(
                ctx.height, inference_id, inference.assigned_to, inference.start_block_height
            )
        )
    for key, _ in due:
        keeper.delete_key(key)
