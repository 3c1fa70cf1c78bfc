"""In-memory backend: same semantics as LevelDB, for fast tests and throwaway runs.

State is a dict plus a SortedList of its keys, sorted again when a scan needs it after writes
added or removed keys: behind the state cache (keepersim.store.cache) writes come in batches and
scans of the backend are rare, so keeping the order at every write would be wasted. Snapshots and
iterators are copy-on-write views: taking one is O(1); the next write copies the dict once, and
only if a view is still alive (tracked with a weak reference); the key list is never changed in
place, only replaced, so views share it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping

from sortedcontainers import SortedList

from keepersim.store.errors import StoreClosedError
from keepersim.store.kv import check_batch


def _closed_get(key: bytes) -> bytes | None:
    raise StoreClosedError("memory store is closed")


class _State:
    """Closed flag shared by a backend and its views, so views fail after close like plyvel's."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False


class MemoryView:
    """Immutable version of a MemoryBackend's state (its snapshot type)."""

    __slots__ = ("_data", "_keys", "_state", "__weakref__")

    def __init__(self, data: dict[bytes, bytes], keys: SortedList, state: _State) -> None:
        self._data = data
        self._keys = keys
        self._state = state

    def get(self, key: bytes) -> bytes | None:
        """Value at ``key`` in this version."""
        if self._state.closed:
            raise StoreClosedError("memory store is closed")
        return self._data.get(key)

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries in ``[start, stop)`` of this version."""
        if self._state.closed:
            raise StoreClosedError("memory store is closed")
        return _iter_view(self, start, stop, reverse)


def _iter_view(
    view: MemoryView, start: bytes | None, stop: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    # The generator holds ``view`` for its whole life, which keeps the copy-on-write pin.
    # irange is lazy: opening a scan costs O(log n), and an early ``break`` pays nothing more.
    keys = view._keys
    data = view._data
    for key in keys.irange(start, stop, inclusive=(True, False), reverse=reverse):
        yield key, data[key]


class MemoryBackend:
    """KVBackend held in process memory."""

    __slots__ = ("get", "_data", "_keys", "_view", "_state", "__weakref__")

    get: Callable[[bytes], bytes | None]
    """Value at ``key`` or None: bound straight to ``dict.get`` to skip a Python frame."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: SortedList | None = SortedList()  # None: to be sorted at the next scan
        self._view: weakref.ref[MemoryView] | None = None
        self._state = _State()
        self.get = self._data.get

    def _current_view(self) -> MemoryView:
        view = self._view() if self._view is not None else None
        if view is None:
            if self._keys is None:
                self._keys = SortedList(self._data)
            view = MemoryView(self._data, self._keys, self._state)
            self._view = weakref.ref(view)
        return view

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries in ``[start, stop)``; unaffected by writes made while iterating."""
        if self._state.closed:
            raise StoreClosedError("memory store is closed")
        return _iter_view(self._current_view(), start, stop, reverse)

    def snapshot(self) -> MemoryView:
        """O(1) consistent view; the next write copies the state once while it is alive."""
        if self._state.closed:
            raise StoreClosedError("memory store is closed")
        return self._current_view()

    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        """Validate everything first, then apply: puts, then deletes. All or nothing."""
        if self._state.closed:
            raise StoreClosedError("memory store is closed")
        dels = deletes if isinstance(deletes, list | tuple) else list(deletes)
        check_batch(puts, dels)
        if not puts and not dels:
            return
        if self._view is not None:
            if self._view() is not None:  # a live view still reads the current dict
                self._data = dict(self._data)
                self.get = self._data.get
            # (the key list is never changed in place, only replaced: views may share it)
            self._view = None
        data = self._data
        if self._keys is not None and (
            any(key not in data for key in puts) or any(key in data for key in dels)
        ):
            self._keys = None  # the key set changes: sorted again at the next scan
        data.update(puts)
        for key in dels:
            data.pop(key, None)

    def close(self) -> None:
        """Mark closed; later calls (and calls on its snapshots) raise StoreClosedError."""
        self._state.closed = True
        self.get = _closed_get

    def __len__(self) -> int:
        return len(self._data)
