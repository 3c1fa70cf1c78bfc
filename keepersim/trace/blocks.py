"""From trace records to blocks: the one feeder both replay modes
(:mod:`keepersim.replay.as_recorded`, :mod:`keepersim.replay.what_if`) and ``keepersim serve``'s
trace runner (:class:`keepersim.server.runner.TraceRunner`, through
:func:`iter_recorded_blocks`) turn a trace into blocks with, and the one expansion of a
scheduled params change into its messages.

* :class:`BlockFeeder`: records in trace order in (:meth:`BlockFeeder.feed`), every height from
  the first to the last a block out (:meth:`BlockFeeder.deliver`), the starts of a height
  gathered into its block, params and participants lines scheduled (:mod:`keepersim.trace.
  messages`);
* :class:`RecordedBlockFeeder`: the recorded blocks (:func:`keepersim.trace.messages.
  build_block`: scheduled messages, recorded outcomes, recorded starts);
* :func:`expand_scheduled` / :func:`resolve_scheduled`: a params change is two block items
  (:class:`ParamsPart`), each made a message per chain: as recorded, or with a replay's policy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from keepersim.trace.genesis import Prologue
from keepersim.trace.messages import (
    BlockMeta,
    Outcome,
    ParticipantTracker,
    Schedule,
    Scheduled,
    build_block,
    build_params_msgs,
    push_outcome,
    schedule_record,
)
from keepersim.trace.records import (
    EpochSummaryRecord,
    InferenceRecord,
    ParamsRecord,
    ParticipantsRecord,
    TraceRecord,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

__all__ = [
    "BlockFeeder",
    "ParamsPart",
    "RecordedBlock",
    "RecordedBlockFeeder",
    "apply_policy",
    "expand_scheduled",
    "iter_recorded_blocks",
    "resolve_scheduled",
]

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# Scheduled params changes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamsPart:
    """One of the two messages of a scheduled params change, built per chain (its policy)."""

    params: ModuleParams
    extension: bool  # False: MsgUpdateParams (the chain's part); True: MsgUpdateExtensionParams


def apply_policy(params: ModuleParams, policy: str, shadow: bool) -> ModuleParams:
    """A copy of ``params`` with the replay's policy (and shadow flag) in force."""
    out = ModuleParams()
    out.CopyFrom(params)
    out.extension_params.health_params.policy = policy
    out.extension_params.health_params.shadow = shadow
    return out


def expand_scheduled(item: Scheduled) -> list[Message | ParamsPart]:
    """A scheduled item's block items: a params change is two (the chain's Params, then
    keepersim's ExtensionParams, which the module loads together); anything else is its
    message."""
    if isinstance(item.msg, ModuleParams):
        return [ParamsPart(item.msg, extension=False), ParamsPart(item.msg, extension=True)]
    return [item.msg]


def resolve_scheduled(
    item: Message | ParamsPart, policy: str | None = None, shadow: bool = False
) -> Message:
    """A block item as the message one chain gets: a params part as recorded (``policy``
    None), or with ``policy`` (and ``shadow``) in force; any other item as it is."""
    if not isinstance(item, ParamsPart):
        return item
    params = item.params if policy is None else apply_policy(item.params, policy, shadow)
    chain_msg, extension_msg = build_params_msgs(params)
    return extension_msg if item.extension else chain_msg


# --------------------------------------------------------------------------------------------
# Records to blocks
# --------------------------------------------------------------------------------------------


class BlockFeeder(Generic[T]):
    """Turns a stream of records into blocks: every height from ``first_height`` to
    ``last_height`` is one block, delivered in height order, empty or not.

    :meth:`feed` takes the records in trace order: a start goes to :meth:`process_start` (which
    appends its block item to ``gather``) once the blocks before its height are delivered, a
    params or participants line is scheduled, an epoch
    summary goes to :meth:`process_summary`. The starts of a height (records come in
    start-height order) go into that height's block once a later start shows the height is
    complete; the heights before it are delivered first. :meth:`finish_blocks` delivers what is
    left up to ``last_height``. A subclass's :meth:`deliver` builds and delivers one block and
    sets ``committed`` to its height.
    """

    def __init__(
        self,
        first_height: int,
        last_height: int,
        schedule: Schedule,
        tracker: ParticipantTracker,
    ) -> None:
        self.first_height = first_height
        self.last_height = last_height
        self.schedule = schedule
        self.tracker = tracker
        self.committed = first_height - 1
        self.gather_height: int | None = None
        self.gather: list[T] = []

    def deliver(self, height: int, starts: list[T]) -> None:
        raise NotImplementedError

    def process_start(self, record: InferenceRecord) -> None:
        """A start of height ``gather_height``: append its block item to ``gather``."""
        raise NotImplementedError

    def process_scheduled(self) -> None:
        """Called after a params or participants line is scheduled (default: nothing)."""

    def process_summary(self, record: EpochSummaryRecord) -> None:
        """An epoch summary line (default: not replayed; the chain computes its own)."""

    def feed(self, record: TraceRecord) -> None:
        """One record, in trace order."""
        if isinstance(record, InferenceRecord):
            start = record.start_height
            if self.gather_height is not None and start > self.gather_height:
                # Deliver the gathered block and the empty ones up to this start: pending
                # outcomes are then all of inferences in flight at ``start``.
                self.flush_through(start - 1)
            self.gather_height = start
            self.process_start(record)
        elif isinstance(record, ParamsRecord | ParticipantsRecord):
            schedule_record(self.schedule, record, self.tracker, self.committed)
            self.process_scheduled()
        elif isinstance(record, EpochSummaryRecord):
            self.process_summary(record)

    def pop_scheduled(self, height: int) -> list[tuple[BlockMeta, Message | ParamsPart]]:
        """The scheduled block items due at ``height``, each with what it came from."""
        due = self.schedule.pop_due(height)
        if not due:  # nearly every block
            return []
        return [
            ((item.kind, item.line, ""), part) for item in due for part in expand_scheduled(item)
        ]

    def flush_through(self, target: int) -> None:
        while self.committed < target:
            height = self.committed + 1
            starts = self.gather if height == self.gather_height else []
            if starts:
                self.gather = []  # before the block: a checkpoint taken in it has it gone
            self.deliver(height, starts)

    def finish_blocks(self) -> None:
        if self.gather_height is not None:
            self.flush_through(self.gather_height)
        self.flush_through(self.last_height)


class RecordedBlockFeeder(BlockFeeder[InferenceRecord]):
    """A :class:`BlockFeeder` of the recorded blocks: the recorded outcomes wait on the
    ``pending`` heap (:func:`~keepersim.trace.messages.push_outcome`) until
    :meth:`build_recorded_block` puts them in their block."""

    def __init__(
        self,
        first_height: int,
        last_height: int,
        schedule: Schedule,
        tracker: ParticipantTracker,
    ) -> None:
        super().__init__(first_height, last_height, schedule, tracker)
        self.pending: list[Outcome] = []

    def process_start(self, record: InferenceRecord) -> None:
        self.gather.append(record)
        push_outcome(self.pending, record)

    def build_recorded_block(
        self, height: int, starts: list[InferenceRecord]
    ) -> tuple[list[Any], list[BlockMeta]]:
        """Block items (a Message, or a :class:`ParamsPart` of a scheduled params change) with
        (kind, line, id) each (:func:`~keepersim.trace.messages.build_block`)."""
        return build_block(height, self.pop_scheduled(height), self.pending, starts)


@dataclass(frozen=True, slots=True)
class RecordedBlock:
    """One recorded block as the chain gets it (params changes as recorded); ``last_line``: the
    last trace line read before it was built (every line up to it is in this block or an
    earlier one)."""

    height: int
    txs: list[Message]
    meta: list[BlockMeta]
    last_line: int


class _Queued(RecordedBlockFeeder):
    def __init__(
        self,
        first_height: int,
        last_height: int,
        schedule: Schedule,
        tracker: ParticipantTracker,
    ) -> None:
        super().__init__(first_height, last_height, schedule, tracker)
        self.ready: deque[RecordedBlock] = deque()
        self.last_line = 0

    def deliver(self, height: int, starts: list[InferenceRecord]) -> None:
        items, meta = self.build_recorded_block(height, starts)
        txs = [resolve_scheduled(x) for x in items]
        self.ready.append(RecordedBlock(height, txs, meta, self.last_line))
        self.committed = height


def iter_recorded_blocks(
    prologue: Prologue,
    records: Iterable[TraceRecord],
    *,
    first_height: int | None = None,
    schedule: Schedule | None = None,
) -> Iterator[RecordedBlock]:
    """The recorded blocks of a trace from ``first_height`` (default: the trace's first) to its
    last, params changes as recorded (no policy override): the blocks as-recorded replay
    delivers. ``records``: the records after the prologue's first params and participants
    lines (its ``extra`` included). Each block is built as soon as the records show it is
    complete; a caller that delivers it before asking for the next reads the chain after it."""
    header = prologue.header
    feeder = _Queued(
        header.first_height if first_height is None else first_height,
        header.last_height,
        Schedule() if schedule is None else schedule,
        ParticipantTracker(prologue.participants),
    )
    feeder.last_line = max(prologue.params.line, prologue.participants.line)
    for record in records:
        feeder.feed(record)  # the blocks it completes hold only the records before it
        feeder.last_line = record.line
        while feeder.ready:
            yield feeder.ready.popleft()
    feeder.finish_blocks()
    while feeder.ready:
        yield feeder.ready.popleft()
