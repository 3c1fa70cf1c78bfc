"""trin's census peer scoring as shipped (portal-bridge), with heights for time.

score = clamp(initial_score + sum of the deltas of the outcomes of the last window_blocks blocks,
0, max_score): +success_delta for a finished inference, +miss_delta for an expired one,
+pushback_delta for a decline (trin's "rate limited" / "transfer in progress": pushback costs a
little weight, never the gate). Score 0 keeps the participant out; otherwise its selection weight
is multiplied by score / initial_score, so a healthy record can double a participant's share.

Ageing needs no end-block work: an event stops counting at ``height + window_blocks``, and the
verdict's ``valid_until`` is the last height before the first ageing-out that moves the clamped
score (usually the oldest counted event's; an event whose leaving the clamp absorbs, or whose
merged delta is 0, is skipped), so the chain's memo recomputes it exactly then and not before.
Storage is bounded: events of one height are merged into one (height, delta) pair and events
outside the window are pruned on every write, so an entry holds at most ``window_blocks`` pairs,
whatever the traffic.

Cost: events are kept in height order, so the window is two bisections and its sum one C-level
sum over a few pairs. The events of an entry are memoized per address with the block cache's message
they were taken from (the carried entry of the last block, PolicyContext): a memo of another
message is simply rebuilt. A write edits the cached message in place (prune a prefix, merge or
add the newest pair), hands its verdict to the chain (set_verdict) and chains the verdicts of
the events that will leave the window (Health.then), so the chain reads nothing back.

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
    PolicyContext,
    PolicyReader,
    Then,
)
from keepersim.types.events import Outcome
from keepersim.types.pb.health_pb2 import ScoreEvent, TrinAdditiveEntry
from keepersim.types.pb.params_pb2 import Params, TrinAdditiveParams
from keepersim.types.pb.types_pb2 import Inference


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


class Events:
    """An entry's (height, delta) pairs, decoded once: heights ascending, one pair per height.

    Never changed once built (a verdict's ``then`` may still read it): a write makes new lists.
    Stored state written by this module is always in this form; anything else (an imported
    entry out of order or with repeated heights) is marked ``ordered = False`` and handled by
    the plain, per-event reference path.
    """

    __slots__ = ("heights", "deltas", "ordered", "entry")

    def __init__(
        self,
        heights: list[int],
        deltas: list[int],
        ordered: bool | None = None,
        entry: TrinAdditiveEntry | None = None,
    ) -> None:
        # The block cache's message the pairs were taken from, if any: a write reuses them
        # only while that message is the participant's cached entry.
        self.entry = entry
        self.heights = heights
        self.deltas = deltas
        if ordered is None:
            ordered = all(a < b for a, b in zip(heights, heights[1:], strict=False))
        self.ordered = ordered

    @classmethod
    def decode(cls, raw: bytes | None) -> Events:
        if raw is None:
            return cls([], [], True)
        events = TrinAdditiveEntry.FromString(raw).events
        return cls([e.height for e in events], [e.delta for e in events])

    @classmethod
    def from_entry(cls, entry: TrinAdditiveEntry) -> Events:
        events = entry.events
        return cls([e.height for e in events], [e.delta for e in events], entry=entry)

    def get_window(self, height: int, window_blocks: int) -> tuple[int, int]:
        """Index range [lo, hi) of the events counted at ``height`` (ordered events only)."""
        heights = self.heights
        lo = bisect_right(heights, height - window_blocks)
        hi = len(heights) if not heights or heights[-1] <= height else bisect_right(heights, height)
        return lo, hi

    def get_counted(self, height: int, window_blocks: int) -> list[tuple[int, int]]:
        """The (height, delta) pairs counted at ``height``, in stored order."""
        return [
            (h, d)
            for h, d in zip(self.heights, self.deltas, strict=True)
            if is_in_window(h, height, window_blocks)
        ]

    def get_score_and_valid_until(self, height: int, params: ScoreParams) -> tuple[int, int]:
        """The clamped score at ``height`` and the last height it holds without a new write."""
        initial, top, window = params.initial, params.top, params.window
        if not self.ordered:
            counted = self.get_counted(height, window)
            total = initial + sum(d for _, d in counted)
            score = max(0, min(top, total))
            # Reference rule: the oldest counted event's last counted height.
            valid_until = min(h for h, _ in counted) + window - 1 if counted else NEVER
            later = [h for h in self.heights if h > height]
            if later:  # a pair from a later height starts counting at its height
                valid_until = min(valid_until, min(later) - 1)
            return score, valid_until
        heights, deltas = self.heights, self.deltas
        lo, hi = self.get_window(height, window)
        total = initial + sum(deltas[lo:hi] if lo or hi < len(deltas) else deltas)
        score, i = compute_score_and_next_move(deltas, lo, hi, total, top)
        # A pair from a later height starts counting at its height.
        valid_until = NEVER if hi == len(heights) else heights[hi] - 1
        if i < hi:
            valid_until = min(valid_until, heights[i] + window - 1)
        return score, valid_until


class TrinAdditive(HealthPolicy):
    name: ClassVar[str] = "trin-additive"
    prefix: ClassVar[bytes] = b"\x03"

    def __init__(self) -> None:
        # address -> the events of its cached entry as the last write left them.
        self._decoded: dict[str, Events] = {}
        self._score_params: tuple[Params, ScoreParams] | None = None

    def get_score_params(self, params: Params) -> ScoreParams:
        """The score params of ``params`` (read once per params object: the chain replaces its
        params on a change, never edits them)."""
        memo = self._score_params
        if memo is None or memo[0] is not params:
            score_params = ScoreParams.from_params(params.health_params.trin_additive)
            memo = self._score_params = (params, score_params)
        return memo[1]

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> TrinAdditiveEntry:
        if raw is None:
            return TrinAdditiveEntry(address=address)
        return TrinAdditiveEntry.FromString(raw)

    def process_outcome(
        self, ctx: PolicyContext, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        ctx.defer(self.process_score_event, ctx, address, outcome)  # nothing reads it sooner

    def process_score_event(self, ctx: PolicyContext, address: str, outcome: Outcome) -> None:
        params = self.get_score_params(ctx.params)
        height = ctx.height
        delta = params.deltas[outcome]
        entry = ctx.get_cached(address, self.get_entry)
        events = self._decoded.get(address)
        if events is None or events.entry is not entry:
            events = Events.from_entry(entry)
        if events.ordered:
            # Keep the counted pairs (a contiguous run), then merge into or add the newest one.
            lo, hi = events.get_window(height, params.window)
            stored = entry.events
            if hi < len(stored):
                del stored[hi:]
            if lo:
                del stored[:lo]
            heights = events.heights[lo:hi]
            deltas = events.deltas[lo:hi]
            if heights and heights[-1] == height:
                deltas[-1] += delta
                stored[-1].delta = deltas[-1]
            else:
                heights.append(height)
                deltas.append(delta)
                stored.add(height=height, delta=delta)
            ctx.mark_dirty(address)
            events = self._decoded[address] = Events(heights, deltas, True, entry)
            # Every pair is counted now and none is to come: the verdict is a tail's.
            total = params.initial + sum(deltas)
            ctx.set_verdict(address, self.get_tail_health(events, 0, total, params))
            return
        kept = events.get_counted(height, params.window)
        if kept and kept[-1][0] == height:
            kept[-1] = (height, kept[-1][1] + delta)
        else:
            kept.append((height, delta))
        del entry.events[:]
        entry.events.extend(ScoreEvent(height=h, delta=d) for h, d in kept)
        ctx.mark_dirty(address)
        self._decoded.pop(address, None)
        ctx.drop_verdict(address)

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        """Asked only when no verdict came with a commit (a new table, a reset): writes hand
        theirs over and lapses follow Health.then."""
        events = Events.decode(reader.get_raw(address))
        return self.compute_health(events, height, self.get_score_params(reader.params))

    def compute_health(self, events: Events, height: int, params: ScoreParams) -> Health:
        """The verdict of ``events`` at ``height``; its ``then`` computes the next one (an event
        leaving the window or a later one starting to count), so the chain follows the score
        without reading the entry again."""
        if events.ordered:
            lo, hi = events.get_window(height, params.window)
            if hi == len(events.heights):
                total = params.initial + sum(events.deltas[lo:])
                return self.get_tail_health(events, lo, total, params)
        score, valid_until = events.get_score_and_valid_until(height, params)
        then = None
        if valid_until < NEVER:
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

    def is_fallback_allowed(self, params: Params) -> bool:
        return params.health_params.trin_additive.fallback_when_all_zero

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        params = self.get_score_params(reader.params)
        events = Events.decode(reader.get_raw(address))
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
