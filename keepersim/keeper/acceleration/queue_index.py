"""A policy's wake-up queue that knows at which heights its store holds keys.

A policy pops its due wake-ups in every end block, and in most blocks none is due: the plain
HeightQueue (keepersim.keeper.policies.base) still iterates the store's range up to now to find
that out. IndexedHeightQueue keeps the heights of its stored keys (a superset: every height it
wrote, until popped or cleared) and skips the store when none is due, charging the gas of the
empty iteration it leaves out (keepersim/store/gas.py: one ``IterNextCostFlat``), so a block's
gas is the same either way.

The heights are a memo of the block buffer, under the queue's key prefix: one object for every
queue over that prefix in the block, handed to the next block by the commit (through the state
cache), lost with a failed or rebuilt block and after a restart, and then read again from the
store (charged to no one: a memo must not change a block's gas). Only a HeightQueue writes a
queue's keys while blocks run, and a rejected message that reached the policy has its block
built again (keepersim.keeper.context), so the store never holds a height the memo lacks.
tests/policies/test_queue_index.py runs every policy with it and with the plain queue: the same
app hashes, transitions and gas.
"""

from __future__ import annotations

from heapq import heappop, heappush

from keepersim.keeper.policies.base import HeightQueue, get_height_records
from keepersim.store.buffer import BlockBuffer
from keepersim.store.gas import compute_iteration_gas

_EMPTY_ITERATION_GAS = compute_iteration_gas([])


class StoredHeights:
    """The heights a queue's store may hold keys at: each once, the lowest first."""

    __slots__ = ("heap", "members")

    def __init__(self, heights: list[int]) -> None:
        self.members = set(heights)
        self.heap = sorted(self.members)

    def add(self, height: int) -> None:
        if height not in self.members:
            self.members.add(height)
            heappush(self.heap, height)

    def is_any_due(self, now: int) -> bool:
        heap = self.heap
        return bool(heap) and heap[0] <= now

    def remove_due(self, now: int) -> None:
        heap = self.heap
        while heap and heap[0] <= now:
            self.members.discard(heappop(heap))

    def clear(self) -> None:
        self.members.clear()
        self.heap.clear()


class IndexedHeightQueue(HeightQueue):
    """A HeightQueue over a block buffer that skips the store when no stored key is due (see
    the module docstring)."""

    __slots__ = ("_buffer",)

    def __init__(self, store: BlockBuffer, prefix: bytes, height: int) -> None:
        super().__init__(store, prefix, height)
        self._buffer = store

    def get_stored_heights(self) -> StoredHeights:
        """The block's memo of the heights this queue's store holds keys at."""
        buffer = self._buffer
        stored = buffer.get_memos().get(self._prefix)
        if not isinstance(stored, StoredHeights):
            stored = buffer.take_memo(self._prefix)
            if not isinstance(stored, StoredHeights):
                gas = buffer.gas
                stored = StoredHeights([h for h, _ in get_height_records(buffer, self._prefix)])
                buffer.gas = gas
            buffer.give_memo(self._prefix, stored)  # shared by the block, handed on by the commit
        return stored

    def _pop_stored(self, now: int) -> set[str]:
        stored = self.get_stored_heights()
        if stored.is_any_due(now):
            items = super()._pop_stored(now)
            stored.remove_due(now)
            return items
        self._buffer.gas += _EMPTY_ITERATION_GAS  # the plain queue's iteration, found empty
        return set()

    def flush(self) -> None:
        if self._pending:
            stored = self.get_stored_heights()
            for height in self._pending:
                stored.add(height)
        super().flush()

    def clear(self) -> None:
        super().clear()
        self.get_stored_heights().clear()
