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

The checks are :mod:`keepersim.replay.as_recorded_checks`, the report
:mod:`keepersim.replay.as_recorded_report`, the lane and checkpoint loop
:mod:`keepersim.replay.lanes`.

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
from functools import partial
from typing import Any

from google.protobuf.message import Message

from keepersim.chain import BlockResult
from keepersim.replay.as_recorded_checks import RecordedChecks
from keepersim.replay.as_recorded_report import (
    COMPARED_FIELDS,
    NOT_MODELLED_FIELDS,
    PolicyShadow,
    ReplayReport,
    get_outcome_key,
    get_selection_bias_note,
)
from keepersim.replay.common import (
    Governance,
    ReplayError,
    StoreKind,
    check_policies,
    compute_replay_fingerprint,
    format_app_hash,
    get_table_exclusions,
    make_progress,
    open_trace,
    start_schedule,
)
from keepersim.replay.lanes import (
    Lane,
    close_lanes,
    drive_records,
    open_lanes,
    read_lane_checkpoint,
)
from keepersim.store.checkpoint import (
    DictJournal,
    ResumeError,
    decode_state,
    encode_checkpoint,
    encode_state,
    process_kill_point,
)
from keepersim.store.committed import RUN_META_PREFIX
from keepersim.trace.blocks import RecordedBlockFeeder, resolve_scheduled
from keepersim.trace.genesis import Prologue
from keepersim.trace.messages import Listed, ParticipantTracker, Schedule, build_block
from keepersim.trace.reader import TraceCursor
from keepersim.trace.records import BadLines, EpochSummaryRecord, InferenceRecord, TraceRecord
from keepersim.types.errors import BlockError
from keepersim.types.events import (
    EpochSettled,
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    InferenceStarted,
)
from keepersim.types.params import params_to_dict

__all__ = [
    "COMPARED_FIELDS",
    "NOT_MODELLED_FIELDS",
    "PolicyShadow",
    "ReplayReport",
    "get_selection_bias_note",
    "replay_as_recorded",
]

_TX_INDEX = re.compile(r"block \d+, tx (\d+) ")
# The run's own state (besides the report, schedule, tracker and lanes) a checkpoint holds.
_RUN_STATE = ("committed", "gather_height", "gather", "pending", "settled_at")
# Meta keys of the parts checkpointed incrementally.
_CK_INFLIGHT = RUN_META_PREFIX + b"inflight/"
_CK_RECORDED = RUN_META_PREFIX + b"recorded/"
_CK_TRACKER = RUN_META_PREFIX + b"tracker"
_CK_DEFERRED = RUN_META_PREFIX + b"deferred"


class _AsRecordedRun(RecordedChecks, RecordedBlockFeeder):
    """The replay: the recorded blocks through every lane in turn, then the block's checks and
    each policy's shadow bookkeeping (``shadows[i]`` is lane ``i``'s)."""

    def __init__(
        self,
        report: ReplayReport,
        lanes: list[Lane],
        shadows: list[PolicyShadow],
        schedule: Schedule,
        tracker: ParticipantTracker,
        *,
        strict: bool,
        progress: Any,
        fingerprint: bytes | None = None,
        cursor: TraceCursor | None = None,
    ) -> None:
        super().__init__(report.first_height, report.last_height, schedule, tracker)
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
        self.shadows = shadows
        self.strict = strict
        self.progress = progress
        # Unresolved on the reference chain: id -> (recorded status, line, start, end)
        self.inflight: dict[str, tuple[int, int, int, int]] = {}
        self.deferred: deque[EpochSummaryRecord] = deque()
        self.settled_at: dict[int, int] = {}

    # -- reading ------------------------------------------------------------------------------

    def process_summary(self, record: EpochSummaryRecord) -> None:
        self.deferred.append(record)
        self.deferred_dirty = [True for _ in self.lanes]
        self.check_summaries()

    def process_scheduled(self) -> None:
        self.tracker_dirty = [True for _ in self.lanes]

    def get_bad_lines(self) -> BadLines:
        return self.report.bad_lines

    def count_recorded(self, starts: list[InferenceRecord]) -> None:
        """A block's recorded starts: counted per participant (all, and by outcome; plain
        dicts, the report's totals are their sums) and put in flight on the reference chain, in
        one pass over them."""
        report = self.report
        by_participant = report.recorded_by_participant
        inflight = self.inflight
        for record in starts:
            key = get_outcome_key(record)
            address = record.assigned_to
            per = by_participant.get(address)
            if per is None:
                per = by_participant[address] = {"inferences": 1, key: 1}
            else:
                per["inferences"] += 1
                per[key] = per.get(key, 0) + 1
            inflight[record.inference_id] = (
                record.status,
                record.line,
                record.start_height,
                record.end_height,
            )
        if len(inflight) > report.max_inflight:
            report.max_inflight = len(inflight)
        if self.fingerprint is not None:
            addresses = {record.assigned_to for record in starts}
            for touched in self.touched_participants:
                touched.update(addresses)

    # -- blocks -------------------------------------------------------------------------------

    def deliver(self, height: int, starts: list[InferenceRecord]) -> None:
        # The outcomes pending only grow between blocks: their peak is seen as a block begins.
        report = self.report
        if len(self.pending) > report.max_pending:
            report.max_pending = len(self.pending)
        if starts:
            for lane, shadow in zip(self.lanes, self.shadows, strict=True):
                self.count_inside(lane, shadow, starts)
            self.count_recorded(starts)
        # Only a scheduled item can be a params change, which each lane gets with its policy.
        due = self.schedule.get_next_height()
        scheduled = due is not None and due <= height
        if scheduled:
            items, meta = self.build_recorded_block(height, starts)
        else:  # nearly every block: nothing scheduled to pop
            items, meta = build_block(height, (), self.pending, starts)
        self.block = (height, items, meta)
        self.deliver_lanes(height, items, meta, 0, resolve=scheduled)

    def deliver_lanes(
        self,
        height: int,
        items: list[Any],
        meta: list[tuple[str, int, str]],
        first: int,
        recovered: BlockResult | None = None,
        *,
        resolve: bool = True,
    ) -> None:
        """Block ``height`` through the lanes from ``first`` on (``recovered``: the result of
        lane ``first``, which committed it before a resume), then the block's bookkeeping.
        ``resolve``: the items may hold a params change (:func:`resolve_scheduled` makes it
        each lane's message, with its policy); else they go to every lane as they are."""
        for i in range(first, len(self.lanes)):
            lane = self.lanes[i]
            if recovered is not None and i == first:
                result = recovered
            else:
                msgs = (
                    [resolve_scheduled(x, lane.policy, True) for x in items] if resolve else items
                )
                result = self.deliver_lane(lane, height, msgs, meta, i)
            if i == 0:
                self.process_reference(result, meta)
            self.process_shadow(lane, self.shadows[i], result)
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
            "lanes": [
                (shadow, lane.excluded)
                for lane, shadow in zip(self.lanes, self.shadows, strict=True)
            ],
            "block": self.block,
            "lane": index,
            "result": (result.events, result.tx_results),
            "current": self.current,
            "cursor": self.cursor,
        }
        meta.update(encode_checkpoint(self.fingerprint, state))
        process_kill_point(result.height, f"pre-{self.lanes[index].policy}")
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
        self.shadows = []
        for lane, (shadow, excluded) in zip(self.lanes, state["lanes"], strict=True):
            self.shadows.append(shadow)
            lane.excluded = excluded
        height, items, meta = state["block"]
        index = state["lane"]
        events, tx_results = state["result"]
        recovered = BlockResult(height, chain.app_hash, events, tx_results)
        self.block = state["block"]
        self.deliver_lanes(height, items, meta, index, recovered)

    def deliver_lane(
        self,
        lane: Lane,
        height: int,
        msgs: list[Message],
        meta: list[tuple[str, int, str]],
        index: int = 0,
    ) -> BlockResult:
        hook = None if self.fingerprint is None else partial(self.get_checkpoint, index)
        try:
            result = lane.chain.deliver_block(msgs, height=height, strict=self.strict, meta=hook)
            if hook is not None:
                process_kill_point(height, f"post-{lane.policy}")
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
                f"{where}: block {height}: {what} rejected ({lane.policy} replay): "
                f"{cause}; the store stays at height {height - 1}"
            ) from exc

    def process_reference(self, result: BlockResult, meta: list[tuple[str, int, str]]) -> None:
        for tx in result.tx_results:
            if tx.ok:
                continue
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

    def process_shadow(self, lane: Lane, shadow: PolicyShadow, result: BlockResult) -> None:
        for event in result.events:
            if isinstance(event, HealthTransition):
                shadow.transitions[f"{event.from_state}->{event.to_state}"] += 1
                shadow.transitions_by_participant[event.address] = (
                    shadow.transitions_by_participant.get(event.address, 0) + 1
                )
        excluded, fallback, panic = get_table_exclusions(lane.chain, lane.excluded)
        shadow.fallback_blocks += fallback
        shadow.panic_blocks += panic
        lane.excluded = excluded
        if result.height < self.report.last_height:
            shadow.intervals.observe(result.height + 1, excluded)

    def count_inside(self, lane: Lane, shadow: PolicyShadow, starts: list[InferenceRecord]) -> None:
        if not lane.excluded:
            return
        for record in starts:
            address = record.assigned_to
            if address not in lane.excluded:
                continue
            key = get_outcome_key(record)
            shadow.inside[key] += 1
            shadow.inside_by_participant.setdefault(address, Counter())[key] += 1

    def finish(self) -> None:
        last = self.report.last_height
        self.finish_blocks()
        self.report.beyond_trace = len(self.pending)
        self.report.count_recorded_totals()
        self.check_unresolved_at_end()
        for lane, shadow in zip(self.lanes, self.shadows, strict=True):
            shadow.intervals.finish(last)
            shadow.app_hash = format_app_hash(lane.chain.app_hash)


def _read_lanes_checkpoint(
    lanes: list[Lane], fingerprint: bytes, prologue: Prologue
) -> dict[str, Any] | None:
    """The checkpoint to resume from: the last lane that committed the highest block (the lanes
    go through a block in order, so a kill leaves lanes 0..k-1 at H and the rest at H - 1).
    None: nothing was committed yet (every store holds just this replay's genesis)."""
    heights = [lane.chain.height for lane in lanes]
    top = heights[0]
    k = sum(1 for h in heights if h == top)
    if heights != [top] * k + [top - 1] * (len(lanes) - k):
        raise ResumeError(f"the replay's stores are at heights {heights}: not one replay's")
    states = [
        read_lane_checkpoint(
            lane, fingerprint, prologue, shadow=True, where=f"store of the {lane.policy} replay"
        )
        for lane in lanes
    ]
    return states[k - 1]


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
    lanes = open_lanes(
        prologue,
        policies,
        shadow=True,
        store=store,
        store_dir=store_dir,
        names=policies,
        resume=resume,
        resumable=fingerprint is not None,
    )
    try:
        shadows = [PolicyShadow(policy) for policy in policies]
        for lane, shadow in zip(lanes, shadows, strict=True):
            excluded, _, _ = get_table_exclusions(lane.chain)
            lane.excluded = excluded
            shadow.intervals.observe(header.first_height, excluded)
        state = None
        if resume and fingerprint is not None:
            state = _read_lanes_checkpoint(lanes, fingerprint, prologue)
        schedule, tracker = start_schedule(prologue, governance, max_listed)
        with make_progress(header, progress, "replay") as bar:
            run = _AsRecordedRun(
                report,
                lanes,
                shadows,
                schedule,
                tracker,
                strict=strict,
                progress=bar,
                fingerprint=fingerprint,
                cursor=cursor,
            )
            drive_records(
                run,
                trace_path,
                prologue,
                records,
                state,
                resume_height=0 if state is None else state["block"][0],
                skip_bad=skip_bad,
                allow_partial=allow_partial,
                bar=bar,
            )
        report = run.report
        report.late_scheduled = run.schedule.late
        report.shadows = run.shadows
    finally:
        close_lanes(lanes)
    report.elapsed_seconds = time.perf_counter() - started
    return report
