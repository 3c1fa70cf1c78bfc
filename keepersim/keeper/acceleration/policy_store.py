"""The chain's side of a policy's store, and the calls a policy's own index makes on it.

A rule sees a PolicyStore (keepersim.keeper.policies.base). The chain opens a ChainPolicyStore,
which is one, plus what only the chain does with it: write the block's entries (``flush``,
``write_entries``), check the entries the tests say must be unchanged (``verify_unchanged``),
tell the chain's verdict memo who was written (keepersim.keeper.acceleration.hints), and hand a
policy's derived data (``memo``) from one block to the next through the state cache.

The functions below are for a policy's index (``<policy>_index.py``) only. Each has a plain
form, taken when the store is not a ChainPolicyStore or ``ChainPolicyStore.hints_enabled`` is
off (tests/policies/test_acceleration.py runs the policies both ways: the same app hashes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from google.protobuf.message import Message

from keepersim.keeper.acceleration.hints import BlockHints
from keepersim.keeper.acceleration.queue_index import IndexedHeightQueue
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import (
    Health,
    HealthPolicy,
    HeightQueue,
    PolicyReader,
    PolicyStore,
)
from keepersim.store.buffer import BlockBuffer, KVStore
from keepersim.store.cache import StateCache

#: The keeper a ChainPolicyStore opens over (the policies' _api adapters name it from here).
StoreKeeper = Keeper

IndexT = TypeVar("IndexT")


class ChainPolicyStore(PolicyStore):
    """A PolicyStore opened by the chain over the block's keeper (see the module docstring)."""

    __slots__ = ("hints", "memo", "_buffer", "_keeper")

    #: Off: every function below takes its plain form (tests compare the two).
    hints_enabled: ClassVar[bool] = True

    @staticmethod
    def _open_queue(store: KVStore, prefix: bytes, height: int) -> HeightQueue:
        """The block's wake-up queues skip the store when nothing stored is due (queue_index)."""
        if ChainPolicyStore.hints_enabled and isinstance(store, BlockBuffer):
            return IndexedHeightQueue(store, prefix, height)
        return HeightQueue(store, prefix, height)

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        super().__init__(keeper, policy, height)
        self.hints: BlockHints = keeper.hints
        self._keeper = keeper
        store = keeper.store
        self._buffer = store if isinstance(store, BlockBuffer) else None
        # What a policy derives from its state (an index of its log), handed to the next block
        # by the state cache; a policy must decide the same without it (the tests forget it).
        memo = None if self._buffer is None else self._buffer.take_memo(self._state)
        if not self.hints_enabled:
            memo = None  # the plain form: nothing handed on, as after a restart
        self.memo: dict[str, object] = memo if isinstance(memo, dict) else {}

    # -- the hints beside a rule's writes -------------------------------------------------------
    def set(self, address: str, entry: Message) -> None:
        super().set(address, entry)
        self.hints.mark(address)

    def set_keeping_verdict(self, address: str, entry: Message) -> None:
        """set, for a change that cannot alter the participant's verdict: the chain need not
        ask for it again."""
        super().set(address, entry)
        self.hints.mark(address, verdict=False)

    def delete(self, address: str) -> None:
        self.hints.verdicts.pop(address, None)
        super().delete(address)
        self.hints.mark(address)

    def clear_all(self) -> list[str]:
        addresses = super().clear_all()
        self.memo.clear()
        self.hints.verdicts.clear()
        return addresses

    # -- the chain's -------------------------------------------------------------------------
    def write_entries(self) -> None:
        """Write the entries set so far (flush does; the upstream-shaped keeper APIs, whose
        reads go through the store at once, too)."""
        self._write_entries()

    def flush(self) -> None:
        """Write the block's changed entries and its new wake-ups (the end of the end block),
        and hand the memo on."""
        if StateCache.verify_objects:
            self.verify_unchanged()
        self._write_entries()
        self._queue.flush()
        if self._items is not None:
            self._items.flush()
        if self._buffer is not None:
            self._buffer.give_memo(self._state, self.memo)

    def verify_unchanged(self) -> None:
        """Tests: every entry read but not set still encodes to its stored bytes (a change
        without set would be lost, or kept only while the cache held the object)."""
        store, buffer = self._store, self._buffer
        gas = 0 if buffer is None else buffer.gas  # a test's check: no gas
        for address, entry in self._entries.items():
            if address in self._dirty:
                continue
            stored = store.get(self._state + address.encode())
            if stored is not None and entry.SerializeToString() != stored:
                raise AssertionError(f"{self._name}: the entry of {address!r} changed without set")
        if buffer is not None:
            buffer.gas = gas

    def get_block_keeper(self) -> Keeper:
        """The keeper this store was opened over (the chain's and the tests'; a rule sees a
        PolicyStore, which has none)."""
        return self._keeper

    def get_reader(self, policy: HealthPolicy) -> PolicyReader:
        """A reader over what this block has written so far."""
        self._write_entries()
        return PolicyReader(self._keeper, policy)


def get_accelerated(ctx: PolicyStore) -> ChainPolicyStore | None:
    """The chain's store behind ``ctx`` when its hints are on; None: take the plain form."""
    if isinstance(ctx, ChainPolicyStore) and ChainPolicyStore.hints_enabled:
        return ctx
    return None


# -- for a policy's index ----------------------------------------------------------------------
def hand_verdict(ctx: PolicyStore, address: str, health: Health) -> None:
    """``health`` is what get_health will say of ``address`` at this height once the block is
    committed, handed to the chain so it need not ask. A later write of the participant in this
    block must hand it again or delete it. Plain form: the chain is told only that the
    verdict may have moved, and asks (a policy that writes no entry for ``address``, such as
    trin-additive, tells the chain this way)."""
    if not isinstance(ctx, ChainPolicyStore):
        return
    if ChainPolicyStore.hints_enabled:
        ctx.hints.verdicts[address] = health
    else:
        ctx.hints.mark(address)


def set_keeping_verdict(ctx: PolicyStore, address: str, entry: Message) -> None:
    """ctx.set, for a change that cannot alter the verdict. Plain form: ctx.set."""
    fast = get_accelerated(ctx)
    if fast is None:
        ctx.set(address, entry)
    else:
        fast.set_keeping_verdict(address, entry)


def touch_all_verdicts(ctx: PolicyStore) -> None:
    """Every participant's verdict may have changed (a fleet-wide input moved): the chain drops
    its selection memo after the block, as for new params, and asks for each verdict again.
    Needed in the plain form too when the verdicts were handed (it is always applied)."""
    if isinstance(ctx, ChainPolicyStore):
        ctx.hints.verdicts_reset = True
        ctx.hints.verdicts.clear()


def get_memo(holder: PolicyStore | PolicyReader) -> dict[str, object]:
    """A block's store: the memo handed on from the block below (empty after a restart; plain
    form: the block's own, empty at its start, for ChainPolicyStore takes none when its hints
    are off; a store the chain did not open has none: a fresh one per call). A reader: what
    is derived once for all the verdicts it serves."""
    if isinstance(holder, PolicyReader):
        return holder._memo
    return holder.memo if isinstance(holder, ChainPolicyStore) else {}


def get_log_index(
    holder: PolicyStore | PolicyReader,
    key: str,
    kind: type[IndexT],
    build: Callable[[list[tuple[int, bytes]]], IndexT],
) -> IndexT:
    """A policy's index of its log, kept in the memo under ``key`` (a block's is handed on
    between blocks, a reader's serves a whole table), built from the records when the memo has
    none."""
    memo = get_memo(holder)
    index = memo.get(key)
    if not isinstance(index, kind):
        store = holder._store
        buffer = store if isinstance(store, BlockBuffer) else None
        # Gas: a memo a restart loses must not change a block's gas, so the reads that build
        # it are charged to no one (docs/metrics.md, "Gas": a lower bound for these policies).
        gas = 0 if buffer is None else buffer.gas
        index = build(holder.get_log_records())
        if buffer is not None:
            buffer.gas = gas
        memo[key] = index
    return index


def get_touched(ctx: PolicyStore) -> list[str] | None:
    """Sorted addresses written in this block (participant records or policy state). None:
    the plain form, which looks at every participant."""
    fast = get_accelerated(ctx)
    return None if fast is None else sorted(fast.hints.touched)


def set_with_hint(ctx: PolicyStore, address: str, entry: Message, verdict_moved: bool) -> None:
    """ctx.set, telling the chain whether the change may move the verdict."""
    if verdict_moved:
        ctx.set(address, entry)
    else:
        set_keeping_verdict(ctx, address, entry)
