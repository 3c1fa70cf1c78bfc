"""trin's census peer scoring as shipped (portal-bridge), with heights for time.

score = clamp(initial_score + sum of the deltas of the outcomes of the last window_blocks blocks,
0, max_score): +success_delta for a finished inference, +miss_delta for an expired one,
+pushback_delta for a decline (trin's "rate limited" / "transfer in progress": pushback costs a
little weight, never the gate). Score 0 keeps the participant out; otherwise its selection weight
is multiplied by score / initial_score, so a healthy record can double a participant's share.

State: a log, one record per height with outcomes (TrinScoreRecord: each participant's outcomes
of that height merged into one delta), kept while the window counts it and deleted after. No
per-participant entry is written: a block writes one record and deletes one, whatever its
traffic. The log's index, each participant's (height, delta) pairs (``Events``, ``ScoreLog``),
lives in trin_additive_index.py with the policy's other speed-ups, each beside its plain form.

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
from typing import ClassVar, NamedTuple

from keepersim.keeper.policies.base import (
    NEVER,
    Health,
    HealthPolicy,
    ParamsView,
    PolicyReader,
    PolicyStore,
    Then,
)
from keepersim.keeper.policies.trin_additive_index import (
    NO_EVENTS,
    Events,
    ScoreLog,
    compute_score_and_next_move,
    get_indexed_log,
    hand_verdict,
)
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
