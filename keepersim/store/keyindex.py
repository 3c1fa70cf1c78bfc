"""The state cache's resident keys in order, for its range scans (part of the acceleration
layer: keepersim.store.cache).

One sorted list of keys per first byte (a collection's prefix), so a scan inside one
collection, as nearly every scan is (the timeouts of a height, a policy's due wake-ups),
bisects that collection's keys alone, and an insert or a removal is a bisection and a list
insert or delete in C, not a ``SortedList``'s several Python calls. A collection that grows
past ``large`` keys moves to a ``SortedList``, whose inserts stay cheap at any size.

``tests/store/test_store_keyindex.py`` proves it equal to the plain form: a sorted list of
all the keys.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

DEFAULT_LARGE = 1 << 14


class KeyIndex:
    """A set of distinct keys, iterated and ranged in bytewise order."""

    __slots__ = ("_groups", "_large")

    def __init__(self, keys: Iterable[bytes] = (), *, large: int = DEFAULT_LARGE) -> None:
        self._large = large
        # key[:1] (b"" for the empty key) -> its keys in order
        self._groups: dict[bytes, list[bytes] | SortedList] = {}
        for key in sorted(keys):
            group = self._groups.get(key[:1])
            if group is None:
                group = self._groups[key[:1]] = []
            group.append(key)
        for name, group in self._groups.items():
            if len(group) > large:
                self._groups[name] = SortedList(group)

    def add(self, key: bytes) -> None:
        """Insert ``key``, which the index does not hold."""
        group = self._groups.get(key[:1])
        if group is None:
            self._groups[key[:1]] = [key]
        elif isinstance(group, list):
            if (
                not group or group[-1] < key
            ):  # a timeout's key: its height is the collection's newest
                group.append(key)
            else:
                insort(group, key)
            if len(group) > self._large:
                self._groups[key[:1]] = SortedList(group)
        else:
            group.add(key)

    def remove(self, key: bytes) -> None:
        """Remove ``key``, which the index holds."""
        group = self._groups[key[:1]]
        if isinstance(group, list):
            if group[0] == key:  # a due timeout: its height is the collection's oldest
                del group[0]
            else:
                del group[bisect_left(group, key)]
        else:
            group.remove(key)

    def get_range(
        self, start: bytes | None, stop: bytes | None, reverse: bool = False
    ) -> list[bytes]:
        """The keys of ``[start, stop)`` in order (descending if ``reverse``)."""
        first = b"" if start is None else start[:1]
        if stop is not None and stop[:1] == first:  # inside one collection (most scans)
            group = self._groups.get(first)
            found = [] if group is None else _get_group_range(group, start, stop)
        else:
            found = []
            for name in sorted(self._groups):
                if name >= first and (stop is None or name <= stop[:1]):
                    found += _get_group_range(self._groups[name], start, stop)
        if reverse:
            found.reverse()
        return found

    def copy(self) -> KeyIndex:
        """An independent copy."""
        other = KeyIndex(large=self._large)
        other._groups = {name: group.copy() for name, group in self._groups.items()}
        return other

    def __len__(self) -> int:
        return sum(len(group) for group in self._groups.values())

    def __iter__(self) -> Iterator[bytes]:
        for name in sorted(self._groups):
            yield from self._groups[name]


def _get_group_range(
    group: list[bytes] | SortedList, start: bytes | None, stop: bytes | None
) -> list[bytes]:
    if isinstance(group, list):
        lo = 0 if start is None else bisect_left(group, start)
        hi = len(group) if stop is None else bisect_left(group, stop)
        return group[lo:hi] if lo < hi else []
    return list(group.irange(start, stop, inclusive=(True, False)))
