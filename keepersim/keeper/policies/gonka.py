"""Gonka's fast circuit breaker (issue #942; gonka-ai/gonka 6a468b08, MinglesAI/gonka 189891e5,
``inference-chain/x/inference/keeper/circuit_breaker.go``).

HEALTHY -(epoch miss rate > pct over >= min samples)-> EXCLUDED -(cooldown over)-> PROBE;
PROBE -(success)-> HEALTHY; PROBE -(miss)-> EXCLUDED with the cooldown doubled (capped).
Cooldown expiries sit in a height-keyed queue, so a quiet block costs nothing per participant.

The keeper functions are the module-level ``process_*`` / ``get_*`` functions below, each with
an explicit height like upstream's: the policy's hooks call them with the block's height, and
``gonka_api.GonkaCBKeeper`` exposes them under upstream's names. Counters as upstream: a failed
probe (``ExcludeCBEntry`` with ``reExclusion``) counts one probe attempt, a promotion none;
nothing but the epoch boundary (every entry deleted) resets it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from keepersim.keeper.policies.base import (
    ADMITTED,
    Health,
    HealthPolicy,
    PolicyReader,
    PolicyStore,
)
from keepersim.keeper.policies.gonka_index import (
    get_cb_settings,
    get_rate_rule_candidates,
    hand_verdict,
)
from keepersim.types.events import Outcome
from keepersim.types.messages import CurrentEpochStats, Inference, Participant
from keepersim.types.params import CbSettings
from keepersim.types.pb.keepersim.v1.health_pb2 import EXCLUDED, HEALTHY, PROBE, CircuitBreakerEntry

STATE_NAMES = {HEALTHY: "healthy", EXCLUDED: "excluded", PROBE: "probe"}


def is_miss_rate_exceeded(stats: CurrentEpochStats, params: CbSettings) -> bool:
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


def get_cb_entry(raw: bytes | None, address: str, params: CbSettings) -> CircuitBreakerEntry:
    """GetCBEntry: the stored entry, or HEALTHY with the initial cooldown when there is none.

    Upstream's getter fills in its compile-time default (50 blocks) rather than the param; the
    two agree at the default params, and keepersim's param is the initial cooldown (upstream
    reads its param only for a stored entry without a cooldown).
    """
    if raw is None:
        return CircuitBreakerEntry(
            address=address, state=HEALTHY, cooldown_blocks=params.initial_cooldown_blocks
        )
    return CircuitBreakerEntry.FromString(raw)


def decode_cb_entry(raw: bytes | None, address: str) -> CircuitBreakerEntry:
    """A stored entry (policy stores only look up stored ones with it: raw is never None)."""
    return (
        CircuitBreakerEntry(address=address) if raw is None else CircuitBreakerEntry.FromString(raw)
    )


def get_cb_wakeup(entry: CircuitBreakerEntry) -> int | None:
    """The end block that must look at ``entry``: an EXCLUDED one's cooldown end."""
    return get_cooldown_end(entry) if entry.state == EXCLUDED else None


def process_set_cb_entry(ctx: PolicyStore, entry: CircuitBreakerEntry) -> None:
    """SetCBEntry, with the wake-up queue kept in step (an EXCLUDED entry is promoted in the
    end block of its cooldown end, as upstream's scan of every entry would)."""
    ctx.set(entry.address, entry)
    wakeup = get_cb_wakeup(entry)
    if wakeup is not None:
        ctx.schedule(wakeup, entry.address)


def process_exclude(
    ctx: PolicyStore,
    entry: CircuitBreakerEntry,
    height: int,
    re_exclusion: bool,
    reason: str = "excluded",
) -> None:
    """ExcludeCBEntry: EXCLUDED at ``height``; a re-exclusion (a failed probe) doubles the
    cooldown up to the cap and counts a probe attempt; a cooldown of 0 starts at the initial."""
    cb = get_cb_settings(ctx.params)
    from_state = STATE_NAMES[entry.state]
    cooldown = entry.cooldown_blocks if entry.cooldown_blocks > 0 else cb.initial_cooldown_blocks
    if re_exclusion:
        cooldown = min(2 * cooldown, cb.max_cooldown_blocks)
        entry.probe_attempts += 1
        reason = f"probe missed; cooldown {cooldown}"
    entry.state = EXCLUDED
    entry.excluded_at_block = height
    entry.cooldown_blocks = cooldown
    process_set_cb_entry(ctx, entry)
    ctx.emit_transition(entry.address, from_state, "excluded", reason)


def process_promote(ctx: PolicyStore, entry: CircuitBreakerEntry, height: int) -> None:
    """PromoteCBEntryToProbe: PROBE; no counter moves."""
    from_state = STATE_NAMES[entry.state]
    entry.state = PROBE
    ctx.set(entry.address, entry)
    ctx.emit_transition(entry.address, from_state, "probe", "cooldown expired")


def process_restore(ctx: PolicyStore, entry: CircuitBreakerEntry, height: int) -> None:
    """A successful probe: HEALTHY, kept with its cooldown and probe attempts, marked restored
    at ``height`` (the one-block grace of the end-block pass)."""
    entry.state = HEALTHY
    entry.last_restored_block = height
    entry.probe_restored = True
    ctx.set(entry.address, entry)
    # The miss-rate rule may exclude it again from the next block on (no grace after that).
    ctx.schedule(height + 1, entry.address)
    ctx.emit_transition(entry.address, "probe", "healthy", "probe succeeded")


def process_cb_result(ctx: PolicyStore, address: str, height: int, success: bool) -> None:
    """RecordCBResult: acts only in PROBE (success restores, a miss re-excludes)."""
    entry = ctx.find(address, decode_cb_entry)
    if entry is None or entry.state != PROBE:
        return
    if success:
        process_restore(ctx, entry, height)
    else:
        process_exclude(ctx, entry, height, True)


def process_cb_state_for_block(ctx: PolicyStore, height: int, addresses: Iterable[str]) -> None:
    """UpdateCBStateForBlock: 1. EXCLUDED entries whose cooldown ended -> PROBE; 2. HEALTHY
    participants among ``addresses`` (and those woken) meeting the miss-rate rule -> EXCLUDED,
    except in the block of their restoration. Upstream scans every entry and participant; here
    pass 1 reads the wake-up queue (an EXCLUDED entry is woken at its cooldown end)."""
    cb = get_cb_settings(ctx.params)
    due = ctx.pop_due(height)
    for address in due:
        entry = ctx.find(address, decode_cb_entry)
        if entry is not None and entry.state == EXCLUDED and height >= get_cooldown_end(entry):
            process_promote(ctx, entry, height)
    for address in sorted(set(addresses).union(due)):
        entry = ctx.find(address, decode_cb_entry)  # None: HEALTHY (get_cb_entry's default)
        health = None if entry is None else get_entry_health(entry, height)
        if health is None:
            participant = ctx.chain.get_participant(address)
            health = process_rate_rule(ctx, address, entry, participant, height, cb)
        hand_verdict(ctx, address, health)  # gonka_index: the chain's table need not ask


def process_rate_rule(
    ctx: PolicyStore,
    address: str,
    entry: CircuitBreakerEntry | None,
    participant: Participant | None,
    height: int,
    cb: CbSettings,
) -> Health:
    """Pass 2 on a HEALTHY entry (None: none stored): EXCLUDED if it fails the miss-rate rule
    (get_rate_health), except in the block of its restoration. Returns its verdict at
    ``height`` after that, as get_cb_health gives it."""
    if participant is None:
        return ADMITTED
    stats = participant.current_epoch_stats
    health = get_rate_health(stats, cb)
    if health.admitted:
        return health
    if entry is not None and entry.probe_restored and entry.last_restored_block == height:
        return health  # one-block grace after a successful probe: kept HEALTHY, yet failing
    if entry is None:
        entry = get_cb_entry(None, address, cb)
    total = stats.inference_count + stats.missed_requests
    process_exclude(ctx, entry, height, False, f"miss rate {stats.missed_requests}/{total}")
    return get_excluded_health(entry, height)


def process_clear_all(ctx: PolicyStore) -> None:
    """ClearAllCBState: every entry (and wake-up) deleted; a non-HEALTHY one reports its reset."""
    states = {address: entry.state for address, entry in ctx.iterate(decode_cb_entry)}
    for address in ctx.clear_all():
        if states[address] != HEALTHY:  # a kept (restored) entry changes no state
            ctx.emit_transition(
                address, STATE_NAMES[states[address]], "healthy", "epoch boundary reset"
            )


# Verdicts shared rather than built per ask (the chain's memo skips a verdict that is the very
# object it holds).
_ADMITTED_PROBE = Health(True, state="probe")
_ADMITTED_EXCLUDED = Health(True, state="excluded")


def get_entry_health(entry: CircuitBreakerEntry, height: int) -> Health | None:
    """The verdict an entry gives alone at ``height``: PROBE passes; EXCLUDED passes once its
    cooldown is over (the promotion is the end block's). None for HEALTHY: the miss rate
    decides (get_rate_health)."""
    if entry.state == PROBE:
        return _ADMITTED_PROBE
    if entry.state == EXCLUDED:
        return get_excluded_health(entry, height)
    return None


def get_excluded_health(entry: CircuitBreakerEntry, height: int) -> Health:
    """An EXCLUDED entry's verdict: out until its cooldown ends, then it passes."""
    end = get_cooldown_end(entry)
    if height >= end:
        return _ADMITTED_EXCLUDED
    return Health(False, severity=1_000_000, valid_until=end - 1, state="excluded")


def get_rate_health(stats: CurrentEpochStats, params: CbSettings) -> Health:
    """A HEALTHY participant's verdict: it fails while it meets the miss-rate rule."""
    if is_miss_rate_exceeded(stats, params):
        return Health(False, severity=compute_miss_rate_ppm(stats), state="healthy")
    return ADMITTED


def get_cb_health(reader: PolicyReader, address: str, height: int) -> Health:
    """One candidate in the read-only health filter (createHealthFilterFn) at ``height``:
    the entry's verdict (get_entry_health), else the miss rate's; an unknown participant
    passes."""
    raw = reader.get_raw(address)
    if raw is not None:
        health = get_entry_health(CircuitBreakerEntry.FromString(raw), height)
        if health is not None:
            return health
    participant = reader.chain.get_participant(address)
    if participant is None:
        return ADMITTED
    return get_rate_health(participant.current_epoch_stats, get_cb_settings(reader.params))


class GonkaBreaker(HealthPolicy):
    name: ClassVar[str] = "gonka"
    prefix: ClassVar[bytes] = b"\x01"
    verdict_reads_participants: ClassVar[bool] = True  # the epoch miss rate

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        """RecordCBResult (a decline records nothing)."""
        if outcome is not Outcome.NEUTRAL:
            process_cb_result(ctx, address, ctx.height, outcome is Outcome.SUCCESS)

    def process_end_block(self, ctx: PolicyStore) -> None:
        everyone = ctx.chain.get_participant_addresses
        process_cb_state_for_block(ctx, ctx.height, get_rate_rule_candidates(ctx, everyone))

    def process_epoch_boundary(self, ctx: PolicyStore) -> None:
        """ClearAllCBState: the epoch is the backstop; no exclusion outlives it."""
        process_clear_all(ctx)

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        return get_cb_health(reader, address, height)

    def get_wakeup(self, raw: bytes) -> int | None:
        return get_cb_wakeup(CircuitBreakerEntry.FromString(raw))

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        """The whole entry (as GetCBEntry reads it), its verdict and its cooldown end."""
        entry = get_cb_entry(reader.get_raw(address), address, get_cb_settings(reader.params))
        health = self.get_health(reader, address, height)
        return {
            "state": STATE_NAMES[entry.state],
            "admitted": health.admitted,
            "excluded_at_block": entry.excluded_at_block,
            "cooldown_blocks": entry.cooldown_blocks,
            "cooldown_end": get_cooldown_end(entry) if entry.state == EXCLUDED else None,
            "probe_attempts": entry.probe_attempts,
            "last_restored_block": entry.last_restored_block,
            "probe_restored": entry.probe_restored,
        }
