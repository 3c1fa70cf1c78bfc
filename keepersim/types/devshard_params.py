"""keepersim's ``DevshardParams`` (``extension_params.devshard_params``): bounds and validation.

The devshard path's knobs and the gateway limiter's settings as params (issue 33), so a preset,
``--params`` or a governance file can set them and governance can change them mid-run. Every
field of 0 / "" is "not set" (the scenario's ``devshard`` key, whose defaults are upstream's:
``keepersim.gateway.limiter_params``); the defaults themselves live there, not here. The bounds
are the scenario key's (``keepersim.sim.devshard_spec`` reads them from here).
"""

from __future__ import annotations

from typing import Final

from keepersim.types.errors import InvalidParamsError
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import DevshardParams

__all__ = [
    "LIMITER_FIELDS",
    "MAX_BLOCK_TIME_MS",
    "MAX_GROUP_SIZE",
    "MAX_LIMITER_VALUE",
    "MAX_NONCES_PER_ESCROW",
    "MISS_SIGNAL_NAMES",
    "validate_devshard_params",
]

MAX_BLOCK_TIME_MS: Final = 600_000
MAX_GROUP_SIZE: Final = 1024
#: ``DevshardEscrowParams.max_nonce``'s default (v0.2.13's upgrade): no escrow goes beyond it.
MAX_NONCES_PER_ESCROW: Final = 20_000
#: Upstream's settings are Go ``int`` / ``time.Duration``; keepersim keeps them below 2**31.
MAX_LIMITER_VALUE: Final = 2**31 - 1
#: The signals a miss may stand for (``keepersim.gateway.signals.MISS_SIGNALS``' values).
MISS_SIGNAL_NAMES: Final = ("transport_failure", "eof_transport", "empty_stream", "stalled_winner")
#: ``ParticipantThrottleSettings``' fields, named as ``limiter_params.ThrottleSettings``.
LIMITER_FIELDS: Final = (
    "request_burst",
    "recovery_per_minute",
    "http_quarantine_ms",
    "transport_failure_quarantine_ms",
    "empty_stream_quarantine_ms",
    "stalled_winner_quarantine_ms",
    "empty_stream_quarantine_threshold",
    "eof_transport_failure_threshold",
)


def _require(ok: bool, field: str, rule: str, value: object) -> None:
    if not ok:
        raise InvalidParamsError(field, rule, value)


def validate_devshard_params(
    d: DevshardParams, where: str = "extension_params.devshard_params."
) -> None:
    """Raise :class:`InvalidParamsError` naming the first rule broken (0 / "" always pass)."""
    _require(
        d.block_time_ms <= MAX_BLOCK_TIME_MS,
        where + "block_time_ms",
        f"in [1, {MAX_BLOCK_TIME_MS}] (0: the scenario's, default 5000)",
        d.block_time_ms,
    )
    _require(
        d.group_size <= MAX_GROUP_SIZE,
        where + "group_size",
        f"in [1, {MAX_GROUP_SIZE}] (0: the scenario's, else the chain's group_size)",
        d.group_size,
    )
    _require(
        d.nonces_per_escrow <= MAX_NONCES_PER_ESCROW,
        where + "nonces_per_escrow",
        f"in [1, {MAX_NONCES_PER_ESCROW}] (0: the scenario's, default 1000)",
        d.nonces_per_escrow,
    )
    _require(
        d.miss_signal in ("", *MISS_SIGNAL_NAMES),
        where + "miss_signal",
        f'one of {", ".join(MISS_SIGNAL_NAMES)} ("": the scenario\'s)',
        d.miss_signal,
    )
    for name in LIMITER_FIELDS:
        value = getattr(d, name)
        _require(
            value <= MAX_LIMITER_VALUE,
            where + name,
            f"in [0, {MAX_LIMITER_VALUE}] (0: the scenario's, default upstream's)",
            value,
        )
