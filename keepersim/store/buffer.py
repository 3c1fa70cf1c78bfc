"""Per-block write buffer: keeper code reads and writes here; nothing reaches the backend
until CommitStore commits it, so a block that fails midway is dropped with ``discard()``.

A message runs in a nested scope of the block's buffer (``begin_nested``): its writes land in
the block's pending writes at once (the block's value of a key it overwrites is kept aside), so
merging on success costs nothing and ``discard_nested`` puts back exactly what the block held.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Protocol, TypeVar

from google.protobuf.message import Message

from keepersim.store.cache import StateCache
from keepersim.store.gas import (
    DELETE_COST,
    HAS_COST,
    READ_COST_FLAT,
    READ_COST_PER_BYTE,
    WRITE_COST_FLAT,
    WRITE_COST_PER_BYTE,
    iterate_metered,
)
from keepersim.store.kv import KVBackend

M = TypeVar("M", bound=Message)

RESERVED_PREFIX = b"\xff"
"""Keys starting with 0xff belong to the store (metadata); keeper code cannot write them."""


class KVStore(Protocol):
    """The read-write surface keeper code uses."""

    def get(self, key: bytes) -> bytes | None:
        """Value at ``key`` or None."""
        ...

    def has(self, key: bytes) -> bool:
        """Whether ``key`` holds a value."""
        ...

    def set(self, key: bytes, value: bytes) -> None:
        """Store ``value`` at ``key``."""
        ...

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (no error if absent)."""
        ...

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` in bytewise order (descending if ``reverse``)."""
        ...

    def take_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        """The entry at ``key`` decoded, the caller's to change (None: absent)."""
        ...

    def peek_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        """The entry at ``key`` decoded, to read only (None: absent)."""
        ...

    def set_message(self, key: bytes, message: Message) -> None:
        """Store ``message`` encoded at ``key``."""
        ...


_EMPTY: tuple[tuple[bytes, bytes], ...] = ()


class BlockBuffer:
    """KVStore over a KVBackend that holds writes in a dict until commit.

    ``_pending`` maps key -> value, or -> None as the tombstone of a delete. Keys are never
    removed from it before ``discard()`` (but by ``discard_nested``, which then resets the
    sorted list), so dict insertion order lets ``iterate`` keep a sorted key list up to date by
    sorting in only the keys added since its last call.

    The user keyspace is ``[b"", b"\\xff")``: reserved keys cannot be written or deleted and
    never show up in ``iterate``; ``get`` does not check (one compare fewer per read).

    ``gas``: the block's gas so far, every access charged by the SDK's KV schedule
    (keepersim/store/gas.py) as the keeper makes it, whether this buffer, the state cache or
    the backend answers: the buffer is the store a keeper sees, as the SDK's ``gaskv.Store``.
    """

    __slots__ = (
        "gas",
        "backend",
        "_cache",
        "_pending",
        "_sorted",
        "_objects",
        "_memos",
        "_mark",
        "_saved",
    )

    def __init__(self, backend: KVBackend) -> None:
        self.gas = 0
        self.backend = backend
        # Decoded objects and memos cross blocks through the state cache (none without it).
        self._cache = backend if isinstance(backend, StateCache) else None
        self._pending: dict[bytes, bytes | None] = {}
        self._sorted: list[bytes] = []
        # Messages written with set_message and the bytes they were written as: handed to the
        # cache with the commit where those bytes are still the block's last write of the key.
        self._objects: dict[bytes, tuple[Message, bytes]] = {}
        self._memos: dict[object, object] = {}
        # A nested scope: the number of pending keys when it began (-1: no scope), and the
        # block's values of the keys it overwrote. Keys it wrote first come after the mark
        # (dict order), so taking the scope back deletes those and restores the saved ones.
        self._mark = -1
        self._saved: dict[bytes, bytes | None] = {}

    def get(self, key: bytes) -> bytes | None:
        """Own pending write (or tombstone) first, else the backend."""
        pending = self._pending
        value = pending[key] if key in pending else self.backend.get(key)
        self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
            len(key) + (0 if value is None else len(value))
        )
        return value

    def take_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        """The entry at ``key`` decoded, the caller's to change and write back with
        set_message: the committed object from the cache, or this block's bytes decoded.
        Charged as a ``get`` of the stored bytes, the cache's object or not."""
        pending = self._pending
        if key in pending:
            raw = pending[key]
            self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
                len(key) + (0 if raw is None else len(raw))
            )
            return None if raw is None else decode(raw)
        cache = self._cache
        if cache is not None:
            obj, raw = cache.take_decoded(key, decode)
            self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
                len(key) + (0 if raw is None else len(raw))
            )
            return obj
        raw = self.backend.get(key)
        self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
            len(key) + (0 if raw is None else len(raw))
        )
        return None if raw is None else decode(raw)

    def peek_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        """The entry at ``key`` decoded, to read only (the cache's object is shared); charged
        as take_message."""
        pending = self._pending
        if key in pending:
            raw = pending[key]
            self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
                len(key) + (0 if raw is None else len(raw))
            )
            return None if raw is None else decode(raw)
        cache = self._cache
        if cache is not None:
            obj, raw = cache.peek_decoded(key, decode)
            self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
                len(key) + (0 if raw is None else len(raw))
            )
            return obj
        raw = self.backend.get(key)
        self.gas += READ_COST_FLAT + READ_COST_PER_BYTE * (
            len(key) + (0 if raw is None else len(raw))
        )
        return None if raw is None else decode(raw)

    def set_message(self, key: bytes, message: Message) -> None:
        """Store ``message`` encoded at ``key``; the commit hands the object to the cache, so
        the next block takes it without decoding. It must not change after its last write."""
        raw = message.SerializeToString()
        if key.__class__ is not bytes:  # set's checks and charge, without the call (hot path)
            raise TypeError(f"key must be bytes, got {type(key)}")
        if key >= RESERVED_PREFIX:
            raise ValueError(f"key {key!r} is in the reserved 0xff keyspace")
        self.gas += WRITE_COST_FLAT + WRITE_COST_PER_BYTE * (len(key) + len(raw))
        pending = self._pending
        if self._mark >= 0 and key in pending and key not in self._saved:
            self._saved[key] = pending[key]
        pending[key] = raw
        self._objects[key] = (message, raw)

    def get_written(self) -> dict[bytes, tuple[Message, bytes]]:
        """The messages written with set_message, each with the bytes it was written as (for
        the commit: the cache keeps those still their key's last write); not a copy."""
        return self._objects

    def give_memo(self, name: object, value: object) -> None:
        """Hand ``value`` to the next block under ``name`` if this block commits."""
        self._memos[name] = value

    def take_memo(self, name: object) -> object | None:
        """What the block below handed on under ``name`` (None: nothing, or no cache)."""
        return None if self._cache is None else self._cache.take_memo(name)

    def get_memos(self) -> dict[object, object]:
        return self._memos

    def has(self, key: bytes) -> bool:
        """Whether ``key`` holds a value, counting this block's writes."""
        self.gas += HAS_COST
        pending = self._pending
        if key in pending:
            return pending[key] is not None
        return self.backend.get(key) is not None

    def set(self, key: bytes, value: bytes) -> None:
        """Buffer a put. Rejects non-bytes (None would read as a tombstone) and reserved keys."""
        if key.__class__ is not bytes or value.__class__ is not bytes:
            raise TypeError(f"key and value must be bytes, got {type(key)}, {type(value)}")
        if key >= RESERVED_PREFIX:
            raise ValueError(f"key {key!r} is in the reserved 0xff keyspace")
        self.gas += WRITE_COST_FLAT + WRITE_COST_PER_BYTE * (len(key) + len(value))
        pending = self._pending
        if self._mark >= 0 and key in pending and key not in self._saved:
            self._saved[key] = pending[key]  # the block's value, before the scope wrote it
        pending[key] = value

    def delete(self, key: bytes) -> None:
        """Buffer a delete as a tombstone (also hides a value the backend has)."""
        if key.__class__ is not bytes:
            raise TypeError(f"key must be bytes, got {type(key)}")
        if key >= RESERVED_PREFIX:
            raise ValueError(f"key {key!r} is in the reserved 0xff keyspace")
        self.gas += DELETE_COST
        pending = self._pending
        if self._mark >= 0 and key in pending and key not in self._saved:
            self._saved[key] = pending[key]
        pending[key] = None

    def begin_nested(self) -> None:
        """Start a nested scope (one message): its writes can be taken back as a whole."""
        if self._mark >= 0:
            raise RuntimeError("a nested scope is already open")
        self._mark = len(self._pending)

    def merge_nested(self) -> None:
        """End the scope keeping its writes: they already are the block's."""
        self._mark = -1
        if self._saved:
            self._saved = {}

    def discard_nested(self) -> None:
        """End the scope taking back its writes: the block's pending writes are as before it."""
        mark, self._mark = self._mark, -1
        pending = self._pending
        saved, self._saved = self._saved, {}
        pending.update(saved)
        if len(pending) > mark:
            for key in list(islice(pending, mark, None)):  # first written in the scope
                del pending[key]
            if len(self._sorted) > mark:
                self._sorted = []  # it held keys that are gone: iterate sorts them in again

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Backend entries merged with pending writes, as of this call; charged as gaskv's
        iterator is (keepersim/store/gas.py: iterate_metered)."""
        return iterate_metered(self._iterate(start, stop, reverse), self)

    def _iterate(
        self, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Backend entries merged with pending writes, as of this call.

        The pending entries in range are copied now and the backend iterator reads a snapshot,
        so writing while iterating is safe and does not change what the iteration yields.
        With no pending writes in range the backend's own iterator is returned unwrapped.
        """
        if stop is None or stop > RESERVED_PREFIX:
            stop = RESERVED_PREFIX
        if start is not None and start >= stop:
            return iter(_EMPTY)
        pending = self._pending
        if not pending:
            return self.backend.iterate(start, stop, reverse)
        keys = self._sorted
        if len(keys) != len(pending):
            keys.extend(islice(pending, len(keys), None))
            keys.sort()
        lo = 0 if start is None else bisect_left(keys, start)
        hi = bisect_left(keys, stop)
        if lo >= hi:
            return self.backend.iterate(start, stop, reverse)
        overlay = [(key, pending[key]) for key in keys[lo:hi]]
        base = self.backend.iterate(start, stop, reverse)
        if reverse:
            overlay.reverse()
            return _merge_reverse(base, overlay)
        return _merge_forward(base, overlay)

    def pending(self) -> tuple[dict[bytes, bytes], list[bytes]]:
        """Fresh ``(puts, deletes)`` for a write batch; the caller may mutate them."""
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        for key, value in self._pending.items():
            if value is None:
                deletes.append(key)
            else:
                puts[key] = value
        return puts, deletes

    def peek_changes(self) -> dict[bytes, bytes | None]:
        """The pending writes themselves, key -> value (None: deleted), in write order: not a
        copy, to read only (the commit, which discards the buffer right after)."""
        return self._pending

    def discard(self) -> None:
        """Drop every pending write (after a failed block, or after commit)."""
        self._pending = {}
        self._sorted = []
        self._objects = {}
        self._memos = {}
        self._mark = -1
        self._saved = {}

    def is_dirty(self) -> bool:
        """Whether any write (including a delete of an absent key) is pending."""
        return bool(self._pending)

    def __len__(self) -> int:
        """Number of distinct keys written in this block."""
        return len(self._pending)


def _merge_forward(
    base: Iterator[tuple[bytes, bytes]], overlay: list[tuple[bytes, bytes | None]]
) -> Iterator[tuple[bytes, bytes]]:
    """Ascending merge; an overlay entry replaces (or, if None, hides) the base entry."""
    n = len(overlay)
    i = 0
    okey, oval = overlay[0]
    for key, value in base:
        while okey < key:
            if oval is not None:
                yield okey, oval
            i += 1
            if i == n:
                yield key, value
                yield from base
                return
            okey, oval = overlay[i]
        if okey == key:
            if oval is not None:
                yield okey, oval
            i += 1
            if i == n:
                yield from base
                return
            okey, oval = overlay[i]
        else:
            yield key, value
    for j in range(i, n):
        okey, oval = overlay[j]
        if oval is not None:
            yield okey, oval


def _merge_reverse(
    base: Iterator[tuple[bytes, bytes]], overlay: list[tuple[bytes, bytes | None]]
) -> Iterator[tuple[bytes, bytes]]:
    """Descending twin of ``_merge_forward``."""
    n = len(overlay)
    i = 0
    okey, oval = overlay[0]
    for key, value in base:
        while okey > key:
            if oval is not None:
                yield okey, oval
            i += 1
            if i == n:
                yield key, value
                yield from base
                return
            okey, oval = overlay[i]
        if okey == key:
            if oval is not None:
                yield okey, oval
            i += 1
            if i == n:
                yield from base
                return
            okey, oval = overlay[i]
        else:
            yield key, value
    for j in range(i, n):
        okey, oval = overlay[j]
        if oval is not None:
            yield okey, oval
