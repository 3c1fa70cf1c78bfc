"""The one health-policy interface the keeper uses.

Order of use, in one place (keepersim.keeper.selection): health gate -> exclusion cap / panic ->
weight factor -> weighted draw. A policy writes its state only from outcome handlers and the
end-block / epoch hooks (never from a query); it reads heights, never clocks; integers only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar, Generic, NamedTuple, Protocol, TypeVar

from google.protobuf.message import Message

from keepersim.store.buffer import KVStore
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.events import Event, HealthTransition, Outcome
from keepersim.types.messages import Inference, Params, Participant
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams

NEVER = (1 << 63) - 1
M = TypeVar("M", bound=Message)


T = TypeVar("T")


class Health(NamedTuple):
    """A policy's read-only verdict on one participant at one height.

    A named tuple, not a frozen dataclass: as immutable, and built several times faster (the
    chain asks for verdicts on every change). Equality is the verdict's: it ignores
    ``valid_until`` and ``then``.
    """

    admitted: bool
    # Selection weight is multiplied by factor_num / factor_den (integers).
    factor_num: int = 1
    factor_den: int = 1
    # Larger is more degraded: the exclusion cap keeps the most degraded out first.
    severity: int = 0
    # Last height at which this verdict holds if nothing about the participant changes.
    # Not part of the verdict: two verdicts differing only here select identically.
    valid_until: int = NEVER
    state: str = "healthy"
    # The verdict from valid_until + 1 on if nothing about the participant changes, computed
    # when the chain asks (None: ask get_health). Not part of the verdict either.
    then: Callable[[], Health] | None = None

    def get_verdict_key(self) -> tuple[bool, int, int, int, str]:
        return self[0], self[1], self[2], self[3], self[5]

    def is_same_verdict(self, other: Health) -> bool:
        """Selects identically: everything but valid_until and then is equal."""
        # Field by field, the factor first (what moves most often): no slices to allocate.
        return (
            self[1] == other[1]
            and self[0] == other[0]
            and self[2] == other[2]
            and self[3] == other[3]
            and self[5] == other[5]
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Health):
            return NotImplemented
        return self.is_same_verdict(other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.get_verdict_key())


# What a verdict says comes after it (Health.then).
Then = Callable[[], Health] | None

ADMITTED = Health(True)


class HeightQueue:
    """A policy's height-keyed wake-ups: one key per height listing what is due then.

    Scheduled items collect in memory and reach the store once per height in flush(); pop_due
    takes everything due by now, stored or still in memory.
    """

    __slots__ = ("_store", "_prefix", "_height", "_pending")

    def __init__(self, store: KVStore, prefix: bytes, height: int) -> None:
        self._store = store
        self._prefix = prefix
        self._height = height
        self._pending: dict[int, set[str]] = {}

    def schedule(self, height: int, item: str) -> None:
        """Due at ``height``; a height already past is due at the next pop."""
        self._pending.setdefault(max(height, self._height), set()).add(item)

    def pop_due(self, height: int | None = None) -> list[str]:
        """Items due at a height <= ``height`` (default: now), distinct and sorted; removed from
        the queue."""
        now = self._height if height is None else height
        items = self._pop_stored(now)
        for due in [h for h in self._pending if h <= now]:
            items.update(self._pending.pop(due))
        return sorted(items)

    def _pop_stored(self, now: int) -> set[str]:
        """The stored items due by ``now``, their keys deleted."""
        store = self._store
        items: set[str] = set()
        stop = self._prefix + keys.height_key(now + 1)
        for key, raw in list(store.iterate(self._prefix, stop)):
            store.delete(key)
            items.update(keys.decode_address_set(raw))
        return items

    def flush(self) -> None:
        """Write the block's wake-ups, one key per height."""
        if not self._pending:
            return
        store = self._store
        for height in sorted(self._pending):
            key = self._prefix + keys.height_key(height)
            items = self._pending[height]
            raw = store.get(key)
            if raw is not None:
                items = items.union(keys.decode_address_set(raw))
            store.set(key, keys.encode_address_set(items))
        self._pending.clear()

    def clear(self) -> None:
        for key, _ in list(self._store.iterate(self._prefix, prefix_end(self._prefix))):
            self._store.delete(key)
        self._pending.clear()


def get_height_records(store: KVStore, prefix: bytes) -> list[tuple[int, bytes]]:
    """(height, value) of every height key under ``prefix`` (a policy's queue or log),
    ascending by height."""
    n = len(prefix)
    return [
        (keys.decode_height_key(key[n:]), raw)
        for key, raw in store.iterate(prefix, prefix_end(prefix))
    ]


class KeeperReads(Protocol):
    """What the stores below take from the keeper they are opened over (a structural type:
    policies never import the keeper, nor hold it)."""

    @property
    def store(self) -> KVStore: ...

    @property
    def params_changed(self) -> bool: ...

    def get_params(self) -> Params: ...

    def get_extension_params(self) -> ExtensionParams: ...

    def get_participant(self, address: str) -> Participant | None: ...

    def get_inference(self, inference_id: str) -> Inference | None: ...

    def get_timeouts_due(self, height: int) -> list[tuple[bytes, str]]: ...

    def iterate_participants(self) -> Iterator[Participant]: ...

    def emit(self, event: Event) -> None: ...


class ChainView:
    """The chain as a policy may see it beside its own state: read-only, and only what the
    policies read today (a participant, an inference, the inferences timing out at a height)."""

    __slots__ = ("_keeper",)

    def __init__(self, keeper: KeeperReads) -> None:
        self._keeper = keeper

    def get_participant(self, address: str) -> Participant | None:
        """The participant record (None: unknown). The block's own object: read it only."""
        return self._keeper.get_participant(address)

    def get_inference(self, inference_id: str) -> Inference | None:
        return self._keeper.get_inference(inference_id)

    def get_timeouts_due(self, height: int) -> list[str]:
        """Ids of the inferences whose expiry is exactly ``height``, in key order."""
        return [inference_id for _, inference_id in self._keeper.get_timeouts_due(height)]

    def get_participant_addresses(self) -> list[str]:
        """Every participant's address, in order."""
        return [p.address for p in self._keeper.iterate_participants()]

    def is_params_changed(self) -> bool:
        """Whether new params took effect in this block (a rule may judge everyone again)."""
        return self._keeper.params_changed


class PolicyStore:
    """All a rule touches while a block is processed, and no more: its entries (``get``,
    ``find``, ``set``, ``delete``, ``iterate``, ``clear_all``), its wake-ups (``schedule``,
    ``pop_due``, ``schedule_item``, ``pop_due_items``), its log (``set_log``, ``delete_log``,
    ``get_log_records``), its events (``emit_transition``), the block's ``height``, ``params``
    and ``expiration_blocks``, a read-only view of the chain (``chain``), and ``block``: the
    rule's own scratch state of this block (in memory, empty at the block's start; e.g. what
    its end block must look at).

    An entry is read once per block (``get`` / ``find``: the block's own object, to change
    freely) and, once ``set``, written when the block ends; a change without ``set`` is lost
    (the tests catch one). The chain's side (writing the block's entries, the speed-ups a rule
    never sees) is keepersim.keeper.acceleration's ChainPolicyStore.
    """

    __slots__ = (
        "chain",
        "block",
        "params",
        "expiration_blocks",
        "height",
        "_store",
        "_emit",
        "_name",
        "_state",
        "_entries",
        "_absent",
        "_dirty",
        "_queue",
        "_items",
        "_prefix",
        "_log",
    )

    @staticmethod
    def _open_queue(store: KVStore, prefix: bytes, height: int) -> HeightQueue:
        """A wake-up queue of the block (the chain's store opens them with their speed-up)."""
        return HeightQueue(store, prefix, height)

    def __init__(self, keeper: KeeperReads, policy: HealthPolicy, height: int) -> None:
        self.chain = ChainView(keeper)
        self.block: dict[str, object] = {}
        # A policy reads keepersim's extension params, and of the chain's only the expiry.
        self.params: ExtensionParams = keeper.get_extension_params()
        self.expiration_blocks: int = keeper.get_params().validation_params.expiration_blocks
        self.height = height
        store = self._store = keeper.store
        self._emit = keeper.emit
        self._name = policy.name
        self._state = keys.POLICY_STATE + policy.prefix
        self._log = keys.POLICY_LOG + policy.prefix
        self._entries: dict[str, Message] = {}
        # Addresses found to have no entry in this block: asked again, they cost no store read
        # (only this PolicyStore writes the policy's entries while a block is processed).
        self._absent: set[str] = set()
        self._dirty: set[str] = set()
        self._prefix = policy.prefix
        self._queue = self._open_queue(store, keys.POLICY_QUEUE + policy.prefix, height)
        # Opened when first used: most policies never schedule an item.
        self._items: HeightQueue | None = None

    # -- entries -----------------------------------------------------------------------------
    def get(self, address: str, decode: Callable[[bytes | None, str], M]) -> M:
        """The entry of ``address`` (``decode(None, address)``, a new one, when it has none)."""
        entry = self.find(address, decode)
        if entry is None:
            entry = self._entries[address] = decode(None, address)
        return entry

    def find(self, address: str, decode: Callable[[bytes | None, str], M]) -> M | None:
        """The entry of ``address``, or None when it has none."""
        entry = self._entries.get(address)
        if entry is None:
            if address in self._absent:
                return None
            entry = self._store.take_message(
                self._state + address.encode(), lambda raw: decode(raw, address)
            )
            if entry is None:
                self._absent.add(address)
                return None
            self._entries[address] = entry
        return entry  # type: ignore[return-value]

    def set(self, address: str, entry: Message) -> None:
        """``entry`` is the entry of ``address`` now; written when the block ends."""
        self._entries[address] = entry
        self._dirty.add(address)

    def delete(self, address: str) -> None:
        self._entries.pop(address, None)
        self._dirty.discard(address)
        self._absent.add(address)
        self._store.delete(self._state + address.encode())

    def iterate(self, decode: Callable[[bytes | None, str], M]) -> list[tuple[str, M]]:
        """Every entry, in address order."""
        self._write_entries()
        n = len(self._state)
        stop = prefix_end(self._state)
        return [
            (key[n:].decode(), self.find(key[n:].decode(), decode))  # type: ignore[misc]
            for key, _ in list(self._store.iterate(self._state, stop))
        ]

    def clear_all(self) -> list[str]:
        """Delete every entry, wake-up and log record; return the addresses that had entries
        (a rule's reset, e.g. gonka's ClearAllCBState at the epoch boundary)."""
        self._write_entries()
        n = len(self._state)
        stop = prefix_end(self._state)
        addresses = [key[n:].decode() for key, _ in self._store.iterate(self._state, stop)]
        for address in addresses:
            self.delete(address)
        self._entries.clear()  # entries decoded but never stored go too
        self._queue.clear()
        self._get_items().clear()
        for height, _ in self.get_log_records():
            self.delete_log(height)
        return addresses

    def _write_entries(self) -> None:
        """Write the entries set so far (before a read that goes to the store: iterate)."""
        if not self._dirty:
            return
        store = self._store
        for address in sorted(self._dirty):
            store.set_message(self._state + address.encode(), self._entries[address])
        self._dirty.clear()

    # -- wake-ups ----------------------------------------------------------------------------
    def schedule(self, height: int, address: str) -> None:
        """Wake this policy for ``address`` in the end block of ``height`` (a past height: the
        next end block)."""
        self._queue.schedule(height, address)

    def pop_due(self, height: int | None = None) -> list[str]:
        """Addresses due by ``height`` (default: now), distinct and sorted; removed from the
        queue. A height other than now is for the low-level APIs that mirror upstream's keeper
        calls with explicit heights (gonka_api, consecutive_api); it must not be below now."""
        return self._queue.pop_due(height)

    def schedule_item(self, height: int, item: str) -> None:
        """Like schedule, for an item of the policy's own choosing (e.g. an inference id)."""
        self._get_items().schedule(height, item)

    def pop_due_items(self) -> list[str]:
        return self._get_items().pop_due()

    def _get_items(self) -> HeightQueue:
        items = self._items
        if items is None:
            prefix = keys.POLICY_ITEMS + self._prefix
            items = self._items = self._open_queue(self._store, prefix, self.height)
        return items

    # -- the log: one record per height the policy chooses, kept until it deletes it ---------
    def set_log(self, height: int, message: Message) -> None:
        self._store.set_message(self._log + keys.height_key(height), message)

    def delete_log(self, height: int) -> None:
        self._store.delete(self._log + keys.height_key(height))

    def get_log_records(self) -> list[tuple[int, bytes]]:
        """Every log record as this block has it, ascending by height."""
        return get_height_records(self._store, self._log)

    # -- events ------------------------------------------------------------------------------
    def emit_transition(self, address: str, from_state: str, to_state: str, reason: str) -> None:
        self._emit(HealthTransition(self.height, self._name, address, from_state, to_state, reason))


class PolicyReader:
    """Read access for health verdicts at query time (a read-only store underneath): the
    policy's entries (``get_raw``) and log, the params, and the same read-only ``chain`` view.
    What a policy's index derives once per reader (one reader serves a whole table's verdicts)
    is kept beside it by the acceleration layer (policy_store.get_memo)."""

    __slots__ = ("chain", "params", "expiration_blocks", "_memo", "_store", "_state", "_log")

    def __init__(self, keeper: KeeperReads, policy: HealthPolicy) -> None:
        self.chain = ChainView(keeper)
        self.params: ExtensionParams = keeper.get_extension_params()
        self.expiration_blocks: int = keeper.get_params().validation_params.expiration_blocks
        self._store = keeper.store
        self._state = keys.POLICY_STATE + policy.prefix
        self._log = keys.POLICY_LOG + policy.prefix
        self._memo: dict[str, object] = {}

    def get_raw(self, address: str) -> bytes | None:
        return self._store.get(self._state + address.encode())

    def get_log_records(self) -> list[tuple[int, bytes]]:
        """Every log record of the policy, ascending by height."""
        return get_height_records(self._store, self._log)


class ParamsView(Generic[T]):
    """What a policy derives from the params, derived once per params object: the chain
    replaces its params on a change and never edits them, so the same object gives the same."""

    __slots__ = ("_derive", "_last")

    def __init__(self, derive: Callable[[ExtensionParams], T]) -> None:
        self._derive = derive
        # The last params object and its view, swapped as one tuple: a query thread reading
        # while a block derives new ones sees a matching pair (holding the object keeps its id
        # from being reused).
        self._last: tuple[ExtensionParams, T] | None = None

    def get(self, params: ExtensionParams) -> T:
        last = self._last
        if last is not None and last[0] is params:
            return last[1]
        view = self._derive(params)
        self._last = (params, view)
        return view


R = TypeVar("R")


class PolicyLog(Generic[R]):
    """A policy's log in memory: its records by height, ascending (the stored ones and this
    block's). A policy's index of its log extends it with what it derives from the records."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[int, R] = {}

    def add_stored(self, height: int, record: R) -> None:
        """A record as read from the store (in ascending height order)."""
        self.records[height] = record

    def get_record(self, height: int, new: Callable[[], R]) -> R:
        """The record of ``height``; a ``new()`` one, in height order, if it has none."""
        record = self.records.get(height)
        if record is None:
            newest = next(reversed(self.records), height)
            record = self.records[height] = new()
            if newest > height:  # a record above this height: only an import makes one
                self.records = dict(sorted(self.records.items()))
        return record

    def process_write(self, ctx: PolicyStore, height: int, message: Message) -> None:
        """Store the record of ``height`` as ``message``."""
        ctx.set_log(height, message)

    def pop_oldest(self, ctx: PolicyStore, oldest: int) -> tuple[int, R] | None:
        """Remove the oldest record, from the store too, if its height is ``oldest`` or below;
        return it."""
        height = next(iter(self.records), None)
        if height is None or height > oldest:
            return None
        ctx.delete_log(height)
        return height, self.records.pop(height)


class HealthPolicy:
    """Base: no gate, no state. Subclasses override what they need."""

    name: ClassVar[str] = "none"
    prefix: ClassVar[bytes] = b"\x00"
    # Whether get_health reads participant records (then any write to one may change a verdict;
    # otherwise only the policy's own writes can).
    verdict_reads_participants: ClassVar[bool] = False

    def process_start(self, ctx: PolicyStore, address: str, inference: Inference) -> None:
        """An inference was assigned to ``address`` in this block."""

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        """A result about ``address`` became known in this block."""

    def process_end_block(self, ctx: PolicyStore) -> None:
        """Once per block, after expiries."""

    def process_epoch_boundary(self, ctx: PolicyStore) -> None:
        """At epoch settlement, before summaries are written and stats reset."""

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        return ADMITTED

    def get_wakeup(self, raw: bytes) -> int | None:
        """The height whose end block must look at this stored entry (None: none), for entries
        written without their queue key (a genesis import): see process_missing_wakeups."""
        return None

    def get_exclusion_cap_pct(self, params: ExtensionParams) -> int:
        """Most share of candidate weight this policy may keep out (100 = no cap)."""
        return 100

    def get_panic_pct(self, params: ExtensionParams) -> int:
        """Admit everyone when the admitted weight share falls below this (0 = never)."""
        return 0

    def is_fallback_allowed(self, params: ExtensionParams) -> bool:
        """When the gate leaves nobody: True -> the unfiltered list (Gonka); False -> an error."""
        return True

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        """A JSON-able view of the participant's policy state, for queries and metrics."""
        health = self.get_health(reader, address, height)
        return {"state": health.state, "admitted": health.admitted}


def process_missing_wakeups(store: KVStore, policy: HealthPolicy, height: int) -> None:
    """Queue the wake-up of every stored entry of ``policy`` whose queue key at its wake-up
    height does not list it yet (a past height: the next end block). An import writes entries
    and queue keys verbatim, so an entry imported without its key would never wake up; one
    imported with it changes nothing (the round trip keeps its app hash)."""
    state = keys.POLICY_STATE + policy.prefix
    queue_prefix = keys.POLICY_QUEUE + policy.prefix
    queue = HeightQueue(store, queue_prefix, height)
    n = len(state)
    for key, raw in list(store.iterate(state, prefix_end(state))):
        wakeup = policy.get_wakeup(raw)
        if wakeup is None:
            continue
        address = key[n:].decode()
        listed = store.get(queue_prefix + keys.height_key(wakeup))
        if listed is None or address not in keys.decode_address_set(listed):
            queue.schedule(wakeup, address)
    queue.flush()
