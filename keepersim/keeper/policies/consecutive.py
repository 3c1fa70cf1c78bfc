"""SMG's consecutive-failure circuit breaker (SGLang model gateway; smg-project/smg 28590879,
``model_gateway/src/worker/circuit_breaker.rs``), in blocks.

CLOSED -(failure_threshold consecutive failures)-> OPEN -(timeout_blocks)-> HALF_OPEN;
HALF_OPEN -(success_threshold consecutive successes)-> CLOSED; any HALF_OPEN failure -> OPEN
(the timeout starts over). A success resets the failure streak; a neutral outcome (capacity
pushback, SMG's 429) records nothing in either direction, so it can neither open nor close a
breaker. SMG moves OPEN to HALF_OPEN at the next check of the worker; here that check is the end
block of the timeout height, through the policy's wake-up queue, so idle blocks cost nothing.

Counters as SMG's: every success adds to ``consecutive_successes`` and zeroes
``consecutive_failures``, every failure the reverse, in any state; opening clears only the
success streak, closing and the move to HALF_OPEN clear both. The transition rules are the
module-level ``process_*`` functions (explicit heights), which the policy's hooks and
``consecutive_api.ConsecutiveBreakers`` (SMG's reset / force_open / state reads) both call.

Per-participant overrides (``params.health_params.consecutive.overrides``) replace the
thresholds, the timeout and the set of outcome classes counted as pushback ("declined", "miss");
as in SMG, a list that is set replaces the default (``["declined"]``) instead of adding to it.

``disabled`` mirrors ``--disable-circuit-breaker``: outcomes are still recorded (counters and
streaks move) but a breaker never opens; reaching the threshold is recorded in the entry as a
"would open" (``would_open_count``, ``last_would_open_block``; no transition event, since nothing
changed for selection). As in SMG, a participant whose override sets its own
``failure_threshold`` still gets a working breaker.

When every candidate is open the pipeline answers NoExecutorsError ("no available executors",
SMG's 503) unless ``fallback_when_all_open`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from keepersim.keeper.policies.base import (
    Health,
    HealthPolicy,
    PolicyReader,
    PolicyStore,
)
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ConsecutiveParams, ExtensionParams
from keepersim.types.pb.keepersim.v1.health_pb2 import CLOSED, HALF_OPEN, OPEN, ConsecutiveEntry

STATE_NAMES = {CLOSED: "closed", OPEN: "open", HALF_OPEN: "half_open"}
DEFAULT_PUSHBACK = frozenset({"declined"})
OPEN_SEVERITY = 1_000_000
# Admitted verdicts by state name: immutable, so shared (the chain asks after every outcome).
ADMITTED_AS = {name: Health(True, state=name) for name in STATE_NAMES.values()}


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """The effective settings of one participant's breaker (params with its override)."""

    failure_threshold: int
    success_threshold: int
    timeout_blocks: int
    pushback: frozenset[str]
    enabled: bool


# (failure_threshold, success_threshold, timeout_blocks, disabled) -> the settings without an
# override: immutable, so shared instead of built on every outcome and verdict.
_DEFAULT_SETTINGS: dict[tuple[int, int, int, bool], BreakerSettings] = {}


def get_settings(params: ConsecutiveParams, address: str) -> BreakerSettings:
    """Params merged with the participant's override (a linear scan: overrides are few)."""
    for o in params.overrides:
        if o.address != address:
            continue
        pushback = (
            frozenset(o.pushback_outcomes)
            if o.has_pushback_outcomes or len(o.pushback_outcomes) > 0
            else DEFAULT_PUSHBACK
        )
        return BreakerSettings(
            failure_threshold=(
                o.failure_threshold if o.HasField("failure_threshold") else params.failure_threshold
            ),
            success_threshold=(
                o.success_threshold if o.HasField("success_threshold") else params.success_threshold
            ),
            timeout_blocks=o.timeout_blocks
            if o.HasField("timeout_blocks")
            else params.timeout_blocks,
            pushback=pushback,
            # SMG: a worker's own failure threshold re-enables its breaker when globally disabled.
            enabled=not params.disabled or o.HasField("failure_threshold"),
        )
    key = (
        params.failure_threshold,
        params.success_threshold,
        params.timeout_blocks,
        params.disabled,
    )
    settings = _DEFAULT_SETTINGS.get(key)
    if settings is None:
        if len(_DEFAULT_SETTINGS) >= 64:
            _DEFAULT_SETTINGS.clear()
        settings = BreakerSettings(
            failure_threshold=params.failure_threshold,
            success_threshold=params.success_threshold,
            timeout_blocks=params.timeout_blocks,
            pushback=DEFAULT_PUSHBACK,
            enabled=not params.disabled,
        )
        _DEFAULT_SETTINGS[key] = settings
    return settings


def compute_outcome_class(outcome: Outcome, pushback: frozenset[str]) -> Outcome:
    """Map a chain outcome to success / failure (MISS) / neutral for this breaker.

    A decline is pushback unless the participant's pushback set drops "declined" (then it is a
    failure, like a 429 missing from SMG's capacity codes); a miss is neutral only if listed.
    """
    if outcome is Outcome.SUCCESS:
        return Outcome.SUCCESS
    if outcome is Outcome.MISS:
        return Outcome.NEUTRAL if "miss" in pushback else Outcome.MISS
    return Outcome.NEUTRAL if "declined" in pushback else Outcome.MISS


def process_result(
    ctx: PolicyStore, address: str, kind: Outcome, settings: BreakerSettings, height: int
) -> None:
    """One classified result at ``height`` (SMG's record_success / record_failure; a neutral
    one records nothing on the breaker). As SMG: a success counts in the success streak and a
    failure in the failure streak in every state, each resetting the other streak."""
    entry = ctx.get(address, ConsecutiveBreaker.get_entry)
    if not settings.enabled and entry.state != CLOSED:
        # Opened before the breaker was disabled: disabling closes it at its next result.
        from_state = STATE_NAMES[entry.state]
        entry.state = CLOSED
        entry.consecutive_failures = 0
        entry.consecutive_successes = 0
        ctx.emit_transition(address, from_state, "closed", "breaker disabled")
    if kind is Outcome.NEUTRAL:
        # Records nothing on the breaker: no streak moves, no probe closes.
        entry.total_neutral += 1
    elif kind is Outcome.SUCCESS:
        entry.total_successes += 1
        entry.consecutive_failures = 0
        entry.consecutive_successes += 1
        if entry.state == HALF_OPEN and entry.consecutive_successes >= settings.success_threshold:
            process_close(ctx, entry, f"{entry.consecutive_successes} consecutive successes")
        # OPEN: a late result of a request sent before the breaker opened; counted only.
    else:
        entry.total_failures += 1
        entry.consecutive_successes = 0
        entry.consecutive_failures += 1
        if entry.state == HALF_OPEN:
            process_open(ctx, entry, settings, "failure while half-open", height)
        elif entry.state == CLOSED and entry.consecutive_failures >= settings.failure_threshold:
            if settings.enabled:
                reason = f"{entry.consecutive_failures} consecutive failures"
                process_open(ctx, entry, settings, reason, height)
            elif entry.consecutive_failures == settings.failure_threshold:
                entry.would_open_count += 1
                entry.last_would_open_block = height
    ctx.set(address, entry)


def process_open(
    ctx: PolicyStore,
    entry: ConsecutiveEntry,
    settings: BreakerSettings,
    reason: str,
    height: int,
) -> None:
    """To OPEN at ``height`` (SMG's transition_to(Open)): the success streak is cleared, the
    failure streak kept; HALF_OPEN from ``height + timeout_blocks``. The caller stores it."""
    from_state = STATE_NAMES[entry.state]
    entry.state = OPEN
    entry.opened_at_block = height
    entry.half_open_at_block = height + settings.timeout_blocks
    entry.consecutive_successes = 0
    entry.open_count += 1
    ctx.schedule(entry.half_open_at_block, entry.address)
    ctx.emit_transition(entry.address, from_state, "open", reason)


def process_close(ctx: PolicyStore, entry: ConsecutiveEntry, reason: str) -> None:
    """To CLOSED (SMG's transition_to(Closed)): both streaks cleared. The caller stores it."""
    from_state = STATE_NAMES[entry.state]
    entry.state = CLOSED
    entry.consecutive_successes = 0
    entry.consecutive_failures = 0
    ctx.emit_transition(entry.address, from_state, "closed", reason)


def process_half_open(ctx: PolicyStore, entry: ConsecutiveEntry, height: int) -> bool:
    """OPEN -> HALF_OPEN once ``height`` reaches the timeout (SMG's check of the state), both
    streaks cleared, and stored; False (nothing done) for any other entry."""
    if entry.state != OPEN or height < entry.half_open_at_block:
        return False
    entry.state = HALF_OPEN
    entry.consecutive_failures = 0
    entry.consecutive_successes = 0
    ctx.set(entry.address, entry)
    ctx.emit_transition(
        entry.address,
        "open",
        "half_open",
        f"timeout of {entry.half_open_at_block - entry.opened_at_block} blocks",
    )
    return True


def process_timeouts(ctx: PolicyStore, height: int) -> None:
    """The queued timeouts due by ``height``: OPEN -> HALF_OPEN (a stale wake-up, of an entry
    reopened since with a later timeout or closed, does nothing)."""
    for address in ctx.pop_due(height):
        entry = ctx.find(address, ConsecutiveBreaker.get_entry)
        if entry is not None:
            process_half_open(ctx, entry, height)


class ConsecutiveBreaker(HealthPolicy):
    name: ClassVar[str] = "consecutive"
    prefix: ClassVar[bytes] = b"\x02"

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> ConsecutiveEntry:
        if raw is None:
            return ConsecutiveEntry(address=address, state=CLOSED)
        return ConsecutiveEntry.FromString(raw)

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        settings = get_settings(ctx.params.health_params.consecutive, address)
        kind = compute_outcome_class(outcome, settings.pushback)
        process_result(ctx, address, kind, settings, ctx.height)

    def process_end_block(self, ctx: PolicyStore) -> None:
        """Only queued timeouts: OPEN -> HALF_OPEN once its timeout height is reached."""
        process_timeouts(ctx, ctx.height)

    def get_wakeup(self, raw: bytes) -> int | None:
        entry = ConsecutiveEntry.FromString(raw)
        return entry.half_open_at_block if entry.state == OPEN else None

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        raw = reader.get_raw(address)
        if raw is None:
            return ADMITTED_AS["closed"]
        entry = ConsecutiveEntry.FromString(raw)
        if not get_settings(reader.params.health_params.consecutive, address).enabled:
            return ADMITTED_AS[STATE_NAMES[entry.state]]
        if entry.state == OPEN and height < entry.half_open_at_block:
            return Health(
                False,
                severity=OPEN_SEVERITY,
                valid_until=entry.half_open_at_block - 1,
                state="open",
            )
        # An OPEN entry past its timeout is half-open at its next check (SMG); the end block of
        # the timeout height writes that down.
        return ADMITTED_AS["half_open" if entry.state != CLOSED else "closed"]

    def is_fallback_allowed(self, params: ExtensionParams) -> bool:
        return params.health_params.consecutive.fallback_when_all_open

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        entry = self.get_entry(reader.get_raw(address), address)
        health = self.get_health(reader, address, height)
        settings = get_settings(reader.params.health_params.consecutive, address)
        return {
            "state": STATE_NAMES[entry.state],
            "admitted": health.admitted,
            "enabled": settings.enabled,
            "consecutive_failures": entry.consecutive_failures,
            "consecutive_successes": entry.consecutive_successes,
            "opened_at_block": entry.opened_at_block,
            "half_open_at_block": entry.half_open_at_block if entry.state == OPEN else None,
            "open_count": entry.open_count,
            "would_open_count": entry.would_open_count,
            "last_would_open_block": entry.last_would_open_block,
            "total_successes": entry.total_successes,
            "total_failures": entry.total_failures,
            "total_neutral": entry.total_neutral,
        }
