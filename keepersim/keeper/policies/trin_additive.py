"""trin's census peer scoring as shipped (portal-bridge), with heights for time.

score = clamp(initial_score + sum of the deltas of the outcomes of the last window_blocks blocks,
0, max_score): +success_delta for a finished inference, +miss_delta for an expired one,
+pushback_delta for a decline (trin's "rate limited" / "transfer in progress": pushback costs a
little weight, never the gate). Score 0 keeps the participant out; otherwise its selection weight
is multiplied by score / initial_score, so a healthy record can double a participant's share.

State: a log, one record per height with outcomes (TrinScoreRecord: each participant's outcomes
of that height merged into one delta), kept while the window counts it and deleted after. No
per-participant entry is written: a block writes one record and deletes one, whatever its
traffic. The log's index, each participant's (height, delta) pairs (``Events``), is kept in
memory between blocks and rebuilt from the records after a restart; a reader builds it once
for a whole table (trin_additive_index: the speed-ups, each beside its plain form).

Ageing needs no end-block work: an event stops counting at ``height + window_blocks``, and the
verdict's ``valid_until`` is the last height before the first ageing-out that moves the clamped
score (usually the oldest counted event's; an event whose leaving the clamp absorbs, or whose
merged delta is 0, is skipped), so the chain's memo recomputes it exactly then and not before.
An outcome hands its verdict to the chain (trin_additive_index.hand_verdict) and chains the verdicts of the events
that will leave the window (Health.then), so the chain reads nothing back.

The rule in plain form, compute_reference_health (every record decoded, the window summed, no
index, no hints), is what the optimized form is tested against.

All scores at 0: trin returns no peers; here the pipeline raises NoExecutorsError unless
``fallback_when_all_zero`` asks for the unfiltered list.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import partial
from itertools import accumulate
from typing import ClassVar, NamedTuple

from keepersim.keeper.policies.base import (
    NEVER,
    Health,
    HealthPolicy,
    ParamsView,
    PolicyLog,
    PolicyReader,
    PolicyStore,
    Then,
)
from keepersim.keeper.policies.trin_additive_index import get_indexed_log, hand_verdict
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, TrinAdditiveParams
from keepersim.types.pb.keepersim.v1.health_pb2 import ScoreDelta, TrinScoreRecord


def get_delta(outcome: Outcome, params: TrinAdditiveParams) -> int:
    if outcome is Outcome.SUCCESS:
        return params.success_delta
    if outcome is Outcome.MISS:
        return params.miss_delta
    return params.pushback_delta


class ScoreParams(NamedTuple):
    """The params a score depends on, as plain integers: read from the protobuf message once per
    params object (a message attribute read costs more than the score's arithmetic)."""

    initial: int
    top: int
    window: int
    deltas: dict[Outcome, int]

    @classmethod
    def from_params(cls, params: TrinAdditiveParams) -> ScoreParams:
        deltas = {outcome: get_delta(outcome, params) for outcome in Outcome}
        return cls(params.initial_score, params.max_score, params.window_blocks, deltas)


def is_in_window(event_height: int, height: int, window_blocks: int) -> bool:
    """An event counts at heights event_height .. event_height + window_blocks - 1."""
    return height - window_blocks < event_height <= height


def compute_score_and_next_move(
    deltas: list[int], lo: int, hi: int, total: int, top: int
) -> tuple[int, int]:
    """The clamped score of ``total`` (initial + deltas[lo:hi]) and the index of the first of
    those events whose leaving moves it (hi: none does). Events leave oldest first; once the
    events lo..i have left, total minus their running sum remains."""
    if 0 < total < top:
        # Inside the clamp any move shows: the first event with a nonzero delta.
        while lo < hi and not deltas[lo]:
            lo += 1
        return total, lo
    if total >= top:
        # Held at the top until the remainder drops below it: the first running sum above
        # total - top, found by bisection on the running maximum of the running sums.
        peaks = list(accumulate(accumulate(deltas[lo:hi]), max))
        return top, lo + bisect_right(peaks, total - top)
    # Held at 0 until the remainder rises above it: the first running sum below total.
    peaks = list(accumulate(accumulate(-d for d in deltas[lo:hi]), max))
    return 0, lo + bisect_right(peaks, -total)


def get_score_health(score: int, valid_until: int, then: Then, params: ScoreParams) -> Health:
    """Score 0 keeps the participant out; any other scales its weight by score / initial."""
    # Positional (admitted, factor_num, factor_den, severity, valid_until, state, then).
    if score == 0:
        return Health(False, 1, 1, params.top, valid_until, "zero", then)
    return Health(True, score, params.initial, params.top - score, valid_until, "scored", then)


def compute_reference_health(
    records: list[tuple[int, bytes]], address: str, height: int, params: TrinAdditiveParams
) -> Health:
    """trin's rule read off the log, plainly: the reference the optimized form (the index, the
    hints, the handed-over verdicts) is tested against. Its valid_until and then say nothing."""
    total = params.initial_score
    for record_height, raw in records:
        # The last window_blocks heights, this one included (spelled out, not is_in_window).
        if height - params.window_blocks < record_height <= height:
            total += sum(
                e.delta for e in TrinScoreRecord.FromString(raw).deltas if e.address == address
            )
    score = max(0, min(params.max_score, total))
    if score == 0:
        return Health(False, 1, 1, params.max_score, NEVER, "zero")
    return Health(True, score, params.initial_score, params.max_score - score, NEVER, "scored")


class Events:
    """A participant's (height, delta) pairs: heights ascending, one pair per height.

    Never changed once built (a verdict's ``then`` may still read it): a change makes new lists.
    """

    __slots__ = ("heights", "deltas")

    def __init__(self, heights: list[int], deltas: list[int]) -> None:
        self.heights = heights
        self.deltas = deltas

    def get_window(self, height: int, window_blocks: int) -> tuple[int, int]:
        """Index range [lo, hi) of the events counted at ``height``."""
        heights = self.heights
        lo = bisect_right(heights, height - window_blocks)
        hi = len(heights) if not heights or heights[-1] <= height else bisect_right(heights, height)
        return lo, hi

    def get_counted(self, height: int, window_blocks: int) -> list[tuple[int, int]]:
        """The (height, delta) pairs counted at ``height``, by the definition."""
        return [
            (h, d)
            for h, d in zip(self.heights, self.deltas, strict=True)
            if is_in_window(h, height, window_blocks)
        ]

    def get_score_and_valid_until(self, height: int, params: ScoreParams) -> tuple[int, int]:
        """The clamped score at ``height`` and the last height it holds without a new event."""
        heights, deltas = self.heights, self.deltas
        lo, hi = self.get_window(height, params.window)
        total = params.initial + sum(deltas[lo:hi] if lo or hi < len(deltas) else deltas)
        score, i = compute_score_and_next_move(deltas, lo, hi, total, params.top)
        # A pair from a later height starts counting at its height.
        valid_until = NEVER if hi == len(heights) else heights[hi] - 1
        if i < hi:
            valid_until = min(valid_until, heights[i] + params.window - 1)
        return score, valid_until

    def get_with(self, height: int, delta: int) -> Events:
        """These events with ``delta`` added at ``height`` (merged into that height's pair)."""
        heights, deltas = self.heights[:], self.deltas[:]
        i = bisect_right(heights, height)
        if i and heights[i - 1] == height:
            deltas[i - 1] += delta
        else:
            heights.insert(i, height)
            deltas.insert(i, delta)
        return Events(heights, deltas)

    def get_after(self, height: int) -> Events:
        """These events without those at ``height`` and below."""
        lo = bisect_right(self.heights, height)
        return Events(self.heights[lo:], self.deltas[lo:])


NO_EVENTS = Events([], [])


class ScoreLog(PolicyLog[dict[str, int]]):
    """The score records (height -> address -> merged delta) and each named participant's
    events: exactly the pairs of the records."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[str, Events] = {}

    @classmethod
    def from_records(cls, records: list[tuple[int, bytes]]) -> ScoreLog:
        log = cls()
        pairs: dict[str, tuple[list[int], list[int]]] = {}
        for height, raw in records:  # ascending
            merged: dict[str, int] = {}
            for entry in TrinScoreRecord.FromString(raw).deltas:
                merged[entry.address] = merged.get(entry.address, 0) + entry.delta
            log.add_stored(height, merged)
            for address, delta in merged.items():
                heights, deltas = pairs.setdefault(address, ([], []))
                heights.append(height)
                deltas.append(delta)
        log.events = {a: Events(heights, deltas) for a, (heights, deltas) in pairs.items()}
        return log

    def process_outcome(self, address: str, height: int, delta: int) -> Events:
        """Log ``delta`` at ``height`` (the newest height); return the participant's events."""
        record = self.get_record(height, dict)
        record[address] = record.get(address, 0) + delta
        events = self.events[address] = self.events.get(address, NO_EVENTS).get_with(height, delta)
        return events

    def process_prune(self, ctx: PolicyStore, oldest: int) -> None:
        """Delete the records at ``oldest`` and below; their pairs leave the events."""
        events = self.events
        while (popped := self.pop_oldest(ctx, oldest)) is not None:
            height, record = popped
            for address in record:
                left = events[address].get_after(height)
                if left.heights:
                    events[address] = left
                else:
                    del events[address]


class TrinAdditive(HealthPolicy):
    name: ClassVar[str] = "trin-additive"
    prefix: ClassVar[bytes] = b"\x03"

    def __init__(self) -> None:
        self._score_params = ParamsView(
            lambda params: ScoreParams.from_params(params.health_params.trin_additive)
        )

    def get_score_params(self, params: ExtensionParams) -> ScoreParams:
        return self._score_params.get(params)

    @staticmethod
    def get_score_log(holder: PolicyStore | PolicyReader) -> ScoreLog:
        return get_indexed_log(holder, ScoreLog, ScoreLog.from_records)

    def get_reader_events(self, reader: PolicyReader, address: str) -> Events:
        return self.get_score_log(reader).events.get(address, NO_EVENTS)

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        self.process_score_event(ctx, address, outcome)

    def process_score_event(self, ctx: PolicyStore, address: str, outcome: Outcome) -> None:
        """Log the outcome (the record is written in end block) and hand the verdict over."""
        params = self.get_score_params(ctx.params)
        height = ctx.height
        events = self.get_score_log(ctx).process_outcome(address, height, params.deltas[outcome])
        heights = events.heights
        if heights[-1] == height:  # no pair from a later height (only an import makes one)
            lo = bisect_right(heights, height - params.window)
            total = params.initial + sum(events.deltas[lo:] if lo else events.deltas)
            hand_verdict(ctx, address, self.get_tail_health(events, lo, total, params))
        else:
            hand_verdict(ctx, address, self.compute_health(events, height, params))

    def process_end_block(self, ctx: PolicyStore) -> None:
        """Write this block's record; delete those the window no longer counts."""
        log = self.get_score_log(ctx)
        height = ctx.height
        record = log.records.get(height)
        if record:
            deltas = [ScoreDelta(address=a, delta=d) for a, d in sorted(record.items())]
            log.process_write(ctx, height, TrinScoreRecord(deltas=deltas))
        log.process_prune(ctx, height - self.get_score_params(ctx.params).window)

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        """Asked only when no verdict came with a commit (a new table, a reset): outcomes hand
        theirs over and lapses follow Health.then."""
        events = self.get_reader_events(reader, address)
        return self.compute_health(events, height, self.get_score_params(reader.params))

    def compute_health(self, events: Events, height: int, params: ScoreParams) -> Health:
        """The verdict of ``events`` at ``height``; its ``then`` computes the next one (an event
        leaving the window or a later one starting to count), so the chain follows the score
        without reading the log again."""
        lo, hi = events.get_window(height, params.window)
        if hi == len(events.heights):
            total = params.initial + sum(events.deltas[lo:])
            return self.get_tail_health(events, lo, total, params)
        score, valid_until = events.get_score_and_valid_until(height, params)
        then = partial(self.compute_health, events, valid_until + 1, params)
        return get_score_health(score, valid_until, then, params)

    def get_tail_health(self, events: Events, lo: int, total: int, params: ScoreParams) -> Health:
        """The verdict once the events before ``lo`` have left and every later one counts
        (``total``: initial plus their deltas). Its ``then`` is the next leaving's, from the
        index and total alone: no bisection, no sum over the window."""
        deltas = events.deltas
        n = len(deltas)
        score, i = compute_score_and_next_move(deltas, lo, n, total, params.top)
        if i == n:
            return get_score_health(score, NEVER, None, params)
        valid_until = events.heights[i] + params.window - 1
        rest = total - (deltas[i] if i == lo else sum(deltas[lo : i + 1]))
        then = partial(self.get_tail_health, events, i + 1, rest, params)
        return get_score_health(score, valid_until, then, params)

    def is_fallback_allowed(self, params: ExtensionParams) -> bool:
        return params.health_params.trin_additive.fallback_when_all_zero

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        params = self.get_score_params(reader.params)
        events = self.get_reader_events(reader, address)
        health = self.compute_health(events, height, params)
        counted = events.get_counted(height, params.window)
        score, _ = events.get_score_and_valid_until(height, params)
        return {
            "state": health.state,
            "admitted": health.admitted,
            "score": score,
            "events_in_window": len(counted),
            "window_delta": sum(d for _, d in counted),
            "valid_until": health.valid_until,
        }
