"""A KVStore face over a committed read view: queries may read, never write."""

from __future__ import annotations

from collections.abc import Iterator

from keepersim.store.kv import KVReader


class QueryWriteError(RuntimeError):
    """A query tried to write state (state is written in end-block logic or messages only)."""


class ReadOnlyStore:
    __slots__ = ("_view",)

    def __init__(self, view: KVReader) -> None:
        self._view = view

    def get(self, key: bytes) -> bytes | None:
        return self._view.get(key)

    def has(self, key: bytes) -> bool:
        return self._view.get(key) is not None

    def set(self, key: bytes, value: bytes) -> None:
        raise QueryWriteError(f"query attempted to write key {key!r}")

    def delete(self, key: bytes) -> None:
        raise QueryWriteError(f"query attempted to delete key {key!r}")

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._view.iterate(start, stop, reverse)
