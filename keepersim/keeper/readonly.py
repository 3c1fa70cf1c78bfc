"""A KVStore face over a committed read view: queries may read, never write."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from google.protobuf.message import Message

from keepersim.store.kv import KVReader

M = TypeVar("M", bound=Message)


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

    def take_message(self, key: bytes, decode: Callable[[bytes], M]) -> M | None:
        """Decoded afresh: a query's copy (queries never share the block builder's objects)."""
        raw = self._view.get(key)
        return None if raw is None else decode(raw)

    peek_message = take_message

    def set_message(self, key: bytes, message: Message) -> None:
        raise QueryWriteError(f"query attempted to write key {key!r}")

    def set(self, key: bytes, value: bytes) -> None:
        raise QueryWriteError(f"query attempted to write key {key!r}")

    def delete(self, key: bytes) -> None:
        raise QueryWriteError(f"query attempted to delete key {key!r}")

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._view.iterate(start, stop, reverse)
