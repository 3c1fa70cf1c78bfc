"""The limiter's settings: upstream's wall-clock values and their conversion to blocks.

Defaults are ``DefaultParticipantThrottleSettings`` (gonka ee730031
``devshard/cmd/devshardctl/participant_limiter.go:15-51, 188-199``): a 600-token burst refilled
at 10 a minute, probe quarantine 60 min after HTTP 429/503, 30 min after an inference transport
failure (and 404/403, timestamp-drift 401), 30 min of shadow quarantine after 3 empty streams or
a stalled winner, 3 strikes to quarantine.

One param turns time into heights: the block time (``keeper.devshard.timing``, 5,000 ms by
default, with its sources).

Rounding: a quarantine lasts ``ceil(ms / block_time_ms)`` blocks (at least one block, and never
ending before upstream's would); the picker's 200 ms hold is ``floor`` (below a block it is no
hold: in a block-stepped model every request of the block is queued before the picker runs).
Tokens are integers in units of 1/60,000 token, so the per-minute refill over a block of
``block_time_ms`` milliseconds is exactly ``recovery_per_minute * block_time_ms`` units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from keepersim.keeper.devshard.timing import DEFAULT_BLOCK_TIME_MS, compute_blocks_ceil

UPSTREAM = "gonka ee730031 devshard/cmd/devshardctl/participant_limiter.go"
TOKEN_UNITS = 60_000  # units per token: a per-minute rate over milliseconds divides exactly
STRIKE_THRESHOLD = 3  # participantFailureStrikeThreshold (participant_limiter.go:33)
STRIKES_AFTER_QUARANTINE = STRIKE_THRESHOLD - 1  # participantStrikesAfterQuarantine (:38)
PICKER_STALE_MS = 200  # pickerStaleThreshold (session_picker.go:83)
_MINUTE_MS = 60_000


@dataclass(frozen=True)
class ThrottleSettings:
    """``ParticipantThrottleSettings`` in upstream's units (ms, tokens, per minute); a value
    <= 0 means "the default", as ``applySettingsLocked`` (participant_limiter.go:303-344)."""

    request_burst: int = 600
    recovery_per_minute: int = 10
    http_quarantine_ms: int = 60 * _MINUTE_MS
    transport_failure_quarantine_ms: int = 30 * _MINUTE_MS
    empty_stream_quarantine_ms: int = 30 * _MINUTE_MS
    stalled_winner_quarantine_ms: int = 30 * _MINUTE_MS
    empty_stream_quarantine_threshold: int = STRIKE_THRESHOLD
    eof_transport_failure_threshold: int = STRIKE_THRESHOLD


DEFAULT_THROTTLE_SETTINGS = ThrottleSettings()


@dataclass(frozen=True)
class LimiterParams:
    """The limiter in blocks and integer token units (what the state machine reads)."""

    burst_units: int
    refill_units_per_block: int
    http_quarantine_blocks: int
    transport_failure_quarantine_blocks: int
    empty_stream_quarantine_blocks: int
    stalled_winner_quarantine_blocks: int
    strike_threshold: int
    block_time_ms: int


def compute_effective_settings(settings: ThrottleSettings) -> ThrottleSettings:
    """``applySettingsLocked``'s defaulting: every value <= 0 takes upstream's default."""
    d = DEFAULT_THROTTLE_SETTINGS
    return ThrottleSettings(
        **{name: value if value > 0 else getattr(d, name) for name, value in vars(settings).items()}
    )


def compute_limiter_params(
    settings: ThrottleSettings = DEFAULT_THROTTLE_SETTINGS,
    block_time_ms: int = DEFAULT_BLOCK_TIME_MS,
) -> LimiterParams:
    """Settings -> blocks. The strike threshold is the smaller of the two thresholds
    (participant_limiter.go:335-338)."""
    s = compute_effective_settings(settings)
    return LimiterParams(
        burst_units=s.request_burst * TOKEN_UNITS,
        refill_units_per_block=s.recovery_per_minute * block_time_ms,
        http_quarantine_blocks=compute_blocks_ceil(s.http_quarantine_ms, block_time_ms),
        transport_failure_quarantine_blocks=compute_blocks_ceil(
            s.transport_failure_quarantine_ms, block_time_ms
        ),
        empty_stream_quarantine_blocks=compute_blocks_ceil(
            s.empty_stream_quarantine_ms, block_time_ms
        ),
        stalled_winner_quarantine_blocks=compute_blocks_ceil(
            s.stalled_winner_quarantine_ms, block_time_ms
        ),
        strike_threshold=min(
            s.empty_stream_quarantine_threshold, s.eof_transport_failure_threshold
        ),
        block_time_ms=block_time_ms,
    )


def compute_new_limiter_params(
    burst: int, recovery_per_minute: int, block_time_ms: int = DEFAULT_BLOCK_TIME_MS
) -> LimiterParams:
    """``NewParticipantRequestLimiter(burst, recoveryPerMinute)`` (participant_limiter.go:282-295):
    the defaults with a positive burst / rate overriding theirs."""
    s = DEFAULT_THROTTLE_SETTINGS
    if burst > 0:
        s = replace(s, request_burst=burst)
    if recovery_per_minute > 0:
        s = replace(s, recovery_per_minute=recovery_per_minute)
    return compute_limiter_params(s, block_time_ms)


def compute_picker_stale_blocks(block_time_ms: int = DEFAULT_BLOCK_TIME_MS) -> int:
    """The picker's hold in blocks, rounded down (module docstring)."""
    return PICKER_STALE_MS // block_time_ms
