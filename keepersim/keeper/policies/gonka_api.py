"""Upstream's circuit-breaker keeper functions, under their names, with explicit heights.

Mirrors the keeper of gonka-ai/gonka 6a468b08 (``inference-chain/x/inference/keeper/
circuit_breaker.go``: GetCBEntry, SetCBEntry, DeleteCBEntry, ClearAllCBState, ExcludeCBEntry,
PromoteCBEntryToProbe, GetAllCBEntries, UpdateCBStateForBlock, RecordCBResult) and its read-only
health filter (createHealthFilterFn), over keepersim's store. The rules are gonka.py's; this only
names them. Inside a block, wrap the block's policy context (the one the policy's hooks get);
alone, ``open`` makes a context of its own over a keeper, and ``flush`` writes its queued
wake-ups (entries are written at once). Heights must not be below the context's height.
"""

from __future__ import annotations

from collections.abc import Sequence

from keepersim.keeper.acceleration.policy_store import ChainPolicyStore, StoreKeeper
from keepersim.keeper.policies.gonka import (
    GonkaBreaker,
    decode_cb_entry,
    get_cb_entry,
    get_cb_health,
    process_cb_result,
    process_cb_state_for_block,
    process_clear_all,
    process_exclude,
    process_promote,
    process_set_cb_entry,
)
from keepersim.types.params import get_cb_settings
from keepersim.types.pb.keepersim.v1.health_pb2 import CircuitBreakerEntry


class GonkaCBKeeper:
    """The gonka breaker's keeper calls on one policy context (see the module docstring)."""

    __slots__ = ("ctx", "_policy")

    def __init__(self, ctx: ChainPolicyStore) -> None:
        self.ctx = ctx
        self._policy = GonkaBreaker()

    @classmethod
    def open(cls, keeper: StoreKeeper, height: int = 0) -> GonkaCBKeeper:
        """A keeper of its own over ``keeper``'s store, for calls at heights >= ``height``."""
        return cls(ChainPolicyStore(keeper, GonkaBreaker(), height))

    def flush(self) -> None:
        """Write the queued wake-ups (and hand the context's state on, as a block's flush)."""
        self.ctx.flush()

    def get_cb_entry(self, address: str) -> CircuitBreakerEntry:
        """GetCBEntry: HEALTHY with the initial cooldown when there is no entry."""
        ctx = self.ctx
        stored = ctx.find(address, decode_cb_entry)
        if stored is None:
            return get_cb_entry(None, address, get_cb_settings(ctx.params))
        entry = CircuitBreakerEntry()
        entry.CopyFrom(stored)  # a value, as upstream's getter returns: set_cb_entry writes it
        return entry

    def has_cb_entry(self, address: str) -> bool:
        return self.ctx.find(address, decode_cb_entry) is not None

    def set_cb_entry(self, entry: CircuitBreakerEntry) -> None:
        """SetCBEntry; an EXCLUDED entry is also queued for its cooldown end."""
        stored = CircuitBreakerEntry()
        stored.CopyFrom(entry)  # the caller's value stays the caller's
        process_set_cb_entry(self.ctx, stored)

    def delete_cb_entry(self, address: str) -> None:
        self.ctx.delete(address)

    def get_all_cb_entries(self) -> list[CircuitBreakerEntry]:
        """GetAllCBEntries, in address order."""
        return [self.get_cb_entry(address) for address, _ in self.ctx.iterate(decode_cb_entry)]

    def clear_all_cb_state(self) -> None:
        """ClearAllCBState (the epoch boundary's)."""
        process_clear_all(self.ctx)

    def exclude_cb_entry(self, height: int, address: str, re_exclusion: bool) -> None:
        """ExcludeCBEntry."""
        process_exclude(self.ctx, self.get_cb_entry(address), height, re_exclusion)

    def promote_cb_entry_to_probe(self, height: int, address: str) -> None:
        """PromoteCBEntryToProbe."""
        process_promote(self.ctx, self.get_cb_entry(address), height)

    def record_cb_result(self, height: int, address: str, success: bool) -> None:
        """RecordCBResult."""
        process_cb_result(self.ctx, address, height, success)

    def update_cb_state_for_block(self, height: int) -> None:
        """UpdateCBStateForBlock over every participant, as upstream's EndBlock pass."""
        everyone = self.ctx.chain.get_participant_addresses()
        process_cb_state_for_block(self.ctx, height, everyone)

    def filter_candidates(self, height: int, addresses: Sequence[str]) -> list[str]:
        """createHealthFilterFn at ``height`` over ``addresses``: those the filter admits, in
        their order, or all of them when it admits none (upstream's safety fallback)."""
        reader = self.ctx.get_reader(self._policy)  # the store as written so far, as upstream's
        admitted = [a for a in addresses if get_cb_health(reader, a, height).admitted]
        return admitted if admitted else list(addresses)
