"""Backend-neutral key-value interfaces.

Structural protocols (not ABCs) so the hot path calls concrete methods directly with no
abstract dispatch; both backends satisfy them without inheriting anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol


class KVReader(Protocol):
    """Read-only view: point reads and ordered range scans."""

    def get(self, key: bytes) -> bytes | None:
        """Value stored at ``key``, or None."""
        ...

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` in bytewise key order (descending if ``reverse``).

        The iterator reads the state as of this call: later writes do not show up in it.
        """
        ...


class KVBackend(KVReader, Protocol):
    """Durable state: atomic batched writes, snapshots, close."""

    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        """Apply all puts, then all deletes, atomically: either all land or none do."""
        ...

    def snapshot(self) -> KVReader:
        """Consistent read-only view of the state at call time."""
        ...

    def close(self) -> None:
        """Release the backend; any later use raises StoreClosedError. Idempotent."""
        ...


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix``; None if unbounded.

    Used as the exclusive ``stop`` of a prefix scan. A prefix of only 0xff bytes (or an empty
    prefix) has no such key, so the scan must run to the end of the keyspace.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def check_batch(puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
    """A write batch's keys and values are bytes (None would read as a tombstone): checked
    before anything is written, so a bad batch changes nothing."""
    for key, value in puts.items():
        if key.__class__ is not bytes or value.__class__ is not bytes:
            raise TypeError(f"keys and values must be bytes, got {key!r}: {value!r}")
    for key in deletes:
        if key.__class__ is not bytes:
            raise TypeError(f"keys must be bytes, got {key!r}")
