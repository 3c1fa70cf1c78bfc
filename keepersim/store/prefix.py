"""Prefix views: give each collection its own keyspace inside one store, Cosmos-style."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from google.protobuf.message import Message

from keepersim.store.buffer import KVStore, M
from keepersim.store.kv import prefix_end


class PrefixStore:
    """KVStore restricted to keys under ``prefix``; keys go in and come out without it.

    A PrefixStore of a PrefixStore is flattened into one over the root store with the joined
    prefix, so nesting costs one concatenation per call, not one per level.
    """

    __slots__ = ("_parent", "_prefix", "_end")

    _parent: KVStore
    _prefix: bytes
    _end: bytes | None

    def __init__(self, parent: KVStore, prefix: bytes) -> None:
        if isinstance(parent, PrefixStore):
            prefix = parent._prefix + prefix
            parent = parent._parent
        self._parent = parent
        self._prefix = prefix
        self._end = prefix_end(prefix)

    @property
    def prefix(self) -> bytes:
        """Full prefix in the root store."""
        return self._prefix

    @property
    def parent(self) -> KVStore:
        """Root (non-prefix) store this view reads and writes."""
        return self._parent

    def get(self, key: bytes) -> bytes | None:
        """Value at ``prefix + key``."""
        return self._parent.get(self._prefix + key)

    def has(self, key: bytes) -> bool:
        """Whether ``prefix + key`` holds a value."""
        return self._parent.has(self._prefix + key)

    def set(self, key: bytes, value: bytes) -> None:
        """Store ``value`` at ``prefix + key``."""
        self._parent.set(self._prefix + key, value)

    def delete(self, key: bytes) -> None:
        """Remove ``prefix + key``."""
        self._parent.delete(self._prefix + key)

    def take_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        return self._parent.take_message(self._prefix + key, decode)

    def peek_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        return self._parent.peek_message(self._prefix + key, decode)

    def set_message(self, key: bytes, message: Message) -> None:
        self._parent.set_message(self._prefix + key, message)

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries under the prefix with ``start <= key < stop`` (keys without the prefix)."""
        prefix = self._prefix
        lo = prefix if start is None else prefix + start
        hi = self._end if stop is None else prefix + stop
        return _strip(self._parent.iterate(lo, hi, reverse), len(prefix))


def _strip(it: Iterator[tuple[bytes, bytes]], n: int) -> Iterator[tuple[bytes, bytes]]:
    for key, value in it:
        yield key[n:], value
