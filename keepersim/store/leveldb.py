"""LevelDB backend over plyvel: the default, persistent store.

Methods call plyvel directly and only translate errors on the (rare) failing path, because a
``try`` costs nothing in CPython 3.11 when nothing is raised. Writes use LevelDB's own write
batch, which is atomic. Writes are not fsync'd: the simulator can always replay a block.

Tables are written uncompressed: the state is protobuf (ids, addresses, small integers) that
snappy barely shrinks, and compressing it on every memtable flush and compaction cost a
4-epoch replay a fifth of its CPU (LevelDB's background threads: 22 of 111 us per inference,
4 uncompressed; docs/design/replay-cost.md). A store written compressed stays readable:
LevelDB marks each block's compression.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from itertools import takewhile
from operator import le
from typing import Any, NoReturn

import plyvel

from keepersim.store.errors import StoreClosedError, StoreError, StoreLockedError


def _message(exc: BaseException) -> str:
    """plyvel puts the LevelDB status text in args[0] as bytes."""
    if exc.args and isinstance(exc.args[0], bytes):
        return exc.args[0].decode(errors="replace")
    return str(exc)


def _open_iterator(
    source: Any, start: bytes | None, stop: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """plyvel iterator over ``[start, stop)``, working around a plyvel 1.5.1 bug.

    plyvel's reverse iterator yields nothing when the highest key of the range equals
    ``start`` (it tests ``start >= key`` instead of ``start > key``). So reverse scans leave
    ``start`` out and stop at the first key below it with ``takewhile``, whose predicate is a
    C-level tuple compare: ``(start,) <= (key, value)`` exactly when ``key >= start``.
    """
    if not start:
        start = None  # b"" bounds nothing; as None it also avoids the bug below
    elif reverse:
        return takewhile(partial(le, (start,)), source.iterator(stop=stop, reverse=True))
    it: Iterator[tuple[bytes, bytes]] = source.iterator(start=start, stop=stop, reverse=reverse)
    return it


def _closed_error(path: str) -> StoreClosedError:
    return StoreClosedError(f"LevelDB store at {path!r} is closed")


class LevelDBSnapshot:
    """Read-only view over a plyvel snapshot; release it by dropping it (or ``release()``)."""

    __slots__ = ("_snap", "_path")

    def __init__(self, snap: Any, path: str) -> None:
        self._snap = snap
        self._path = path

    def get(self, key: bytes) -> bytes | None:
        """Value at ``key`` as of the snapshot."""
        try:
            value: bytes | None = self._snap.get(key)
        except RuntimeError as exc:  # plyvel: "Database or snapshot is closed"
            raise _closed_error(self._path) from exc
        return value

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries in ``[start, stop)`` as of the snapshot."""
        try:
            return _open_iterator(self._snap, start, stop, reverse)
        except RuntimeError as exc:
            raise _closed_error(self._path) from exc

    def release(self) -> None:
        """Free the snapshot's LevelDB resources early."""
        with contextlib.suppress(RuntimeError):  # already closed with its database
            self._snap.release()


class LevelDBBackend:
    """KVBackend stored in a LevelDB folder."""

    __slots__ = ("get", "_db", "_path", "_closed", "__weakref__")

    get: Callable[[bytes], bytes | None]
    """Value at ``key`` or None: plyvel's own ``DB.get``, bound per instance so the hottest
    call has no Python frame; ``close()`` swaps in one raising StoreClosedError."""

    def __init__(self, path: str | os.PathLike[str], create_if_missing: bool = True) -> None:
        self._path = os.fspath(path)
        self._closed = False
        try:
            self._db: Any = plyvel.DB(
                self._path, create_if_missing=create_if_missing, compression=None
            )
        except plyvel.Error as exc:
            detail = _message(exc)
            if isinstance(exc, plyvel.IOError) and "lock" in detail.lower():
                raise StoreLockedError(self._path, detail) from exc
            raise StoreError(f"cannot open LevelDB store at {self._path!r}: {detail}") from exc
        self.get = self._db.get

    @property
    def path(self) -> str:
        """Folder of the database."""
        return self._path

    def _raise_closed(self) -> NoReturn:
        raise _closed_error(self._path)

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """plyvel's iterator (an implicit LevelDB snapshot), unwrapped except for reverse scans
        with a start bound (see ``_open_iterator``). It raises RuntimeError if the backend is
        closed while it is still being consumed."""
        if self._closed:
            self._raise_closed()
        return _open_iterator(self._db, start, stop, reverse)

    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        """One LevelDB WriteBatch: written only after every entry was accepted, so a bad entry
        (e.g. a non-bytes key) raises before anything reaches the database."""
        if self._closed:
            self._raise_closed()
        wb = self._db.write_batch()
        put = wb.put
        for key, value in puts.items():
            put(key, value)
        delete = wb.delete
        for key in deletes:
            delete(key)
        wb.write()

    def snapshot(self) -> LevelDBSnapshot:
        """A plyvel snapshot: a consistent view costing O(1)."""
        if self._closed:
            self._raise_closed()
        return LevelDBSnapshot(self._db.snapshot(), self._path)

    def close(self) -> None:
        """Close the database and release the folder lock. Idempotent."""
        if not self._closed:
            self._closed = True
            path = self._path

            def closed_get(key: bytes) -> bytes | None:
                raise _closed_error(path)

            self.get = closed_get
            self._db.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"LevelDBBackend({self._path!r}{', closed' if self._closed else ''})"
