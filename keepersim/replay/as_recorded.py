"""As-recorded replay: the recorded traffic, block by block, through the chain.

Every height from the trace's first to its last is a block, built by
:func:`keepersim.trace.messages.build_block` (the same blocks ``keepersim serve`` replays a trace
with): scheduled messages (recorded params changes, governance, participant changes), the
recorded outcomes of earlier starts, the recorded starts (a finish recorded before its start just
before it), then the outcomes of inferences that started in the same block.

Expiries are never sent: the module expires what is still unfinished at start + expiration_blocks,
exactly as the chain does. Heights without traffic are empty blocks, because the chain must see
every height for expiries and policy wake-ups. An idle block with its selection-table read costs
~0.3 ms per policy (150 participants), so a 500,000-block trace spends ~2.5 minutes per policy on
idle blocks alone; busy blocks cost what the chain costs (the replay runs about as fast as the
simulator that wrote the trace; trace parsing is ~35 us per line of the chain's full Inference
JSON, shared by all policies).

Memory does not grow with the trace: pending outcomes sit in a heap keyed by their height (at most
the inferences in flight; ``max_pending`` reports its peak), the module-side status check keeps
only unresolved inferences, and only one block's starts are buffered.

The replay runs once per policy, all policies in lockstep over one read of the trace. Since the
assignments are recorded, each policy only watches (``health_params.shadow = True``, in force
through every params change too): after each block, the committed selection table's
``shadow_excluded`` says whom the policy would keep out of requests starting at the next height.
From it the report gives, per policy, the exclusion intervals per participant (start heights,
inclusive) and how many recorded misses, successes and declines started while their executor
would have been kept out.

Checks against the recording (on the first policy's chain; the counts do not depend on the policy):

* at each ``epoch_summary`` line, the chain's settled summaries of that epoch, participant by
  participant, field by field (``COMPARED_FIELDS``; coins and validations are not modelled by
  keepersim and are listed as such), plus the settlement height. ``declined_requests`` is not a
  summary field: it compares the line's ``epoch_declines`` (keepersim's, absent from a chain's
  export: then not compared) with ``keeper.get_declines(epoch, address)``;
* each inference's recorded status against what the module did (a recorded FINISHED that the
  module expired, a recorded STARTED that the module expired inside the trace, ...).

A failing block is never half-applied (the chain discards it). With ``strict`` a rejected
transaction stops the run with the block height and the trace line of the record that produced
it; the store stays at the last committed block. Otherwise rejections are listed in the report.
"""

from __future__ import annotations

import copy
import os
import re
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from google.protobuf.message import Message

from keepersim.chain import BlockResult, Chain
from keepersim.replay.common import (
    BlockFeeder,
    Governance,
    IntervalTracker,
    ParamsPart,
    ReplayError,
    StoreKind,
    build_scheduled_msg,
    check_policies,
    compute_replay_fingerprint,
    expand_scheduled,
    format_app_hash,
    get_table_exclusions,
    make_progress,
    open_policy_chain,
    open_trace,
    start_schedule,
)
from keepersim.store.checkpoint import (
    DictJournal,
    ResumeError,
    decode_state,
    encode_checkpoint,
    encode_state,
    process_kill_point,
    read_checkpoint,
)
from keepersim.store.committed import RUN_META_PREFIX
from keepersim.trace.format import FINISHED_LIKE, get_status_name
from keepersim.trace.genesis import Prologue
from keepersim.trace.messages import (
    BlockMeta,
    Listed,
    Outcome,
    ParticipantTracker,
    Schedule,
    build_block,
    push_outcome,
    schedule_record,
)
from keepersim.trace.reader import TraceCursor, iterate_trace
from keepersim.trace.records import (
    BadLines,
    EpochSummaryRecord,
    Header,
    InferenceRecord,
    ParamsRecord,
    ParticipantsRecord,
    TraceRecord,
)
from keepersim.types.errors import BlockError
from keepersim.types.events import (
    EpochSettled,
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    InferenceStarted,
)
from keepersim.types.messages import EXPIRED, STARTED
from keepersim.types.params import params_to_dict

__all__ = [
    "COMPARED_FIELDS",
    "NOT_MODELLED_FIELDS",
    "PolicyShadow",
    "ReplayReport",
    "get_selection_bias_note",
    "replay_as_recorded",
]

# Fields the module computes from the replayed traffic: the summaries' inference_count and
# missed_requests, and keepersim's declined_requests (the line's epoch_declines, when recorded).
COMPARED_FIELDS: Final = ("inference_count", "missed_requests", "declined_requests")
_SUMMARY_FIELDS: Final = COMPARED_FIELDS[:2]
# Summary fields keepersim does not model (coins, validation): never compared.
NOT_MODELLED_FIELDS: Final = (
    "earned_coins",
    "rewarded_coins",
    "burned_coins",
    "validated_inferences",
    "invalidated_inferences",
    "claimed",
)
_MAX_MISMATCHES: Final = 10_000


def _outcome_key(record: InferenceRecord) -> str:
    """The counter a recorded inference goes to: successes, misses, declines or unresolved."""
    status = record.status
    if status in FINISHED_LIKE:
        return "successes"
    if status == EXPIRED:
        return "misses"
    if record.is_declined():
        return "declines"
    return "unresolved"


def _status_class(status: int, end: int) -> str:
    """A recorded (status, end height) as the module can reproduce it (no validation in
    keepersim): FINISHED, EXPIRED, DECLINED (STARTED with an end) or STARTED."""
    if status in FINISHED_LIKE:
        return "FINISHED"
    if status == STARTED and end != 0:
        return "DECLINED"
    return get_status_name(status)


def get_selection_bias_note(policy: str) -> str:
    """Why the recording policy's own row shows (almost) no misses inside its exclusions."""
    return (
        f"{policy} recorded this trace: while it kept a participant out, the recorded traffic "
        "was not sent to that participant, so its own exclusions cannot show misses (selection "
        "bias, not a perfect policy). Compare the other policies' rows, or replay with "
        "--mode what-if."
    )


@dataclass(slots=True)
class PolicyShadow:
    """What one policy would have done with the recorded traffic (it only watched)."""

    policy: str
    intervals: IntervalTracker = field(default_factory=IntervalTracker)
    transitions: Counter[str] = field(default_factory=Counter)
    transitions_by_participant: dict[str, int] = field(default_factory=dict)
    fallback_blocks: int = 0
    panic_blocks: int = 0
    inside: Counter[str] = field(default_factory=Counter)
    inside_by_participant: dict[str, Counter[str]] = field(default_factory=dict)
    app_hash: str = ""

    def to_dict(self, recorded: Counter[str], recorded_policy: str | None = None) -> dict[str, Any]:
        """``recorded_policy``: the policy that recorded the trace (the header's); its row is
        marked ``is_recording_policy`` with :func:`get_selection_bias_note`."""
        misses = self.inside["misses"]
        successes = self.inside["successes"]
        is_recorder = recorded_policy is not None and self.policy == recorded_policy
        return {
            "policy": self.policy,
            "is_recording_policy": is_recorder,
            "selection_bias": get_selection_bias_note(self.policy) if is_recorder else None,
            "excluded_participants": len(self.intervals.closed),
            "excluded_blocks": sum(self.intervals.blocks.values()),
            "misses_inside": misses,
            "successes_inside": successes,
            "declines_inside": self.inside["declines"],
            "unresolved_inside": self.inside["unresolved"],
            "share_of_misses_inside": misses / recorded["misses"] if recorded["misses"] else 0.0,
            "share_of_successes_inside": (
                successes / recorded["successes"] if recorded["successes"] else 0.0
            ),
            "fallback_blocks": self.fallback_blocks,
            "panic_blocks": self.panic_blocks,
            "transitions": dict(sorted(self.transitions.items())),
            "exclusions": {
                address: {
                    **entry,
                    "misses_inside": self.inside_by_participant.get(address, Counter())["misses"],
                    "successes_inside": self.inside_by_participant.get(address, Counter())[
                        "successes"
                    ],
                    "transitions": self.transitions_by_participant.get(address, 0),
                }
                for address, entry in self.intervals.to_dict().items()
            },
            "app_hash": self.app_hash,
        }


@dataclass(slots=True)
class ReplayReport:
    """The result of an as-recorded replay (``to_dict()`` is the JSON report)."""

    trace: str
    header: Header
    policies: list[str]
    store: str
    strict: bool
    first_height: int = 0
    last_height: int = 0
    blocks: int = 0
    txs: int = 0
    recorded: Counter[str] = field(default_factory=Counter)
    recorded_by_participant: dict[str, Counter[str]] = field(default_factory=dict)
    summaries_checked: list[dict[str, Any]] = field(default_factory=list)
    summary_mismatches: list[dict[str, Any]] = field(default_factory=list)
    summary_mismatch_count: int = 0
    summaries_unchecked: list[dict[str, Any]] = field(default_factory=list)
    settlement_mismatches: list[dict[str, Any]] = field(default_factory=list)
    status_mismatches: Listed = field(default_factory=Listed)
    status_mismatch_kinds: Counter[str] = field(default_factory=Counter)
    unresolved_at_end: Counter[str] = field(default_factory=Counter)
    tx_failures: Listed = field(default_factory=Listed)
    late_scheduled: Listed = field(default_factory=Listed)
    bad_lines: BadLines = field(default_factory=BadLines)
    shadows: list[PolicyShadow] = field(default_factory=list)
    max_pending: int = 0
    max_inflight: int = 0
    beyond_trace: int = 0
    elapsed_seconds: float = 0.0

    @property
    def partial(self) -> bool:
        """The trace had no closing record (read with ``allow_partial``): it may be cut."""
        return self.header.cut is not None

    @property
    def ok(self) -> bool:
        """A whole trace, with no summary mismatch, no status mismatch, no rejected transaction
        (skipped bad lines are reported apart). A partial trace is never ok: what is missing
        was not checked."""
        return not (
            self.partial
            or self.summary_mismatch_count
            or self.status_mismatches.count
            or self.tx_failures.count
        )

    def get_shadow(self, policy: str) -> PolicyShadow:
        for shadow in self.shadows:
            if shadow.policy == policy:
                return shadow
        raise KeyError(policy)

    def to_dict(self) -> dict[str, Any]:
        header = self.header
        return {
            "mode": "as-recorded",
            "trace": self.trace,
            "chain_id": header.chain_id,
            "source": header.source,
            "scenario": header.get_scenario_name(),
            "seed": header.seed,
            "recorded_policy": header.policy,
            "policies": list(self.policies),
            "store": self.store,
            "strict": self.strict,
            "first_height": self.first_height,
            "last_height": self.last_height,
            "blocks": self.blocks,
            "txs": self.txs,
            "ok": self.ok,
            "partial": self.partial,
            "trace_end": None if header.cut is None else header.cut.to_dict(),
            "recorded": {
                "inferences": self.recorded["inferences"],
                "misses": self.recorded["misses"],
                "successes": self.recorded["successes"],
                "declines": self.recorded["declines"],
                "unresolved": self.recorded["unresolved"],
                "miss_rate": (
                    self.recorded["misses"] / (self.recorded["misses"] + self.recorded["successes"])
                    if self.recorded["misses"] + self.recorded["successes"]
                    else 0.0
                ),
                "by_participant": {
                    a: dict(c) for a, c in sorted(self.recorded_by_participant.items())
                },
            },
            "summaries": {
                "compared_fields": list(COMPARED_FIELDS),
                "not_modelled_fields": list(NOT_MODELLED_FIELDS),
                "checked": self.summaries_checked,
                "mismatch_count": self.summary_mismatch_count,
                "mismatches": self.summary_mismatches,
                "unchecked": self.summaries_unchecked,
                "settlement_mismatches": self.settlement_mismatches,
            },
            "status": {
                "mismatch_count": self.status_mismatches.count,
                "mismatch_kinds": dict(sorted(self.status_mismatch_kinds.items())),
                "mismatches": self.status_mismatches.items,
                "unresolved_at_end": dict(sorted(self.unresolved_at_end.items())),
            },
            "tx_failures": self.tx_failures.to_dict(),
            "late_scheduled": self.late_scheduled.to_dict(),
            "bad_lines": self.bad_lines.to_dict(),
            "policies_shadow": {
                s.policy: s.to_dict(self.recorded, header.policy) for s in self.shadows
            },
            "stats": {
                "max_pending": self.max_pending,
                "max_inflight": self.max_inflight,
                "outcomes_beyond_trace": self.beyond_trace,
                "elapsed_seconds": round(self.elapsed_seconds, 3),
                "blocks_per_second": (
                    round(self.blocks / self.elapsed_seconds, 1) if self.elapsed_seconds else None
                ),
            },
        }


@dataclass(slots=True)
class _Lane:
    """One policy's chain."""

    shadow: PolicyShadow
    chain: Chain
    excluded: frozenset[str] = frozenset()


_TX_INDEX = re.compile(r"block \d+, tx (\d+) ")
# The run's own state (besides the report, schedule, tracker and lanes) a checkpoint holds.
_RUN_STATE = ("committed", "gather_height", "gather", "pending", "settled_at")
# Meta keys of the parts checkpointed incrementally.
_CK_INFLIGHT = RUN_META_PREFIX + b"inflight/"
_CK_RECORDED = RUN_META_PREFIX + b"recorded/"
_CK_TRACKER = RUN_META_PREFIX + b"tracker"
_CK_DEFERRED = RUN_META_PREFIX + b"deferred"


class _AsRecordedRun(BlockFeeder[InferenceRecord]):
    def __init__(
        self,
        report: ReplayReport,
        lanes: list[_Lane],
        schedule: Schedule,
        tracker: ParticipantTracker,
        *,
        strict: bool,
        progress: Any,
        fingerprint: bytes | None = None,
        cursor: TraceCursor | None = None,
    ) -> None:
        super().__init__(report.first_height, report.last_height)
        # A resumable replay (leveldb): each lane's commit carries a checkpoint of the state.
        self.fingerprint = fingerprint
        self.cursor = cursor
        self.current: TraceRecord | None = None  # the record being processed (None: the end)
        self.block: tuple[int, list[Any], list[tuple[str, int, str]]] | None = None
        # Per lane: what its store's checkpoint is missing since that lane's last commit.
        self.journals = [DictJournal() for _ in lanes]
        self.touched_participants: list[set[str]] = [set() for _ in lanes]
        self.tracker_dirty = [True for _ in lanes]
        self.deferred_dirty = [True for _ in lanes]
        self.report = report
        self.lanes = lanes
        self.schedule = schedule
        self.tracker = tracker
        self.strict = strict
        self.progress = progress
        self.pending: list[Outcome] = []
        # Unresolved on the reference chain: id -> (recorded status, line, start, end)
        self.inflight: dict[str, tuple[int, int, int, int]] = {}
        self.deferred: deque[EpochSummaryRecord] = deque()
        self.settled_at: dict[int, int] = {}

    # -- reading ------------------------------------------------------------------------------

    def process(self, record: TraceRecord) -> None:
        if isinstance(record, InferenceRecord):
            self.process_inference(record)
        elif isinstance(record, EpochSummaryRecord):
            self.deferred.append(record)
            self.deferred_dirty = [True for _ in self.lanes]
            self.check_summaries()
        elif isinstance(record, ParamsRecord | ParticipantsRecord):
            schedule_record(self.schedule, record, self.tracker, self.committed)
            self.tracker_dirty = [True for _ in self.lanes]

    def process_inference(self, record: InferenceRecord) -> None:
        self.gather_start(record.start_height, record)
        if push_outcome(self.pending, record):
            self.report.max_pending = max(self.report.max_pending, len(self.pending))
        self.count_recorded(record)

    def count_recorded(self, record: InferenceRecord) -> None:
        key = _outcome_key(record)
        recorded = self.report.recorded
        recorded["inferences"] += 1
        recorded[key] += 1
        address = record.assigned_to
        per = self.report.recorded_by_participant.get(address)
        if per is None:
            per = self.report.recorded_by_participant[address] = Counter()
        per["inferences"] += 1
        per[key] += 1
        if self.fingerprint is not None:
            for touched in self.touched_participants:
                touched.add(address)

    # -- blocks -------------------------------------------------------------------------------

    def build_block(
        self, height: int, starts: list[InferenceRecord]
    ) -> tuple[list[Any], list[BlockMeta]]:
        """Block items (a Message, or a ParamsPart of a scheduled params change) with
        (kind, line, id) each."""
        scheduled = [
            ((item.kind, item.line, ""), part)
            for item in self.schedule.pop_due(height)
            for part in expand_scheduled(item)
        ]
        return build_block(height, scheduled, self.pending, starts)

    def deliver(self, height: int, starts: list[InferenceRecord]) -> None:
        for lane in self.lanes:
            self.count_inside(lane, starts)
        items, meta = self.build_block(height, starts)
        for record in starts:
            self.inflight[record.inference_id] = (
                record.status,
                record.line,
                record.start_height,
                record.end_height,
            )
        self.report.max_inflight = max(self.report.max_inflight, len(self.inflight))
        self.block = (height, items, meta)
        self.deliver_lanes(height, items, meta, 0)

    def deliver_lanes(
        self,
        height: int,
        items: list[Any],
        meta: list[tuple[str, int, str]],
        first: int,
        recovered: BlockResult | None = None,
    ) -> None:
        """Block ``height`` through the lanes from ``first`` on (``recovered``: the result of
        lane ``first``, which committed it before a resume), then the block's bookkeeping."""
        for i in range(first, len(self.lanes)):
            lane = self.lanes[i]
            if recovered is not None and i == first:
                result = recovered
            else:
                msgs: list[Message] = [
                    build_scheduled_msg(x, lane.chain, lane.shadow.policy, True)
                    if isinstance(x, ParamsPart)
                    else x
                    for x in items
                ]
                result = self.deliver_lane(lane, height, msgs, meta, i)
            if i == 0:
                self.process_reference(result, meta)
            self.process_shadow(lane, result)
        self.committed = height
        self.report.blocks += 1
        self.report.txs += len(items)
        self.check_summaries()
        self.progress.update(1)

    # -- resuming -----------------------------------------------------------------------------

    def get_checkpoint(self, index: int, result: BlockResult) -> dict[bytes, bytes | None]:
        """The replay's state as lane ``index`` commits block ``result.height`` (the lanes
        before it have processed theirs), with the block and that lane's result.

        What is big and changes little goes in incrementally: the in-flight inferences and the
        recorded counts per participant (only those touched since the last block), the
        participant tracker and the deferred epoch summaries (only when they changed)."""
        assert self.fingerprint is not None
        # Each lane's store gets its own increments: its journal is of what that store holds.
        journal, touched = self.journals[index], self.touched_participants[index]
        meta = journal.get_delta(_CK_INFLIGHT, self.inflight)
        by_participant = self.report.recorded_by_participant
        for address in touched:
            meta[_CK_RECORDED + address.encode()] = encode_state(by_participant[address])
        touched.clear()
        if self.tracker_dirty[index]:
            meta[_CK_TRACKER] = encode_state(self.tracker)
            self.tracker_dirty[index] = False
        if self.deferred_dirty[index]:
            meta[_CK_DEFERRED] = encode_state(self.deferred)
            self.deferred_dirty[index] = False
        report = copy.copy(self.report)
        report.recorded_by_participant = {}
        state = {
            "report": report,
            "run": {name: getattr(self, name) for name in _RUN_STATE},
            "schedule": self.schedule,
            "lanes": [(lane.shadow, lane.excluded) for lane in self.lanes],
            "block": self.block,
            "lane": index,
            "result": (result.events, result.tx_results),
            "current": self.current,
            "cursor": self.cursor,
        }
        meta.update(encode_checkpoint(self.fingerprint, state))
        process_kill_point(result.height, f"pre-{self.lanes[index].shadow.policy}")
        return meta

    def process_checkpoint(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state back and finish its block through the remaining lanes."""
        chain = self.lanes[state["lane"]].chain
        self.report = state["report"]
        self.report.recorded_by_participant = {
            key[len(_CK_RECORDED) :].decode(): decode_state(value)
            for key, value in chain.iterate_meta(_CK_RECORDED)
        }
        for name, value in state["run"].items():
            setattr(self, name, value)
        self.inflight = self.journals[state["lane"]].load(
            _CK_INFLIGHT, chain.iterate_meta(_CK_INFLIGHT)
        )
        # The other lanes' stores may hold other versions: they write everything afresh.
        for i, journal in enumerate(self.journals):
            if i != state["lane"]:
                journal.load(_CK_INFLIGHT, self.lanes[i].chain.iterate_meta(_CK_INFLIGHT))
            self.touched_participants[i].update(self.report.recorded_by_participant)
            self.tracker_dirty[i] = self.deferred_dirty[i] = True
        self.schedule = state["schedule"]
        tracker = chain.get_meta(_CK_TRACKER)
        if tracker is not None:
            self.tracker = decode_state(tracker)
        deferred = chain.get_meta(_CK_DEFERRED)
        if deferred is not None:
            self.deferred = decode_state(deferred)
        for lane, (shadow, excluded) in zip(self.lanes, state["lanes"], strict=True):
            lane.shadow, lane.excluded = shadow, excluded
        height, items, meta = state["block"]
        index = state["lane"]
        events, tx_results = state["result"]
        recovered = BlockResult(height, chain.app_hash, events, tx_results)
        self.block = state["block"]
        self.deliver_lanes(height, items, meta, index, recovered)

    def deliver_lane(
        self,
        lane: _Lane,
        height: int,
        msgs: list[Message],
        meta: list[tuple[str, int, str]],
        index: int = 0,
    ) -> BlockResult:
        hook = None if self.fingerprint is None else partial(self.get_checkpoint, index)
        try:
            result = lane.chain.deliver_block(msgs, height=height, strict=self.strict, meta=hook)
            if hook is not None:
                process_kill_point(height, f"post-{lane.shadow.policy}")
            return result
        except BlockError as exc:
            found = _TX_INDEX.search(str(exc))
            cause = exc.__cause__ or exc
            if found is not None:
                kind, line, inference_id = meta[int(found.group(1))]
                where = f"{self.report.trace}:{line}" if line else self.report.trace
                what = f"{kind} {inference_id!r}" if inference_id else kind
            else:
                where, what = self.report.trace, "a transaction"
            raise ReplayError(
                f"{where}: block {height}: {what} rejected ({lane.shadow.policy} replay): "
                f"{cause}; the store stays at height {height - 1}"
            ) from exc

    def process_reference(self, result: BlockResult, meta: list[tuple[str, int, str]]) -> None:
        for tx in result.get_failed():
            kind, line, inference_id = meta[tx.index]
            self.report.tx_failures.add(
                {
                    "height": result.height,
                    "line": line,
                    "kind": kind,
                    "inference_id": inference_id,
                    "error": tx.error,
                }
            )
            if kind == "start":
                self.inflight.pop(inference_id, None)
        for event in result.events:
            if isinstance(event, InferenceStarted):
                continue  # most events: one look at each
            if isinstance(event, InferenceFinished):
                self.resolve(event.inference_id, "FINISHED", event.height)
            elif isinstance(event, InferenceExpired):
                self.resolve(event.inference_id, "EXPIRED", event.height)
            elif isinstance(event, InferenceDeclined):
                self.resolve(event.inference_id, "DECLINED", event.height)
            elif isinstance(event, EpochSettled):
                self.settled_at[event.settled_epoch] = event.height

    def resolve(self, inference_id: str, module_status: str, height: int) -> None:
        entry = self.inflight.pop(inference_id, None)
        if entry is None:
            return
        if _status_class(entry[0], entry[3]) != module_status:
            self.add_status_mismatch(inference_id, entry, module_status, height)

    def add_status_mismatch(
        self,
        inference_id: str,
        entry: tuple[int, int, int, int],
        module_status: str,
        module_height: int,
    ) -> None:
        """A recorded inference (``inflight`` entry) the module left in another status."""
        status, line, start, end = entry
        recorded = _status_class(status, end)
        self.report.status_mismatch_kinds[f"{recorded}->{module_status}"] += 1
        self.report.status_mismatches.add(
            {
                "inference_id": inference_id,
                "line": line,
                "start_height": start,
                "recorded": recorded if recorded == "DECLINED" else get_status_name(status),
                "recorded_end_height": end,
                "module": module_status,
                "module_height": module_height,
            }
        )

    def process_shadow(self, lane: _Lane, result: BlockResult) -> None:
        shadow = lane.shadow
        for event in result.events:
            if isinstance(event, HealthTransition):
                shadow.transitions[f"{event.from_state}->{event.to_state}"] += 1
                shadow.transitions_by_participant[event.address] = (
                    shadow.transitions_by_participant.get(event.address, 0) + 1
                )
        excluded, fallback, panic = get_table_exclusions(lane.chain)
        shadow.fallback_blocks += fallback
        shadow.panic_blocks += panic
        lane.excluded = excluded
        if result.height < self.report.last_height:
            shadow.intervals.observe(result.height + 1, excluded)

    def count_inside(self, lane: _Lane, starts: list[InferenceRecord]) -> None:
        if not lane.excluded:
            return
        for record in starts:
            address = record.assigned_to
            if address not in lane.excluded:
                continue
            key = _outcome_key(record)
            lane.shadow.inside[key] += 1
            lane.shadow.inside_by_participant.setdefault(address, Counter())[key] += 1

    # -- checks -------------------------------------------------------------------------------

    def check_summaries(self) -> None:
        while self.deferred and self.deferred[0].height <= self.committed:
            self.compare_summaries(self.deferred.popleft())
            self.deferred_dirty = [True for _ in self.lanes]

    def compare_summaries(self, record: EpochSummaryRecord) -> None:
        report = self.report
        epoch = record.epoch_index
        exported = {s.participant_id: s for s in record.summaries}
        recorded_declines = (
            None
            if record.declines is None
            else {d.address: d.declined_requests for d in record.declines}
        )
        with self.lanes[0].chain.read() as keeper:
            computed = {s.participant_id: s for s in keeper.get_summaries_for_epoch(epoch)}
            computed_declines = {
                address: keeper.get_declines(epoch, address)
                for address in set(exported) | set(computed) | set(recorded_declines or ())
            }
        settled = self.settled_at.get(epoch)
        if settled != record.height:
            report.settlement_mismatches.append(
                {
                    "epoch": epoch,
                    "line": record.line,
                    "exported_height": record.height,
                    "computed_height": settled,
                }
            )
        mismatches = 0
        for participant in sorted(set(exported) | set(computed)):
            if recorded_declines is not None:
                ev, cv = recorded_declines.get(participant, 0), computed_declines[participant]
                if ev != cv:
                    self.add_mismatch(epoch, participant, "declined_requests", ev, cv, record.line)
                    mismatches += 1
            e = exported.get(participant)
            c = computed.get(participant)
            if e is None or c is None:
                self.add_mismatch(
                    epoch,
                    participant,
                    "(summary)",
                    "present" if e is not None else "missing",
                    "present" if c is not None else "missing",
                    record.line,
                )
                mismatches += 1
                continue
            for name in _SUMMARY_FIELDS:
                ev, cv = getattr(e, name), getattr(c, name)
                if ev != cv:
                    self.add_mismatch(epoch, participant, name, ev, cv, record.line)
                    mismatches += 1
        report.summaries_checked.append(
            {
                "epoch": epoch,
                "line": record.line,
                "height": record.height,
                "participants": len(exported),
                "declines_compared": recorded_declines is not None,
                "mismatches": mismatches,
            }
        )

    def add_mismatch(
        self, epoch: int, participant: str, name: str, exported: Any, computed: Any, line: int
    ) -> None:
        self.report.summary_mismatch_count += 1
        if len(self.report.summary_mismatches) < _MAX_MISMATCHES:
            self.report.summary_mismatches.append(
                {
                    "epoch": epoch,
                    "participant": participant,
                    "field": name,
                    "exported": exported,
                    "computed": computed,
                    "line": line,
                }
            )

    def finish(self) -> None:
        last = self.report.last_height
        self.finish_blocks()
        self.report.beyond_trace = len(self.pending)
        for record in self.deferred:
            self.report.summaries_unchecked.append(
                {"epoch": record.epoch_index, "line": record.line, "height": record.height}
            )
        expiration = self.lanes[0].chain.get_params().params.validation_params.expiration_blocks
        for inference_id, entry in sorted(self.inflight.items()):
            status, _, start, end = entry
            recorded = _status_class(status, end)
            resolves_at = end if recorded in ("FINISHED", "DECLINED") else start + expiration
            if recorded == "STARTED" or resolves_at > last:
                self.report.unresolved_at_end[recorded] += 1
                continue
            self.add_status_mismatch(inference_id, entry, "STARTED", last)
        for lane in self.lanes:
            lane.shadow.intervals.finish(last)
            lane.shadow.app_hash = format_app_hash(lane.chain.app_hash)


def _read_lanes_checkpoint(
    lanes: list[_Lane],
    fingerprint: bytes,
    prologue: Prologue,
) -> dict[str, Any] | None:
    """The checkpoint to resume from: the last lane that committed the highest block (the lanes
    go through a block in order, so a kill leaves lanes 0..k-1 at H and the rest at H - 1).
    None: nothing was committed yet (every store holds just this replay's genesis)."""
    heights = [lane.chain.height for lane in lanes]
    top = heights[0]
    k = sum(1 for h in heights if h == top)
    if heights != [top] * k + [top - 1] * (len(lanes) - k):
        raise ResumeError(f"the replay's stores are at heights {heights}: not one replay's")
    states = []
    for lane in lanes:
        where = f"store of the {lane.shadow.policy} replay"
        states.append(read_checkpoint(lane.chain.get_meta, fingerprint, where))
        if states[-1] is None:
            fresh = open_policy_chain(
                prologue,
                lane.shadow.policy,
                shadow=True,
                store="memory",
                store_dir=None,
                name=lane.shadow.policy,
            )
            with fresh:
                if (fresh.height, fresh.app_hash) != (lane.chain.height, lane.chain.app_hash):
                    raise ResumeError(
                        f"{where} holds another chain (height {lane.chain.height}, no "
                        "checkpoint of this replay): cannot resume it"
                    )
    state: dict[str, Any] | None = states[k - 1]
    return state


def replay_as_recorded(
    trace_path: str | os.PathLike[str],
    *,
    policies: Sequence[str] = ("gonka",),
    store: StoreKind = "memory",
    store_dir: str | os.PathLike[str] | None = None,
    governance: Governance | None = None,
    skip_bad: bool = False,
    progress: bool = False,
    strict: bool = False,
    max_listed: int = 50,
    resume: bool = False,
    resumable: bool = False,
    allow_partial: bool = False,
) -> ReplayReport:
    """Replay a trace's recorded traffic once per policy (in lockstep); see the module doc.

    A ``resumable`` leveldb replay checkpoints: each lane's commit carries a checkpoint
    (:mod:`keepersim.store.checkpoint`; it costs about as much as the replay itself, so it is
    asked for); ``resume`` goes on with the stores in ``store_dir`` from their last committed
    block (the lanes may be one block apart) and ends with the report of an uninterrupted
    replay.

    ``store``: "memory", or "leveldb" with one fresh folder per policy under ``store_dir``.
    ``governance``: (height, ModuleParams) sent as MsgUpdateParams and MsgUpdateExtensionParams
    from the authority in block height (policy and shadow are kept as the replay sets them).
    ``allow_partial``: replay a trace without its closing record up to its last whole line (the
    report says ``partial`` and is never ``ok``). Raises :class:`ReplayError` (strict
    rejections, setup) and :class:`~keepersim.trace.records.TraceError` (a trace without its
    closing record, or whose closing record does not match; bad lines without ``skip_bad``).
    """
    policies = list(policies)
    check_policies(policies)
    started = time.perf_counter()
    bad = BadLines(max_listed=max_listed)
    cursor = TraceCursor()
    prologue, records = open_trace(
        trace_path, skip_bad=skip_bad, bad_lines=bad, cursor=cursor, allow_partial=allow_partial
    )
    header = prologue.header
    report = ReplayReport(
        trace=os.fspath(trace_path),
        header=header,
        policies=policies,
        store=store,
        strict=strict,
        first_height=header.first_height,
        last_height=header.last_height,
        bad_lines=bad,
        status_mismatches=Listed(max_listed),
        tx_failures=Listed(max_listed),
    )
    fingerprint = None
    if store == "leveldb" and (resumable or resume):
        fingerprint = compute_replay_fingerprint(
            trace_path,
            mode="as-recorded",
            policies=policies,
            governance=[[h, params_to_dict(p)] for h, p in governance or ()],
            skip_bad=skip_bad,
            strict=strict,
            max_listed=max_listed,
        )
    lanes: list[_Lane] = []
    try:
        for policy in policies:
            chain = open_policy_chain(
                prologue,
                policy,
                shadow=True,
                store=store,
                store_dir=store_dir,
                name=policy,
                resume=resume,
                resumable=fingerprint is not None,
            )
            lane = _Lane(PolicyShadow(policy), chain)
            lanes.append(lane)
            excluded, _, _ = get_table_exclusions(chain)
            lane.excluded = excluded
            lane.shadow.intervals.observe(header.first_height, excluded)
        state = None
        if resume and fingerprint is not None:
            state = _read_lanes_checkpoint(lanes, fingerprint, prologue)
        schedule, tracker = start_schedule(prologue, governance, max_listed)
        with make_progress(header, progress, "replay") as bar:
            run = _AsRecordedRun(
                report,
                lanes,
                schedule,
                tracker,
                strict=strict,
                progress=bar,
                fingerprint=fingerprint,
                cursor=cursor,
            )
            if state is None:
                for record in prologue.extra:
                    run.process(record)
            else:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
                bar.update(state["block"][0] - header.first_height)
                run.process_checkpoint(state)
                report = run.report
                run.cursor = cursor = state["cursor"]
                records = iterate_trace(
                    trace_path,
                    skip_bad=skip_bad,
                    bad_lines=report.bad_lines,
                    cursor=cursor,
                    allow_partial=allow_partial,
                )
                if state["current"] is not None:
                    run.process(state["current"])
            for record in records:
                run.current = record
                run.process(record)
            run.current = None
            run.finish()
        report.late_scheduled = run.schedule.late
        report.shadows = [lane.shadow for lane in lanes]
    finally:
        for lane in lanes:
            lane.chain.close()
    report.elapsed_seconds = time.perf_counter() - started
    return report
