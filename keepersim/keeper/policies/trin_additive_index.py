"""trin-additive's speed-ups beside its rules (trin_additive.py), each with its plain form,
proven equal by tests/policies/test_acceleration.py and test_trin.py (the memo forgotten,
compute_reference_health):

* the log's index (ScoreLog: each participant's (height, delta) pairs, ``Events``) is kept in
  memory between blocks and rebuilt from the records after a restart (plain form: rebuilt every
  block); a reader builds it once for a whole table;
* a score's ``valid_until`` and what follows it (compute_score_and_next_move: the first event
  whose leaving the window moves the clamped score), so the chain's memo follows the score
  without reading the log again;
* each outcome's verdict is handed to the chain, so its table need not ask.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING, TypeVar

# The module, not its names: the policies package imports this while the acceleration layer
# may still be importing the policies' base.
from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import NEVER, Health, PolicyLog, PolicyReader, PolicyStore
from keepersim.types.pb.keepersim.v1.health_pb2 import TrinScoreRecord

if TYPE_CHECKING:
    from keepersim.keeper.policies.trin_additive import ScoreParams

LogT = TypeVar("LogT")


def get_indexed_log(
    holder: PolicyStore | PolicyReader,
    kind: type[LogT],
    build: Callable[[list[tuple[int, bytes]]], LogT],
) -> LogT:
    """The score log's index, from the memo or built from the records."""
    return acceleration.get_log_index(holder, "scores", kind, build)


def hand_verdict(ctx: PolicyStore, address: str, health: Health) -> None:
    """The verdict get_health will give at this height, handed to the chain."""
    acceleration.hand_verdict(ctx, address, health)


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
        # (imported here: the rule file imports this index)
        from keepersim.keeper.policies.trin_additive import is_in_window

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
