"""A small readers-writer lock: many queries read the committed state; a commit writes alone."""

from __future__ import annotations

import threading


class RWLock:
    """Writer-preferring: once a commit waits, new readers wait behind it (no starvation).

    ``read()`` and ``write()`` hand out one guard each, made once: the chain takes the write
    side at every commit and the read side at every query, so neither builds a generator nor
    wakes anyone when no thread waits (``_waiting`` counts the threads in ``wait``).
    """

    __slots__ = (
        "_lock",
        "_cond",
        "_readers",
        "_writer",
        "_writers_waiting",
        "_waiting",
        "_read",
        "_write",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._waiting = 0
        self._read = _ReadGuard(self)
        self._write = _WriteGuard(self)

    def read(self) -> _ReadGuard:
        """``with lock.read():`` shared with other readers, never with a writer."""
        return self._read

    def write(self) -> _WriteGuard:
        """``with lock.write():`` alone."""
        return self._write

    def _wait(self) -> None:
        """Wait for a change (the lock held)."""
        self._waiting += 1
        try:
            self._cond.wait()
        finally:
            self._waiting -= 1

    def acquire_read(self) -> None:
        """read()'s entry, for a caller that makes its own guard (release with release_read)."""
        with self._lock:
            while self._writer or self._writers_waiting:
                self._wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._waiting:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        """write()'s entry (release with release_write)."""
        with self._lock:
            if self._writer or self._readers:
                self._writers_waiting += 1
                try:
                    while self._writer or self._readers:
                        self._wait()
                finally:
                    self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._lock:
            self._writer = False
            if self._waiting:
                self._cond.notify_all()


class _ReadGuard:
    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_read()


class _WriteGuard:
    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_write()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_write()
