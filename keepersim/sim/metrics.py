"""Run metrics: what one simulation run did, measured per block from the chain itself.

The run loop (:mod:`keepersim.sim.run_loop`) feeds a :class:`MetricsCollector`:

* once per block ``h``, *before* the block's requests are assigned, the set of participants the
  health machinery keeps out of the selection the requests of block ``h`` are drawn from (the
  selection table of the state committed at ``h - 1``: ``table.excluded``, or
  ``table.shadow_excluded`` in shadow mode, plus participants the SPRT made INACTIVE), and the
  admitted participants that table draws at less than their candidate weight, with the fraction
  it gives each (a weight factor below 1: trin's halving, windowed's ramp);
* every selection (its fallback / panic flags) and every assignment;
* every resolved inference (finished, expired = a miss, declined = capacity pushback), with its
  start height, as the chain's events report them.

Every key of :meth:`MetricsCollector.compute` (units, and how ``compare`` aggregates it) is
defined in docs/metrics.md, the one place for them. Two rules worth knowing here: ``inferences``
counts assignments that resolved within the run as finished or expired (declines and the
``in_flight_at_end`` are apart: ``selections = inferences + declines + in_flight_at_end``), and a
timeline bucket's ``miss_rate`` counts only starts up to ``blocks - expiration_blocks`` (later
ones cannot show a miss yet; their buckets are ``partial``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from keepersim.sim.oracle import HEALTHY_MISS_THRESHOLD, is_truly_healthy
from keepersim.sim.scenario import ParticipantSpec, Scenario

__all__ = [
    "DEFAULT_BUCKET_BLOCKS",
    "DegradedPeriod",
    "MetricsCollector",
    "compute_degraded_periods",
    "summarize_delays",
]

DEFAULT_BUCKET_BLOCKS = 100

_NO_FACTORS: Mapping[str, float] = {}

FINISHED = "finished"
EXPIRED = "expired"
DECLINED = "declined"


@dataclass(frozen=True, slots=True)
class DegradedPeriod:
    """Heights ``[start, end)`` during which the participant's true ``p > 0.05``.

    ``end`` is ``blocks + 1`` when the period lasts to the end of the run (``ends_in_run`` False).
    """

    address: str
    start: int
    end: int
    ends_in_run: bool


def compute_degraded_periods(spec: ParticipantSpec, blocks: int) -> list[DegradedPeriod]:
    """The participant's degraded periods within heights ``1..blocks`` (adjacent degraded
    segments of the miss schedule are merged)."""
    out: list[DegradedPeriod] = []
    bounds = [b for b, _ in spec.miss[1:]] + [math.inf]
    start: int | None = None
    for (from_block, p), next_from in zip(spec.miss, bounds, strict=True):
        seg_start = max(1, from_block)
        seg_end = min(blocks + 1, next_from)
        if seg_start >= seg_end:
            continue
        degraded = p > HEALTHY_MISS_THRESHOLD
        if degraded and start is None:
            start = seg_start
        elif not degraded and start is not None:
            out.append(DegradedPeriod(spec.address, start, seg_start, True))
            start = None
    if start is not None:
        out.append(DegradedPeriod(spec.address, start, blocks + 1, False))
    return out


def summarize_delays(delays: Iterable[int]) -> dict[str, float | int | None]:
    """``count``, ``median``, ``mean``, ``max`` of a list of delays (None when empty)."""
    values = list(delays)
    if not values:
        return {"count": 0, "median": None, "mean": None, "max": None}
    return {
        "count": len(values),
        "median": float(statistics.median(values)),
        "mean": float(statistics.fmean(values)),
        "max": max(values),
    }


class _Bucket:
    __slots__ = (
        "blocks",
        "excluded",
        "false_excluded",
        "withheld",
        "started",
        "misses",
        "declines",
        "rate_started",
        "rate_misses",
        "pending",
    )

    def __init__(self) -> None:
        self.blocks = 0
        self.excluded = 0.0
        self.false_excluded = 0.0
        self.withheld = 0.0
        self.started = 0  # inferences started in the bucket that finished or expired
        self.misses = 0
        self.declines = 0
        self.rate_started = 0  # of ``started``: those at heights up to the observable cut-off
        self.rate_misses = 0
        self.pending = 0  # started in the bucket, still in flight after the last block


class MetricsCollector:
    """Accumulates one run's metrics; see the module docstring for the definitions."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        bucket_blocks: int = DEFAULT_BUCKET_BLOCKS,
        expiration_blocks: int | None = None,
    ) -> None:
        """``expiration_blocks``: the largest in force during the run (default the scenario's);
        it sets the last start height whose outcome the run is sure to see."""
        if bucket_blocks <= 0:
            raise ValueError(f"bucket_blocks must be > 0, got {bucket_blocks}")
        self.scenario = scenario
        self.bucket_blocks = bucket_blocks
        expiry = scenario.expiration_blocks if expiration_blocks is None else expiration_blocks
        #: Starts at heights up to this one have resolved by the end of the run.
        self.observable_until = scenario.blocks - expiry
        self._specs = {p.address: p for p in scenario.participants}
        self._weights = {p.address: p.weight for p in scenario.participants}
        self._total_weight = scenario.get_total_weight()
        n_buckets = (scenario.blocks + bucket_blocks - 1) // bucket_blocks
        self._buckets = [_Bucket() for _ in range(n_buckets)]
        # Per block
        self._blocks_recorded = 0
        self._excluded_sum = 0.0
        self._false_sum = 0.0
        self._withheld_sum = 0.0
        self._kept: frozenset[str] = frozenset()
        self._kept_weight = 0
        self._open: dict[str, int] = {}  # address -> first height of its current kept-out run
        self._intervals: dict[str, list[tuple[int, int]]] = {}
        # Selections and outcomes
        self.requests = 0
        self.selections = 0
        self.degraded_selections = 0
        self.fallback_selections = 0
        self.panic_selections = 0
        self.unassigned_requests = 0
        self.unserved_requests = 0
        self.transitions = 0
        self.planned_misses = 0
        self.assigned: dict[str, int] = dict.fromkeys(self._weights, 0)
        self.resolved: dict[str, int] = dict.fromkeys(self._weights, 0)
        self.missed: dict[str, int] = dict.fromkeys(self._weights, 0)
        self.declined: dict[str, int] = dict.fromkeys(self._weights, 0)
        self.finished = 0
        self.misses = 0
        self.declines = 0
        self.in_flight_at_end = 0
        # Gas (the SDK's KV schedule over the module's store accesses: docs/metrics.md, "Gas")
        self.gas_total = 0
        self.gas_by_step: dict[str, int] = {}

    # feeding -----------------------------------------------------------------------------

    def record_block(
        self,
        height: int,
        kept_out: frozenset[str],
        factors: Mapping[str, float] = _NO_FACTORS,
    ) -> None:
        """What the selection the requests of ``height`` are drawn from gives: ``kept_out``, the
        participants kept out of it; ``factors``, the admitted participants it draws at less
        than their candidate weight, each with the fraction it gives (in (0, 1); everyone else
        admitted gets 1)."""
        if kept_out != self._kept:
            for address in self._kept - kept_out:
                start = self._open.pop(address)
                self._intervals.setdefault(address, []).append((start, height))
            for address in kept_out - self._kept:
                self._open[address] = height
            self._kept = kept_out
            self._kept_weight = sum(self._weights.get(a, 0) for a in kept_out)
        specs = self._specs
        false_weight = 0
        for address in kept_out:
            spec = specs.get(address)
            if spec is not None and is_truly_healthy(spec, height):
                false_weight += spec.weight
        reduced_weight = 0.0  # healthy weight admitted but drawn below its candidate weight
        for address, f in factors.items():
            spec = specs.get(address)
            if spec is not None and address not in kept_out and is_truly_healthy(spec, height):
                reduced_weight += spec.weight * (1.0 - f)
        excluded = self._kept_weight / self._total_weight
        false = false_weight / self._total_weight
        withheld = (false_weight + reduced_weight) / self._total_weight
        self._blocks_recorded += 1
        self._excluded_sum += excluded
        self._false_sum += false
        self._withheld_sum += withheld
        bucket = self._bucket(height)
        bucket.blocks += 1
        bucket.excluded += excluded
        bucket.false_excluded += false
        bucket.withheld += withheld

    def record_gas(self, gas_by_step: Mapping[str, int]) -> None:
        """A committed block's gas, by begin block, message kind and end-block step."""
        mine = self.gas_by_step
        for name, gas in gas_by_step.items():
            mine[name] = mine.get(name, 0) + gas
            self.gas_total += gas

    def record_request(self) -> None:
        self.requests += 1

    def record_selection(
        self, address: str, *, fallback: bool, panic: bool, degraded: bool = False
    ) -> None:
        """One assignment; ``degraded``: the executor's true p > 0.05 at that height."""
        self.selections += 1
        self.degraded_selections += degraded
        self.fallback_selections += fallback
        self.panic_selections += panic
        self.assigned[address] = self.assigned.get(address, 0) + 1

    def record_outcome(self, address: str, start_height: int, kind: str) -> None:
        """A resolved inference: ``kind`` is ``finished``, ``expired`` or ``declined``."""
        bucket = self._bucket(start_height)
        self.resolved[address] = self.resolved.get(address, 0) + 1
        if kind == FINISHED:
            self.finished += 1
            bucket.started += 1
            bucket.rate_started += start_height <= self.observable_until
        elif kind == EXPIRED:
            self.misses += 1
            bucket.started += 1
            bucket.misses += 1
            if start_height <= self.observable_until:
                bucket.rate_started += 1
                bucket.rate_misses += 1
            self.missed[address] = self.missed.get(address, 0) + 1
        elif kind == DECLINED:
            self.declines += 1
            bucket.declines += 1
            self.declined[address] = self.declined.get(address, 0) + 1
        else:
            raise ValueError(f"unknown outcome kind {kind!r}")

    def record_pending(self, start_heights: Iterable[int]) -> None:
        """The start heights of the inferences still in flight after the last block."""
        n = 0
        for height in start_heights:
            self._bucket(height).pending += 1
            n += 1
        self.in_flight_at_end = n

    def _bucket(self, height: int) -> _Bucket:
        i = min(max(height - 1, 0) // self.bucket_blocks, len(self._buckets) - 1)
        return self._buckets[i]

    # results -----------------------------------------------------------------------------

    def get_intervals(self, last_height: int) -> dict[str, list[tuple[int, int]]]:
        """Kept-out intervals ``[first, end)`` per address, open ones closed at ``last_height + 1``."""
        out = {a: list(v) for a, v in self._intervals.items()}
        for address, start in self._open.items():
            out.setdefault(address, []).append((start, last_height + 1))
        for v in out.values():
            v.sort()
        return out

    def compute(self) -> dict[str, Any]:
        """Every metric as a JSON-able dict (see the module docstring)."""
        s = self.scenario
        last = s.blocks
        intervals = self.get_intervals(last)
        detection: list[int] = []
        recovery: list[int] = []
        periods = 0
        undetected = 0
        never_readmitted = 0
        per_participant_delays: dict[str, dict[str, list[int]]] = {}
        for spec in s.participants:
            kept = intervals.get(spec.address, [])
            for period in compute_degraded_periods(spec, last):
                periods += 1
                first = _first_kept_in(kept, period.start, period.end)
                mine = per_participant_delays.setdefault(
                    spec.address, {"detection": [], "recovery": []}
                )
                if first is None:
                    undetected += 1
                    continue
                detection.append(first - period.start)
                mine["detection"].append(first - period.start)
                if not period.ends_in_run:
                    continue
                readmitted = _first_admitted_from(kept, period.end, last)
                if readmitted is None:
                    never_readmitted += 1
                else:
                    recovery.append(readmitted - period.end)
                    mine["recovery"].append(readmitted - period.end)
        inferences = self.finished + self.misses
        total_assigned = sum(self.assigned.values())
        participants = []
        for spec in s.participants:
            a = spec.address
            delays = per_participant_delays.get(a, {"detection": [], "recovery": []})
            participants.append(
                {
                    "address": a,
                    "weight": spec.weight,
                    "weight_share": spec.weight / self._total_weight,
                    "traffic_share": (self.assigned.get(a, 0) / total_assigned)
                    if total_assigned
                    else 0.0,
                    "assigned": self.assigned.get(a, 0),
                    "resolved": self.resolved.get(a, 0),
                    "misses": self.missed.get(a, 0),
                    "declines": self.declined.get(a, 0),
                    "kept_out_blocks": sum(e - b for b, e in intervals.get(a, [])),
                    "detection_delays": delays["detection"],
                    "recovery_delays": delays["recovery"],
                }
            )
        traffic_tv = 0.5 * sum(
            abs(
                (self.assigned.get(p.address, 0) / total_assigned if total_assigned else 0.0)
                - p.weight / self._total_weight
            )
            for p in s.participants
        )
        timeline = []
        for i, b in enumerate(self._buckets):
            start = i * self.bucket_blocks + 1
            end = min((i + 1) * self.bucket_blocks, last)
            rate_end = min(end, self.observable_until)
            timeline.append(
                {
                    "start": start,
                    "end": end,
                    "partial": end - start + 1 < self.bucket_blocks or rate_end < end,
                    "excluded_weight_share": b.excluded / b.blocks if b.blocks else 0.0,
                    "false_exclusion_weight_share": b.false_excluded / b.blocks
                    if b.blocks
                    else 0.0,
                    "withheld_weight_share": b.withheld / b.blocks if b.blocks else 0.0,
                    "inferences": b.started,
                    "misses": b.misses,
                    "declines": b.declines,
                    "pending": b.pending,
                    "rate_end": rate_end if rate_end >= start else None,
                    "rate_inferences": b.rate_started,
                    "rate_misses": b.rate_misses,
                    "miss_rate": b.rate_misses / b.rate_started if b.rate_started else None,
                }
            )
        n = self._blocks_recorded
        return {
            "requests": self.requests,
            "selections": self.selections,
            "degraded_traffic_share": self.degraded_selections / self.selections
            if self.selections
            else 0.0,
            "inferences": inferences,
            "finished": self.finished,
            "misses": self.misses,
            "declines": self.declines,
            "miss_rate": self.misses / inferences if inferences else 0.0,
            "in_flight_at_end": self.in_flight_at_end,
            "unassigned_requests": self.unassigned_requests,
            "unserved_requests": self.unserved_requests,
            "fallback_selections": self.fallback_selections,
            "panic_selections": self.panic_selections,
            "false_exclusion_weight_share": self._false_sum / n if n else 0.0,
            "withheld_weight_share": self._withheld_sum / n if n else 0.0,
            "excluded_weight_share": self._excluded_sum / n if n else 0.0,
            "transitions": self.transitions,
            "degraded_periods": periods,
            "detection_delay": summarize_delays(detection),
            "undetected_periods": undetected,
            "undetected_share": undetected / periods if periods else None,
            "recovery_delay": summarize_delays(recovery),
            "never_readmitted": never_readmitted,
            "traffic_weight_distance": traffic_tv,
            "gas_total": self.gas_total,
            "gas_per_inference": self.gas_total / inferences if inferences else None,
            "gas_by_step": dict(sorted(self.gas_by_step.items())),
            "bucket_blocks": self.bucket_blocks,
            "timeline": timeline,
            "participants": participants,
        }


def _first_kept_in(intervals: list[tuple[int, int]], start: int, end: int) -> int | None:
    """First height in ``[start, end)`` covered by a kept-out interval."""
    for a, b in intervals:
        if b > start and a < end:
            return max(a, start)
        if a >= end:
            break
    return None


def _first_admitted_from(intervals: list[tuple[int, int]], height: int, last: int) -> int | None:
    """First height >= ``height`` not covered by a kept-out interval (None: kept out to the end)."""
    h = height
    for a, b in intervals:
        if b <= h:
            continue
        if a > h:
            break
        h = b
    return h if h <= last else None
