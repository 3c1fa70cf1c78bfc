"""A scenario's ``devshard`` key: how much of its traffic goes through devshard escrows.

``{"share": 1.0, "nonces_per_escrow": 1000, "group_size": 0, "slot_filter": false,
"block_time_ms": 5000, "miss_signal": "transport_failure"}``, every key optional:

* ``share`` (0..1, default 1): the fraction of requests sent through devshard; request ``n``
  goes there when ``blake2b("<seed>/<n>/devshard")`` (as a fraction of 2**64) is below it, the
  rest is classic ``MsgStartInference`` traffic (``GetRandomExecutor``);
* ``nonces_per_escrow`` (default 1000): nonces an escrow's session uses before the next escrow
  is created (upstream bounds it by ``max_nonce``, 20,000, and the escrow's amount; the
  gateway's rotation is not modelled, so this is the scenario's choice);
* ``open_escrows`` (default 1, at most :data:`MAX_OPEN_ESCROWS`): escrows open at once per
  model, request ``n`` on escrow ``n % open_escrows`` (a gateway holds several; its choice
  among them by capacity is not modelled); with 1, all of a model's traffic goes to one
  escrow's 16 slots at a time;
* ``group_size`` (0 = the chain's ``devshard_escrow_params.group_size``, 16 by default,
  gonka ee730031 ``x/inference/types/params.go:102``): slots per escrow;
* ``slot_filter`` (default false): escrow creation samples its slots only from the
  participants the run's chain policy admits at that height (the what-if of issue 33 item 3;
  upstream has no such filter);
* ``block_time_ms`` (default 5,000, ``keepersim.keeper.devshard.timing``): converts the
  gateway limiter's and the escrow's wall-clock durations into blocks;
* ``miss_signal`` (default ``transport_failure``): what a miss tells the gateway's limiter
  (``keepersim.gateway.signals``);
* ``limiter`` (object, every key optional, 0 or absent = upstream's default,
  ``keepersim.gateway.limiter_params.ThrottleSettings``): ``request_burst`` (600),
  ``recovery_per_minute`` (10), ``http_quarantine_ms`` (60 min), ``transport_failure_quarantine_ms``,
  ``empty_stream_quarantine_ms``, ``stalled_winner_quarantine_ms`` (30 min each),
  ``empty_stream_quarantine_threshold``, ``eof_transport_failure_threshold`` (3): the
  ``devshard-limiter`` run's limiter (``DefaultParticipantThrottleSettings``,
  ``participant_limiter.go:15-51`` at ee730031), in blocks through ``block_time_ms``.

Every knob but ``share``, ``open_escrows`` and ``slot_filter`` is also a param,
``extension_params.devshard_params`` (``keepersim.types.devshard_params``): a non-zero field
there overrides the key (:func:`compute_effective_spec`), and governance can change it mid-run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from keepersim.gateway.limiter_params import DEFAULT_THROTTLE_SETTINGS, ThrottleSettings
from keepersim.gateway.signals import Signal
from keepersim.keeper.devshard.timing import DEFAULT_BLOCK_TIME_MS
from keepersim.types.devshard_params import (
    LIMITER_FIELDS,
    MAX_GROUP_SIZE,
    MAX_NONCES_PER_ESCROW,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import DevshardParams

__all__ = [
    "DEFAULT_DEVSHARD",
    "DEFAULT_NONCES_PER_ESCROW",
    "MAX_NONCES_PER_ESCROW",
    "MAX_GROUP_SIZE",
    "MAX_OPEN_ESCROWS",
    "MIXED_SHARE",
    "SELECTION_PATH_CHOICES",
    "DevshardSpec",
    "compute_effective_spec",
    "dump_devshard",
    "parse_devshard",
]

DEFAULT_NONCES_PER_ESCROW: Final = 1000
MAX_OPEN_ESCROWS: Final = 10_000
#: ``--selection-path`` of compare: ``scenario`` keeps each scenario's own path; ``classic``
#: sends every request through GetRandomExecutor, ``devshard`` every request through devshard,
#: ``mixed`` a :data:`MIXED_SHARE` of them; ``both`` runs each scenario as ``classic`` and as
#: ``devshard`` (labels ``NAME@classic``, ``NAME@devshard``).
SELECTION_PATH_CHOICES: Final = ("scenario", "classic", "devshard", "mixed", "both")
MIXED_SHARE: Final = 0.5


@dataclass(frozen=True, slots=True)
class DevshardSpec:
    """The parsed ``devshard`` key (module docstring)."""

    share: float = 1.0
    nonces_per_escrow: int = DEFAULT_NONCES_PER_ESCROW
    open_escrows: int = 1
    group_size: int = 0
    slot_filter: bool = False
    block_time_ms: int = DEFAULT_BLOCK_TIME_MS
    miss_signal: str = Signal.TRANSPORT_FAILURE.value
    #: The gateway limiter's settings in upstream's units (ms, tokens; 0 = upstream's default).
    limiter: ThrottleSettings = field(default=DEFAULT_THROTTLE_SETTINGS)

    def get_miss_signal(self) -> Signal:
        return Signal(self.miss_signal)


DEFAULT_DEVSHARD: Final = DevshardSpec()


def parse_devshard(obj: Mapping[str, Any]) -> DevshardSpec:
    """The schema-checked object -> :class:`DevshardSpec` (defaults for absent keys)."""
    d = DEFAULT_DEVSHARD
    return DevshardSpec(
        share=float(obj.get("share", d.share)),
        nonces_per_escrow=int(obj.get("nonces_per_escrow", d.nonces_per_escrow)),
        open_escrows=int(obj.get("open_escrows", d.open_escrows)),
        group_size=int(obj.get("group_size", d.group_size)),
        slot_filter=bool(obj.get("slot_filter", d.slot_filter)),
        block_time_ms=int(obj.get("block_time_ms", d.block_time_ms)),
        miss_signal=str(obj.get("miss_signal", d.miss_signal)),
        limiter=ThrottleSettings(**{k: int(v) for k, v in obj.get("limiter", {}).items()}),
    )


def dump_devshard(spec: DevshardSpec) -> dict[str, Any]:
    """The keys that differ from the defaults (``{}`` for an all-default devshard path)."""
    d = DEFAULT_DEVSHARD
    out: dict[str, Any] = {
        f.name: getattr(spec, f.name)
        for f in fields(DevshardSpec)
        if f.name != "limiter" and getattr(spec, f.name) != getattr(d, f.name)
    }
    limiter = {
        f.name: getattr(spec.limiter, f.name)
        for f in fields(ThrottleSettings)
        if getattr(spec.limiter, f.name) != getattr(DEFAULT_THROTTLE_SETTINGS, f.name)
    }
    if limiter:
        out["limiter"] = limiter
    return out


def compute_effective_spec(spec: DevshardSpec, params: DevshardParams) -> DevshardSpec:
    """``spec`` with every set field of the run's ``extension_params.devshard_params`` (0 / ""
    keeps the scenario's value; ``keepersim.types.devshard_params``). ``share``,
    ``open_escrows`` and ``slot_filter`` are the scenario's alone (how it routes its traffic)."""
    limiter = spec.limiter
    changed = {name: getattr(params, name) for name in LIMITER_FIELDS if getattr(params, name)}
    if changed:
        limiter = replace(limiter, **changed)
    return replace(
        spec,
        block_time_ms=params.block_time_ms or spec.block_time_ms,
        group_size=params.group_size or spec.group_size,
        nonces_per_escrow=params.nonces_per_escrow or spec.nonces_per_escrow,
        miss_signal=params.miss_signal or spec.miss_signal,
        limiter=limiter,
    )
