"""The chain's readers-writer lock: readers share, a writer is alone, a waiting writer goes
before new readers, and nobody is left waiting."""

from __future__ import annotations

import threading
import time

from keepersim.rwlock import RWLock


def _start(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_readers_share_and_a_writer_waits_for_them() -> None:
    lock = RWLock()
    order: list[str] = []
    with lock.read(), lock.read():  # two readers at once (re-entered by one thread)
        writer = _start(lambda: _write(lock, order))
        time.sleep(0.05)
        assert order == []  # the writer waits while a reader holds the lock
        order.append("read")
    writer.join(2)
    assert order == ["read", "write"]


def _write(lock: RWLock, order: list[str]) -> None:
    with lock.write():
        order.append("write")


def _read(lock: RWLock, order: list[str]) -> None:
    with lock.read():
        order.append("read")


def test_a_waiting_writer_goes_before_new_readers() -> None:
    lock = RWLock()
    order: list[str] = []
    with lock.read():
        writer = _start(lambda: _write(lock, order))
        time.sleep(0.05)  # the writer now waits
        reader = _start(lambda: _read(lock, order))
        time.sleep(0.05)
        assert order == []  # the new reader waits behind the writer
    writer.join(2)
    reader.join(2)
    assert order == ["write", "read"]


def test_writers_exclude_each_other_and_readers() -> None:
    lock = RWLock()
    inside = {"writers": 0, "readers": 0}
    bad: list[str] = []

    def write() -> None:
        for _ in range(200):
            with lock.write():
                inside["writers"] += 1
                if inside["writers"] != 1 or inside["readers"]:
                    bad.append("write")
                inside["writers"] -= 1

    def read() -> None:
        for _ in range(200):
            with lock.read():
                inside["readers"] += 1
                if inside["writers"]:
                    bad.append("read")
                inside["readers"] -= 1

    threads = [_start(write), _start(write), _start(read), _start(read)]
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert bad == []


def test_an_error_inside_releases_the_lock() -> None:
    lock = RWLock()
    for guard in (lock.read, lock.write):
        try:
            with guard():
                raise ValueError("inside")
        except ValueError:
            pass
    order: list[str] = []
    _write(lock, order)
    _read(lock, order)
    assert order == ["write", "read"]
