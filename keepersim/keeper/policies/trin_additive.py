"""trin's census peer scoring as shipped (portal-bridge), with heights for time.

score = clamp(initial_score + sum of the deltas of the outcomes of the last window_blocks blocks,
0, max_score): +success_delta for a finished inference, +miss_delta for an expired one,
+pushback_delta for a decline (trin's "rate limited" / "transfer in progress": pushback costs a
little weight, never the gate). Score 0 keeps the participant out; otherwise its selection weight
is multiplied by score / initial_score, so a healthy record can double a participant's share.

Ageing needs no end-block work: an event stops counting at ``height + window_blocks`` and the
verdict's ``valid_until`` is the last height before the oldest counted event ages out, so the
chain's memo recomputes it exactly then. Storage is bounded: events of one height are merged into
one (height, delta) pair and events outside the window are pruned on every write, so an entry holds
at most ``window_blocks`` pairs, whatever the traffic.

All scores at 0: trin returns no peers; here the pipeline raises NoExecutorsError unless
``fallback_when_all_zero`` asks for the unfiltered list.
"""

from __future__ import annotations

from typing import ClassVar

from keepersim.keeper.policies.base import (
    NEVER,
    Health,
    HealthPolicy,
    PolicyContext,
    PolicyReader,
)
from keepersim.types.events import Outcome
from keepersim.types.pb.health_pb2 import ScoreEvent, TrinAdditiveEntry
from keepersim.types.pb.params_pb2 import Params, TrinAdditiveParams


def get_delta(outcome: Outcome, params: TrinAdditiveParams) -> int:
    if outcome is Outcome.SUCCESS:
        return params.success_delta
    if outcome is Outcome.MISS:
        return params.miss_delta
    return params.pushback_delta


def is_in_window(event_height: int, height: int, window_blocks: int) -> bool:
    """An event counts at heights event_height .. event_height + window_blocks - 1."""
    return height - window_blocks < event_height <= height


def compute_score(entry: TrinAdditiveEntry, height: int, params: TrinAdditiveParams) -> int:
    total = params.initial_score + sum(
        e.delta for e in entry.events if is_in_window(e.height, height, params.window_blocks)
    )
    return max(0, min(params.max_score, total))


def get_valid_until(entry: TrinAdditiveEntry, height: int, window_blocks: int) -> int:
    """Last height before the oldest counted event ages out (NEVER when none counts)."""
    counted = [e.height for e in entry.events if is_in_window(e.height, height, window_blocks)]
    return min(counted) + window_blocks - 1 if counted else NEVER


class TrinAdditive(HealthPolicy):
    name: ClassVar[str] = "trin-additive"
    prefix: ClassVar[bytes] = b"\x03"

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> TrinAdditiveEntry:
        if raw is None:
            return TrinAdditiveEntry(address=address)
        return TrinAdditiveEntry.FromString(raw)

    def process_outcome(
        self, ctx: PolicyContext, address: str, outcome: Outcome, start_height: int
    ) -> None:
        params = ctx.params.health_params.trin_additive
        entry = self.get_entry(ctx.get_raw(address), address)
        kept = [
            (e.height, e.delta)
            for e in entry.events
            if is_in_window(e.height, ctx.height, params.window_blocks)
        ]
        delta = get_delta(outcome, params)
        if kept and kept[-1][0] == ctx.height:
            kept[-1] = (ctx.height, kept[-1][1] + delta)
        else:
            kept.append((ctx.height, delta))
        del entry.events[:]
        entry.events.extend(ScoreEvent(height=h, delta=d) for h, d in kept)
        ctx.set_message(address, entry)

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        params = reader.params.health_params.trin_additive
        entry = self.get_entry(reader.get_raw(address), address)
        score = compute_score(entry, height, params)
        valid_until = get_valid_until(entry, height, params.window_blocks)
        if score == 0:
            return Health(
                False,
                severity=params.max_score,
                valid_until=valid_until,
                state="zero",
            )
        return Health(
            True,
            factor_num=score,
            factor_den=params.initial_score,
            severity=params.max_score - score,
            valid_until=valid_until,
            state="scored",
        )

    def is_fallback_allowed(self, params: Params) -> bool:
        return params.health_params.trin_additive.fallback_when_all_zero

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        params = reader.params.health_params.trin_additive
        entry = self.get_entry(reader.get_raw(address), address)
        health = self.get_health(reader, address, height)
        counted = [e for e in entry.events if is_in_window(e.height, height, params.window_blocks)]
        return {
            "state": health.state,
            "admitted": health.admitted,
            "score": compute_score(entry, height, params),
            "events_in_window": len(counted),
            "window_delta": sum(e.delta for e in counted),
            "valid_until": health.valid_until,
        }
