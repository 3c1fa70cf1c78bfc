"""Records to block messages: the one place that turns a trace's records into the transactions
of the blocks that replay it, for as-recorded replay (:mod:`keepersim.replay.as_recorded`) and
``keepersim serve``'s trace runner (:class:`keepersim.server.runner.TraceRunner`) alike.

Block h carries, in this order (:func:`build_block`):

1. scheduled messages due at h (recorded params changes, governance, participant changes);
2. the recorded outcomes at h of inferences that started before h: MsgFinishInference for a
   finished one (FINISHED, or VALIDATED / INVALIDATED / VOTING, which follow a finish),
   MsgDeclineInference (reason :data:`~keepersim.trace.format.DECLINE_REASON`) for a declined one
   (STARTED with ``end_block_height`` set), ordered by (start height, id);
3. the recorded starts at h (MsgStartInference with the recorded ``assigned_to``), by id; a
   finish recorded before its start (``end_block_height`` below the start) goes just before its
   start;
4. the recorded outcomes at h of inferences that also started at h (the start went first).

Heights: a recorded ``params`` line at height h (in force from h) is scheduled in block h - 1 (the
module applies accepted params from the next block); a ``participants`` line at height h sends
MsgRegisterParticipant in block h for every participant whose weight, models, ML nodes or URL
changed, and weight 0 for one that left (:class:`ParticipantTracker`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf.message import Message

from keepersim.trace.format import DECLINE_REASON, FINISHED_LIKE
from keepersim.trace.records import InferenceRecord, ParamsRecord, ParticipantsRecord
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.messages import (
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)

__all__ = [
    "DEFAULT_MAX_LISTED",
    "BlockMeta",
    "Listed",
    "Outcome",
    "ParticipantTracker",
    "Schedule",
    "Scheduled",
    "build_block",
    "build_params_msgs",
    "build_recorded_decline",
    "build_recorded_finish",
    "build_recorded_start",
    "is_finished_before_start",
    "push_outcome",
    "schedule_record",
]

DEFAULT_MAX_LISTED: Final = 50

#: A pending recorded outcome, a heap item: (its block height, start height, inference id,
#: "finish" / "decline", its message, trace line).
Outcome = tuple[int, int, str, str, Message, int]
#: What a block item came from: (kind, trace line or 0, inference id or "").
BlockMeta = tuple[str, int, str]


# The two messages of nearly every inference are built field by field: the protobuf runtime's
# keyword constructor costs about 0.3 us more per message than the same fields set one by one
# (the message, and its bytes, are the same).


def build_recorded_start(record: InferenceRecord) -> MsgStartInference:
    """A recorded inference's MsgStartInference: requested and assigned as recorded."""
    msg = MsgStartInference()
    msg.creator = msg.requested_by = record.requested_by
    msg.inference_id = record.inference_id
    msg.model = record.model
    msg.assigned_to = record.assigned_to
    msg.prompt_token_count = record.prompt_token_count
    msg.max_tokens = record.max_tokens
    return msg


def build_recorded_finish(record: InferenceRecord) -> MsgFinishInference:
    """A recorded finish: by the recorded executor, with the recorded token counts."""
    msg = MsgFinishInference()
    msg.creator = msg.executed_by = record.executed_by
    msg.inference_id = record.inference_id
    msg.model = record.model
    msg.requested_by = record.requested_by
    msg.prompt_token_count = record.prompt_token_count
    msg.completion_token_count = record.completion_token_count
    return msg


def build_recorded_decline(record: InferenceRecord) -> MsgDeclineInference:
    """A recorded decline, by the assigned executor (capacity pushback)."""
    return MsgDeclineInference(
        creator=record.assigned_to, inference_id=record.inference_id, reason=DECLINE_REASON
    )


def build_params_msgs(params: ModuleParams) -> list[Message]:
    """The two governance messages that put ``params`` in force together: the chain's
    MsgUpdateParams, then keepersim's MsgUpdateExtensionParams."""
    return [
        MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params),
        MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=params.extension_params),
    ]


def is_finished_before_start(record: InferenceRecord) -> bool:
    """A finish recorded below its start height (it is sent just before the start)."""
    return record.status in FINISHED_LIKE and record.end_height < record.start_height


def push_outcome(pending: list[Outcome], record: InferenceRecord) -> bool:
    """Queue ``record``'s recorded outcome at or after its start (a finish or a decline) on the
    ``pending`` heap; False when it has none to queue (expired, unfinished, or a finish that came
    before its start, which :func:`build_block` sends with the start)."""
    end = record.end_height
    msg: Message
    if record.status in FINISHED_LIKE:
        if end < record.start_height:
            return False
        kind, msg = "finish", build_recorded_finish(record)
    elif record.is_declined():
        kind, msg = "decline", build_recorded_decline(record)
    else:
        return False
    heapq.heappush(pending, (end, record.start_height, record.inference_id, kind, msg, record.line))
    return True


def build_block(
    height: int,
    scheduled: Sequence[tuple[BlockMeta, Any]],
    pending: list[Outcome],
    starts: Sequence[InferenceRecord],
) -> tuple[list[Any], list[BlockMeta]]:
    """Block ``height``'s items in the order of the module docstring, with what each came from:
    ``scheduled`` first (as given), then the outcomes due on the ``pending`` heap (popped) and
    the ``starts`` (the records that start at ``height``, by id)."""
    items: list[Any] = []
    meta: list[BlockMeta] = []
    for origin, item in scheduled:
        items.append(item)
        meta.append(origin)
    same_block: list[Outcome] = []
    while pending and pending[0][0] <= height:
        outcome = heapq.heappop(pending)
        if outcome[1] == height:
            same_block.append(outcome)
        else:
            items.append(outcome[4])
            meta.append((outcome[3], outcome[5], outcome[2]))
    for record in starts:
        # (end below start first: the rule's own test costs a call, and nearly no start has it)
        if record.end_height < record.start_height and is_finished_before_start(record):
            items.append(build_recorded_finish(record))
            meta.append(("finish", record.line, record.inference_id))
        items.append(build_recorded_start(record))
        meta.append(("start", record.line, record.inference_id))
    for outcome in same_block:
        items.append(outcome[4])
        meta.append((outcome[3], outcome[5], outcome[2]))
    return items, meta


# --------------------------------------------------------------------------------------------
# Scheduled messages: params changes, governance, participant changes
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Listed:
    """A count and the first ``max_listed`` items (keeps reports bounded)."""

    max_listed: int = DEFAULT_MAX_LISTED
    count: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, item: dict[str, Any]) -> None:
        self.count += 1
        if len(self.items) < self.max_listed:
            self.items.append(item)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "listed": list(self.items)}


@dataclass(order=True, frozen=True, slots=True)
class Scheduled:
    height: int
    seq: int
    kind: str = field(compare=False)
    line: int = field(compare=False)  # trace line (0 for governance entries)
    msg: Message = field(compare=False)


class Schedule:
    """Messages due at given heights (params changes, governance, participant updates).

    Bounded by the number of scheduled changes, never by the trace length. Parameter changes are
    kept as ModuleParams and become their two messages when their block is built
    (:func:`build_params_msgs`), so a replay can give each chain its own policy override. An
    item due at a height already committed goes in the next block and is listed in ``late``.
    """

    def __init__(self, max_listed: int = DEFAULT_MAX_LISTED) -> None:
        self._heap: list[Scheduled] = []
        self._seq = 0
        self.late: Listed = Listed(max_listed)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, height: int, kind: str, line: int, msg: Message, committed: int) -> None:
        if height <= committed:
            self.late.add(
                {"kind": kind, "line": line, "height": height, "applied_at": committed + 1}
            )
            height = committed + 1
        self._seq += 1
        heapq.heappush(self._heap, Scheduled(height, self._seq, kind, line, msg))

    def pop_due(self, height: int) -> list[Scheduled]:
        out = []
        while self._heap and self._heap[0].height <= height:
            out.append(heapq.heappop(self._heap))
        return out

    def get_next_height(self) -> int | None:
        return self._heap[0].height if self._heap else None


class ParticipantTracker:
    """The recorded participant set, to turn a later participants line into messages."""

    def __init__(self, record: ParticipantsRecord) -> None:
        self._known: dict[str, MsgRegisterParticipant] = self._as_msgs(record)

    @staticmethod
    def _as_msgs(record: ParticipantsRecord) -> dict[str, MsgRegisterParticipant]:
        """Each participant's registration, with its models and ML nodes (none if the line
        registers none for it)."""
        nodes = {n.address: n for n in record.nodes}
        out: dict[str, MsgRegisterParticipant] = {}
        for p in record.participants:
            registered = nodes.get(p.address, ParticipantNodes())
            out[p.address] = MsgRegisterParticipant(
                creator=p.address,
                url=p.inference_url,
                weight=p.weight,
                models=list(registered.models),
                ml_nodes=list(registered.ml_nodes),
            )
        return out

    def compute_updates(self, record: ParticipantsRecord) -> list[MsgRegisterParticipant]:
        """Messages that turn the known set into the record's (weight 0 for one that left)."""
        out: list[MsgRegisterParticipant] = []
        now = self._as_msgs(record)
        for address, msg in sorted(now.items()):
            if self._known.get(address) != msg:
                out.append(msg)
                self._known[address] = msg
        for address in sorted(set(self._known) - set(now)):
            old = self._known[address]
            if old.weight != 0:
                gone = MsgRegisterParticipant()
                gone.CopyFrom(old)
                gone.weight = 0
                out.append(gone)
                self._known[address] = gone
        return out


def schedule_record(
    schedule: Schedule,
    record: ParamsRecord | ParticipantsRecord,
    tracker: ParticipantTracker,
    committed: int,
) -> None:
    """Turn a recorded params / participants line into scheduled messages."""
    if isinstance(record, ParamsRecord):
        schedule.add(record.height - 1, "params", record.line, record.params, committed)
        return
    for msg in tracker.compute_updates(record):
        schedule.add(record.height, "participant", record.line, msg, committed)
