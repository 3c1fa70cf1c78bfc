"""Which slot serves a devshard nonce, and how many nonces a slot can have served.

The user's session advances the nonce from 1 and sends nonce ``n`` to slot
``n % len(group)`` (gonka ee730031 ``devshard/user/session.go:591-592`` and ``:757-758``,
``PrepareInferenceFn``); the group is the escrow's slots in order
(``devshard/bridge/group.go:15-21``). The chain's settlement bounds each slot's misses by the
nonces that could have reached it (``keeper/devshard_settlement.go:50-74``,
``devshardAssignedUpperBoundForSlot``). Nonce 0 is never used, so slot 0 first serves nonce
``len(group)``.
"""

from __future__ import annotations

from collections.abc import Sequence


def get_slot_for_nonce(nonce: int, group_size: int) -> int:
    """``int(nonce % uint64(len(s.group)))`` (session.go:592)."""
    if group_size <= 0:
        raise ValueError("group size must be positive")
    if nonce < 0:
        raise ValueError("nonce is a uint64")
    return nonce % group_size


def get_host_for_nonce(nonce: int, slots: Sequence[str]) -> str:
    """The participant (validator address) nonce ``nonce`` is sent to."""
    return slots[get_slot_for_nonce(nonce, len(slots))]


def compute_assigned_upper_bound(latest_nonce: int, slot_count: int, slot_id: int) -> int:
    """``devshardAssignedUpperBoundForSlot`` (devshard_settlement.go:58-74): how many of the
    nonces ``1..latest_nonce`` map to ``slot_id``."""
    if slot_count == 0:
        raise ValueError("slot count cannot be zero")
    if slot_id >= slot_count:
        raise ValueError(f"slot {slot_id} out of range for slot count {slot_count}")
    first = slot_count if slot_id == 0 else slot_id
    if latest_nonce < first:
        return 0
    return 1 + (latest_nonce - first) // slot_count
