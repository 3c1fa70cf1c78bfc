"""The one health-policy interface the keeper uses.

Order of use, in one place (keepersim.keeper.selection): health gate -> exclusion cap / panic ->
weight factor -> weighted draw. A policy writes its state only from outcome handlers and the
end-block / epoch hooks (never from a query); it reads heights, never clocks; integers only.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from google.protobuf.message import Message

from keepersim.keeper.keeper import Keeper
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.events import HealthTransition, Outcome
from keepersim.types.pb.params_pb2 import Params

NEVER = (1 << 63) - 1
M = TypeVar("M", bound=Message)

# Per backend and queue prefix: the height of the last pop_due. Every pop deletes all wake-ups
# up to its height, so the next scan may start one height below it and seek past the deleted
# keys, which LevelDB would otherwise walk as tombstones on every block until a compaction.
# A hint only: a new backend object (a reopened chain) starts with a full scan.
_QUEUE_FLOORS: weakref.WeakKeyDictionary[object, dict[bytes, int]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Health:
    """A policy's read-only verdict on one participant at one height."""

    admitted: bool
    # Selection weight is multiplied by factor_num / factor_den (integers).
    factor_num: int = 1
    factor_den: int = 1
    # Larger is more degraded: the exclusion cap keeps the most degraded out first.
    severity: int = 0
    # Last height at which this verdict holds if nothing about the participant changes.
    # Not part of the verdict: two verdicts differing only here select identically.
    valid_until: int = field(default=NEVER, compare=False)
    state: str = "healthy"


ADMITTED = Health(True)


class PolicyContext:
    """What a policy may touch while a block is processed: its own store, its queue, params."""

    __slots__ = (
        "keeper",
        "params",
        "height",
        "recheck",
        "_state",
        "_queue",
        "_name",
        "_cache",
        "_dirty",
        "_wakeups",
    )

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        self.keeper = keeper
        self.params: Params = keeper.get_params()
        self.height = height
        self._name = policy.name
        self._state = keys.POLICY_STATE + policy.prefix
        self._queue = keys.POLICY_QUEUE + policy.prefix
        # Addresses the policy wants to look at again in this block's end block.
        self.recheck: set[str] = set()
        self._cache: dict[str, Message] = {}
        self._dirty: set[str] = set()
        self._wakeups: dict[int, set[str]] = {}

    # A block's decoded entries: a policy that touches an entry several times in a block (a
    # start, a result, the end-block gate) decodes it once and encodes it once, in flush() at
    # the end of the end block. Mixing these with get_raw/set_message on the same address in
    # one block is an error of the policy.
    def get_cached(self, address: str, decode: Callable[[bytes | None, str], M]) -> M:
        """The block's decoded entry of ``address`` (``decode(raw or None, address)`` once)."""
        entry = self._cache.get(address)
        if entry is None:
            entry = decode(self.get_raw(address), address)
            self._cache[address] = entry
        return entry  # type: ignore[return-value]

    def is_cached(self, address: str) -> bool:
        return address in self._cache

    def get_cached_if_stored(
        self, address: str, decode: Callable[[bytes | None, str], M]
    ) -> M | None:
        """Like get_cached, but None (and nothing cached) when ``address`` has no entry."""
        entry = self._cache.get(address)
        if entry is None:
            raw = self.get_raw(address)
            if raw is None:
                return None
            entry = self._cache[address] = decode(raw, address)
        return entry  # type: ignore[return-value]

    def mark_dirty(self, address: str, verdict: bool = True) -> None:
        """The cached entry changed: flush() writes it. ``verdict=False``: the change cannot
        alter the participant's health verdict, so the chain need not ask for it again."""
        self._dirty.add(address)
        self.keeper.touched.add(address)
        if verdict:
            self.keeper.verdict_touched.add(address)

    def flush(self) -> None:
        """Write the block's changed cached entries and its new wake-ups (end of end block)."""
        store = self.keeper.store
        for address in sorted(self._dirty):
            store.set(self._state + address.encode(), self._cache[address].SerializeToString())
        self._dirty.clear()
        for height in sorted(self._wakeups):
            key = self._queue + keys.queue_key(height)
            raw = store.get(key)
            addresses = self._wakeups[height]
            if raw is not None:
                addresses = addresses.union(keys.decode_address_set(raw))
            store.set(key, keys.encode_address_set(addresses))
        self._wakeups.clear()

    def get_raw(self, address: str) -> bytes | None:
        return self.keeper.store.get(self._state + address.encode())

    def set_message(self, address: str, message: Message) -> None:
        self.keeper.store.set(self._state + address.encode(), message.SerializeToString())
        self.keeper.touched.add(address)
        self.keeper.verdict_touched.add(address)

    def delete(self, address: str) -> None:
        self.keeper.store.delete(self._state + address.encode())
        self.keeper.touched.add(address)
        self.keeper.verdict_touched.add(address)

    def iterate_raw(self) -> Iterable[tuple[str, bytes]]:
        n = len(self._state)
        for key, raw in list(self.keeper.store.iterate(self._state, prefix_end(self._state))):
            yield key[n:].decode(), raw

    def clear_all(self) -> list[str]:
        """Delete every entry and queued wake-up; return the addresses that had entries."""
        addresses = [address for address, _ in self.iterate_raw()]
        for address in addresses:
            self.delete(address)
        for key, _ in list(self.keeper.store.iterate(self._queue, prefix_end(self._queue))):
            self.keeper.store.delete(key)
        self._wakeups.clear()
        return addresses

    def schedule(self, height: int, address: str) -> None:
        """Wake this policy for ``address`` in the end block of ``height`` (a height-keyed queue);
        a height already past wakes it at the next pop, as if scheduled for now. Collected in
        memory and written once per height by flush()."""
        self._wakeups.setdefault(max(height, self.height), set()).add(address)

    def pop_due(self) -> list[str]:
        """Addresses queued for a height <= now, deduplicated and sorted; their entries deleted."""
        store = self.keeper.store
        backend = getattr(store, "backend", None)
        floors = _QUEUE_FLOORS.setdefault(backend, {}) if backend is not None else {}
        last = floors.get(self._queue)
        # One height below the last pop: wake-ups scheduled at that height after its pop remain.
        start = self._queue if last is None else self._queue + keys.encode_u64(max(last - 1, 0))
        stop = self._queue + keys.encode_u64(self.height + 1)
        due = list(store.iterate(start, stop))
        addresses: set[str] = set()
        for key, raw in due:
            store.delete(key)
            addresses.update(keys.decode_address_set(raw))
        for height in [h for h in self._wakeups if h <= self.height]:
            addresses.update(self._wakeups.pop(height))
        if backend is not None:
            floors[self._queue] = self.height
        return sorted(addresses)

    def emit_transition(self, address: str, from_state: str, to_state: str, reason: str) -> None:
        self.keeper.emit(
            HealthTransition(self.height, self._name, address, from_state, to_state, reason)
        )


class PolicyReader:
    """Read access for health verdicts at query time (a read-only keeper underneath)."""

    __slots__ = ("keeper", "params", "_state")

    def __init__(self, keeper: Keeper, policy: HealthPolicy) -> None:
        self.keeper = keeper
        self.params: Params = keeper.get_params()
        self._state = keys.POLICY_STATE + policy.prefix

    def get_raw(self, address: str) -> bytes | None:
        return self.keeper.store.get(self._state + address.encode())


class HealthPolicy:
    """Base: no gate, no state. Subclasses override what they need."""

    name: ClassVar[str] = "none"
    prefix: ClassVar[bytes] = b"\x00"
    # Whether get_health reads participant records (then any write to one may change a verdict;
    # otherwise only the policy's own writes can).
    verdict_reads_participants: ClassVar[bool] = False

    def process_start(self, ctx: PolicyContext, address: str, inference_id: str) -> None:
        """An inference was assigned to ``address`` in this block."""

    def process_outcome(
        self, ctx: PolicyContext, address: str, outcome: Outcome, start_height: int
    ) -> None:
        """A result about ``address`` became known in this block."""

    def process_end_block(self, ctx: PolicyContext, touched: list[str]) -> None:
        """Once per block, after expiries; ``touched``: sorted addresses whose state changed."""

    def process_epoch_boundary(self, ctx: PolicyContext) -> None:
        """At epoch settlement, before summaries are written and stats reset."""

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        return ADMITTED

    def get_exclusion_cap_pct(self, params: Params) -> int:
        """Most share of candidate weight this policy may keep out (100 = no cap)."""
        return 100

    def get_panic_pct(self, params: Params) -> int:
        """Admit everyone when the admitted weight share falls below this (0 = never)."""
        return 0

    def is_fallback_allowed(self, params: Params) -> bool:
        """When the gate leaves nobody: True -> the unfiltered list (Gonka); False -> an error."""
        return True

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        """A JSON-able view of the participant's policy state, for queries and metrics."""
        health = self.get_health(reader, address, height)
        return {"state": health.state, "admitted": health.admitted}
