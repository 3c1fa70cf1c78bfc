"""Escrow slot sampling: ``calculations/slots.go`` at gonka ee730031, bit for bit.

``MsgCreateDevshardEscrow`` (``keeper/msg_server_create_devshard_escrow.go:49-78``) samples
``group_size`` slots (16 by default, ``types/params.go:102``) from the model's epoch group by
``ValidationWeights``, with no health filter: the seed is the block header's app hash (lowercase
hex, line 58), ``"devshard_escrow:<next id>"`` and the model id. Each slot ``i`` draws
``sha256(app_hash + seed + model + str(i))[:8]`` as a big-endian uint64 modulo the total weight
(``slotRandomVal``, slots.go:140-145) and lands on the entry whose cumulative weight first
exceeds it, entries sorted by address (slots.go:23-50). Integer arithmetic throughout; no
``math/rand``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

UPSTREAM = "gonka ee730031 inference-chain/x/inference/calculations/slots.go"
ESCROW_SEED_PREFIX = "devshard_escrow:"  # msg_server_create_devshard_escrow.go:73


@dataclass(frozen=True)
class WeightEntry:
    """``calculations.WeightEntry`` (slots.go:11-14)."""

    address: str
    weight: int


def compute_sorted_entries(weights: Mapping[str, int]) -> tuple[list[WeightEntry], int]:
    """``PrepareSortedEntries`` (slots.go:21-50): entries with a positive weight, sorted by
    address, and their total; ``([], 0)`` when none is positive (upstream's ``nil, 0``).

    Go sorts strings by bytes; Python by code point: the same order for valid UTF-8.
    """
    entries = [WeightEntry(a, weights[a]) for a in sorted(weights) if weights[a] > 0]
    total = sum(e.weight for e in entries)
    if total == 0 or not entries:
        return [], 0
    return entries, total


def compute_slot_random(
    app_hash: str, participant: str, model_id: str, slot_idx: int, total_weight: int
) -> int:
    """``slotRandomVal`` (slots.go:140-145): ``fmt.Sprintf("%s%s%s%d")`` hashed with sha256,
    its first 8 bytes big-endian, modulo the total weight (Go's uint64 modulo)."""
    seed = f"{app_hash}{participant}{model_id}{slot_idx}".encode()
    head = int.from_bytes(hashlib.sha256(seed).digest()[:8], "big")
    return head % total_weight


def compute_slots_from_sorted(
    app_hash: str,
    participant: str,
    model_id: str,
    entries: Sequence[WeightEntry],
    total_weight: int,
    n_slots: int,
) -> list[str]:
    """``GetSlotsFromSorted`` (slots.go:52-90): ``n_slots`` addresses, slot ``i`` the entry
    its random value falls into. ``[]`` for no slot or no weight (upstream's ``nil``).

    Upstream sorts the draws with ``slices.SortFunc`` (not stable); draws that tie land on the
    same entry, so the order among ties never shows in the result and a stable sort is exact.
    """
    if n_slots == 0 or total_weight <= 0:
        return []
    randoms = sorted(
        (compute_slot_random(app_hash, participant, model_id, i, total_weight), i)
        for i in range(n_slots)
    )
    result = [""] * n_slots
    cumulative = 0
    k = 0
    for entry in entries:
        cumulative += entry.weight
        while k < n_slots and randoms[k][0] < cumulative:
            result[randoms[k][1]] = entry.address
            k += 1
    return result


def get_slot_from_sorted(
    app_hash: str,
    participant: str,
    model_id: str,
    entries: Sequence[WeightEntry],
    total_weight: int,
    slot_idx: int,
) -> str:
    """``GetSlotFromSorted`` (slots.go:92-116): one slot by index."""
    if not entries or total_weight <= 0:
        return ""
    value = compute_slot_random(app_hash, participant, model_id, slot_idx, total_weight)
    cumulative = 0
    for entry in entries:
        cumulative += entry.weight
        if value < cumulative:
            return entry.address
    return entries[-1].address


def compute_sampled_slot_count(
    model_voting_power: int, total_network_weight: int, n_slots: int
) -> int:
    """``ComputeSampledSlotCount`` (slots.go:118-138): slots a model-local set samples, rounded
    down (the remainder abstains)."""
    if n_slots <= 0 or model_voting_power <= 0 or total_network_weight <= 0:
        return 0
    if model_voting_power >= total_network_weight:
        return n_slots
    group_slots = model_voting_power * n_slots // total_network_weight
    return max(0, min(group_slots, n_slots))


def compute_escrow_slots(
    app_hash: bytes,
    escrow_id: int,
    model_id: str,
    validation_weights: Iterable[tuple[str, int]],
    group_size: int,
) -> list[str]:
    """The slots ``MsgCreateDevshardEscrow`` stores for escrow ``escrow_id`` (the counter + 1)
    created in a block whose header carries ``app_hash`` (the state after the previous block):
    msg_server_create_devshard_escrow.go:49-78. ``validation_weights`` are the model group's
    ``(member_address, weight)`` pairs in stored order (a repeated member: the last one counts,
    as upstream's map assignment). Upstream rejects a group without positive weight; here that
    is ``[]``.
    """
    weights: dict[str, int] = {}
    for address, weight in validation_weights:
        weights[address] = weight
    entries, total = compute_sorted_entries(weights)
    return compute_slots_from_sorted(
        app_hash.hex(), f"{ESCROW_SEED_PREFIX}{escrow_id}", model_id, entries, total, group_size
    )
