"""A settled escrow's per-slot stats on the chain (gonka ee730031
``keeper/devshard_host_stats.go``).

``MsgSettleDevshardEscrow`` (``keeper/msg_server_settle_devshard_escrow.go:196-226``) adds each
slot's ``DevshardSettlementHostStats`` to the host's ``DevshardHostEpochStats`` of the escrow's
epoch (``UpdateDevshardHostEpochStats``, lines 30-72: uint32/uint64 overflow is an error; the
escrow count grows once per validator and escrow) and, for a participant active in the current
epoch, into its ``CurrentEpochStats`` (``AggregateDevshardHostStatsIntoCurrentEpochStats``,
lines 74-127): the slot's nonces (``compute_assigned_upper_bound``) minus its misses count as
inferences, those minus its invalid ones as validated. This is how devshard traffic reaches the
epoch counters the chain's downtime SPRT and the policies read.
"""

from __future__ import annotations

from keepersim.keeper.devshard.nonces import compute_assigned_upper_bound
from keepersim.types.pb.inference.inference.devshard_escrow_pb2 import (
    DevshardHostEpochStats,
    DevshardSettlementHostStats,
)
from keepersim.types.pb.inference.inference.participant_pb2 import CurrentEpochStats

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


class HostStatsError(ValueError):
    """A settlement the chain rejects (the message names the counter, as upstream's)."""


def _add(value: int, delta: int, limit: int, what: str) -> int:
    if value > limit - delta:
        raise HostStatsError(f"{what} overflow aggregating devshard host stats")
    return value + delta


def process_host_epoch_stats(
    existing: DevshardHostEpochStats,
    slot: DevshardSettlementHostStats,
    increment_escrow_count: bool,
) -> None:
    """``UpdateDevshardHostEpochStats`` (devshard_host_stats.go:30-72) on ``existing`` in
    place; on an error ``existing`` may be half-updated, as the chain discards the message."""
    existing.missed = _add(existing.missed, slot.missed, _U32, "missed")
    existing.invalid = _add(existing.invalid, slot.invalid, _U32, "invalid")
    existing.cost = _add(existing.cost, slot.cost, _U64, "cost")
    existing.required_validations = _add(
        existing.required_validations, slot.required_validations, _U32, "required validations"
    )
    existing.completed_validations = _add(
        existing.completed_validations, slot.completed_validations, _U32, "completed validations"
    )
    if increment_escrow_count:
        existing.escrow_count = _add(existing.escrow_count, 1, _U32, "escrow count")


def process_current_epoch_stats(
    stats: CurrentEpochStats, slot: DevshardSettlementHostStats, assigned_per_slot: int
) -> None:
    """``AggregateDevshardHostStatsIntoCurrentEpochStats`` (devshard_host_stats.go:74-127)."""
    missed, invalid = slot.missed, slot.invalid
    if missed > assigned_per_slot:
        raise HostStatsError(
            f"missed requests ({missed}) exceeds assigned per slot ({assigned_per_slot})"
        )
    completed = assigned_per_slot - missed
    if invalid > completed:
        raise HostStatsError(
            f"invalid inferences ({invalid}) exceeds completed requests ({completed})"
        )
    validated = completed - invalid
    stats.missed_requests = _add(stats.missed_requests, missed, _U64, "missed requests")
    stats.invalidated_inferences = _add(
        stats.invalidated_inferences, invalid, _U64, "invalidated inferences"
    )
    stats.inference_count = _add(stats.inference_count, completed, _U64, "inference count")
    stats.validated_inferences = _add(
        stats.validated_inferences, validated, _U64, "validated inferences"
    )


def get_slot_stats_error(
    latest_nonce: int, slot_count: int, slot_id: int, missed: int, invalid: int
) -> str | None:
    """``VerifyDevshardSettlement``'s per-slot bound (keeper/devshard_settlement.go:187-197):
    a slot cannot miss more nonces than reached it, nor invalidate more than it completed."""
    assigned = compute_assigned_upper_bound(latest_nonce, slot_count, slot_id)
    if missed > assigned:
        return f"slot {slot_id} missed count {missed} exceeds assigned per slot {assigned}"
    if invalid > assigned - missed:
        return (
            f"slot {slot_id} invalid count {invalid} exceeds completed per slot {assigned - missed}"
        )
    return None
