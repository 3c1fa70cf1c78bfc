"""Gonka's fast circuit breaker (issue #942, MinglesAI/gonka keeper/circuit_breaker.go).

HEALTHY -(epoch miss rate > pct over >= min samples)-> EXCLUDED -(cooldown over)-> PROBE;
PROBE -(success)-> HEALTHY; PROBE -(miss)-> EXCLUDED with the cooldown doubled (capped).
Cooldown expiries sit in a height-keyed queue, so a quiet block costs nothing per participant.
"""

from __future__ import annotations

from typing import ClassVar

from keepersim.keeper.policies.base import (
    Health,
    HealthPolicy,
    PolicyContext,
    PolicyReader,
)
from keepersim.types.events import Outcome
from keepersim.types.pb.health_pb2 import (
    EXCLUDED,
    HEALTHY,
    PROBE,
    CircuitBreakerEntry,
)
from keepersim.types.pb.params_pb2 import CircuitBreakerParams
from keepersim.types.pb.types_pb2 import CurrentEpochStats, Inference

STATE_NAMES = {HEALTHY: "healthy", EXCLUDED: "excluded", PROBE: "probe"}


def is_miss_rate_exceeded(stats: CurrentEpochStats, params: CircuitBreakerParams) -> bool:
    """The exclusion rule: total >= min_samples and missed * 100 > pct * total (epoch counts)."""
    total = stats.inference_count + stats.missed_requests
    return (
        total >= params.min_samples
        and stats.missed_requests * 100 > params.miss_threshold_pct * total
    )


def compute_miss_rate_ppm(stats: CurrentEpochStats) -> int:
    total = stats.inference_count + stats.missed_requests
    return 0 if total == 0 else stats.missed_requests * 1_000_000 // total


def get_cooldown_end(entry: CircuitBreakerEntry) -> int:
    return entry.excluded_at_block + entry.cooldown_blocks


class GonkaBreaker(HealthPolicy):
    name: ClassVar[str] = "gonka"
    prefix: ClassVar[bytes] = b"\x01"
    verdict_reads_participants: ClassVar[bool] = True  # the epoch miss rate

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> CircuitBreakerEntry:
        if raw is None:
            return CircuitBreakerEntry(address=address, state=HEALTHY)
        return CircuitBreakerEntry.FromString(raw)

    def process_outcome(
        self, ctx: PolicyContext, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        """RecordCBResult: acts only in PROBE."""
        raw = ctx.get_raw(address)
        if raw is None or outcome is Outcome.NEUTRAL:
            return
        entry = CircuitBreakerEntry.FromString(raw)
        if entry.state != PROBE:
            return
        if outcome is Outcome.SUCCESS:
            self.process_restore(ctx, entry)
        else:
            self.process_failed_probe(ctx, entry)

    def process_restore(self, ctx: PolicyContext, entry: CircuitBreakerEntry) -> None:
        entry.state = HEALTHY
        entry.last_restored_block = ctx.height
        entry.probe_restored = True
        ctx.set_message(entry.address, entry)
        # The miss-rate rule may exclude it again from the next block on (no grace after that).
        ctx.schedule(ctx.height + 1, entry.address)
        ctx.emit_transition(entry.address, "probe", "healthy", "probe succeeded")

    def process_failed_probe(self, ctx: PolicyContext, entry: CircuitBreakerEntry) -> None:
        cb = ctx.params.circuit_breaker_params
        entry.state = EXCLUDED
        entry.excluded_at_block = ctx.height
        entry.cooldown_blocks = min(2 * entry.cooldown_blocks, cb.max_cooldown_blocks)
        ctx.set_message(entry.address, entry)
        ctx.schedule(get_cooldown_end(entry), entry.address)
        ctx.emit_transition(
            entry.address, "probe", "excluded", f"probe missed; cooldown {entry.cooldown_blocks}"
        )

    def process_end_block(self, ctx: PolicyContext, touched: list[str]) -> None:
        cb = ctx.params.circuit_breaker_params
        due = ctx.pop_due()
        for address in due:
            entry = self.get_entry(ctx.get_raw(address), address)
            if entry.state == EXCLUDED and ctx.height >= get_cooldown_end(entry):
                self.process_promote(ctx, entry)
        for address in sorted(set(touched).union(due)):
            entry = self.get_entry(ctx.get_raw(address), address)
            if entry.state != HEALTHY:
                continue
            if entry.probe_restored and entry.last_restored_block == ctx.height:
                continue  # one-block grace after a successful probe
            participant = ctx.keeper.get_participant(address)
            if participant is None or not is_miss_rate_exceeded(
                participant.current_epoch_stats, cb
            ):
                continue
            self.process_exclude(ctx, entry, participant.current_epoch_stats)

    def process_promote(self, ctx: PolicyContext, entry: CircuitBreakerEntry) -> None:
        entry.state = PROBE
        entry.probe_attempts += 1
        ctx.set_message(entry.address, entry)
        ctx.emit_transition(entry.address, "excluded", "probe", "cooldown expired")

    def process_exclude(
        self, ctx: PolicyContext, entry: CircuitBreakerEntry, stats: CurrentEpochStats
    ) -> None:
        cb = ctx.params.circuit_breaker_params
        entry.state = EXCLUDED
        entry.excluded_at_block = ctx.height
        if entry.cooldown_blocks == 0:
            entry.cooldown_blocks = cb.initial_cooldown_blocks
        ctx.set_message(entry.address, entry)
        ctx.schedule(get_cooldown_end(entry), entry.address)
        ctx.emit_transition(
            entry.address,
            "healthy",
            "excluded",
            f"miss rate {stats.missed_requests}/{stats.inference_count + stats.missed_requests}",
        )

    def process_epoch_boundary(self, ctx: PolicyContext) -> None:
        """ClearAllCBState: the epoch is the backstop; no exclusion outlives it."""
        states = {
            address: CircuitBreakerEntry.FromString(raw).state for address, raw in ctx.iterate_raw()
        }
        for address in ctx.clear_all():
            if states[address] != HEALTHY:  # a kept (restored) entry changes no state
                ctx.emit_transition(
                    address, STATE_NAMES[states[address]], "healthy", "epoch boundary reset"
                )

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        """The read-only health filter."""
        entry = self.get_entry(reader.get_raw(address), address)
        if entry.state == PROBE:
            return Health(True, state="probe")
        if entry.state == EXCLUDED:
            end = get_cooldown_end(entry)
            if height >= end:
                return Health(True, state="excluded")
            return Health(False, severity=1_000_000, valid_until=end - 1, state="excluded")
        participant = reader.keeper.get_participant(address)
        if participant is None:
            return Health(True)
        stats = participant.current_epoch_stats
        if is_miss_rate_exceeded(stats, reader.params.circuit_breaker_params):
            return Health(False, severity=compute_miss_rate_ppm(stats), state="healthy")
        return Health(True)

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        entry = self.get_entry(reader.get_raw(address), address)
        health = self.get_health(reader, address, height)
        return {
            "state": STATE_NAMES[entry.state],
            "admitted": health.admitted,
            "excluded_at_block": entry.excluded_at_block,
            "cooldown_blocks": entry.cooldown_blocks,
            "cooldown_end": get_cooldown_end(entry) if entry.state == EXCLUDED else None,
            "probe_attempts": entry.probe_attempts,
            "last_restored_block": entry.last_restored_block,
        }
