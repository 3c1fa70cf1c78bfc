"""BackoffGate and compute_backoff_delay: defaults, exponential + capped delays, shared pause."""

from __future__ import annotations

import threading
import time

import pytest

from keepersim.export.backoff import (
    DEFAULT_BACKOFF_BASE_SECONDS,
    DEFAULT_BACKOFF_CAP_SECONDS,
    BackoffGate,
    compute_backoff_delay,
)
from keepersim.export.fetch import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT_SECONDS,
    Fetcher,
)


class FakeTime:
    """A clock and a sleep that advances it instead of blocking (thread-safe)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._lock = threading.Lock()
        self.now = start
        self.sleeps: list[float] = []

    def clock(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def test_defaults() -> None:
    assert DEFAULT_BACKOFF_BASE_SECONDS == 5
    assert DEFAULT_BACKOFF_CAP_SECONDS == 120
    assert DEFAULT_MAX_ATTEMPTS == 3
    assert DEFAULT_TIMEOUT_SECONDS == 60
    assert DEFAULT_CONCURRENCY == 4
    gate = BackoffGate()
    assert (gate.base, gate.cap, gate.pauses, gate.remaining()) == (5, 120, 0, 0)
    fetcher = Fetcher()
    try:
        assert (fetcher.timeout, fetcher.max_attempts) == (60, 3)
    finally:
        fetcher.close()


@pytest.mark.parametrize(
    ("n", "delay"),
    [(1, 5), (2, 10), (3, 20), (4, 40), (5, 80), (6, 120), (7, 120), (1024, 120), (10**6, 120)],
)
def test_delay_is_exponential_and_capped(n: int, delay: float) -> None:
    assert compute_backoff_delay(n) == delay
    assert compute_backoff_delay(n, 5, 120) == delay


def test_delay_with_custom_base_and_cap() -> None:
    assert [compute_backoff_delay(n, base=0.5, cap=3) for n in range(1, 6)] == [0.5, 1, 2, 3, 3]
    assert compute_backoff_delay(3, base=0, cap=10) == 0


@pytest.mark.parametrize(
    ("n", "base", "cap"),
    [(0, 5, 120), (-1, 5, 120), (1, -1, 120), (1, 5, -1), (1, float("nan"), 1)],
)
def test_delay_rejects_invalid_arguments(n: int, base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        compute_backoff_delay(n, base, cap)


def test_wait_returns_at_once_without_a_pause() -> None:
    fake = FakeTime()
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    assert gate.wait() == 0
    assert fake.sleeps == []


def test_pause_blocks_until_the_deadline() -> None:
    fake = FakeTime()
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    assert gate.pause(2) == 10
    assert gate.paused_until == 1010
    assert gate.remaining() == 10
    fake.advance(4)
    assert gate.wait() == 6
    assert fake.sleeps == [6]
    assert fake.clock() == 1010
    assert gate.remaining() == 0
    assert gate.wait() == 0


def test_pauses_only_extend_the_deadline() -> None:
    fake = FakeTime()
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    gate.pause(4)  # until 1040
    gate.pause(1)  # 1005 would shorten it: ignored
    assert gate.paused_until == 1040
    fake.advance(30)
    gate.pause(2)  # 1040 again: no change
    assert gate.paused_until == 1040
    gate.pause(3)  # 1050: extended
    assert gate.paused_until == 1050
    assert gate.pauses == 4  # every pause is counted


def test_wait_honours_a_pause_extended_while_sleeping() -> None:
    fake = FakeTime()

    def sleep(seconds: float) -> None:
        fake.sleep(seconds)
        if len(fake.sleeps) == 1:
            gate.pause(3)  # another worker fails meanwhile: 20 s from now

    gate = BackoffGate(clock=fake.clock, sleep=sleep)
    gate.pause(1)
    assert gate.wait() == 25
    assert fake.sleeps == [5, 20]


def test_pause_is_shared_by_all_worker_threads() -> None:
    """One worker's failure holds back every worker (real threads, a real 50 ms pause)."""
    gate = BackoffGate(base=0.05, cap=1)
    start = threading.Barrier(DEFAULT_CONCURRENCY + 1)
    passed_at: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        start.wait(5)
        gate.wait()
        with lock:
            passed_at.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(DEFAULT_CONCURRENCY)]
    for thread in threads:
        thread.start()
    paused_at = time.monotonic()
    gate.pause(1)  # e.g. the first worker saw a 503
    start.wait(5)
    for thread in threads:
        thread.join(5)
    assert len(passed_at) == DEFAULT_CONCURRENCY
    assert all(t >= paused_at + 0.05 for t in passed_at)
    assert gate.pauses == 1


def test_rejects_negative_base_or_cap() -> None:
    with pytest.raises(ValueError):
        BackoffGate(base=-1)
    with pytest.raises(ValueError):
        BackoffGate(cap=-1)
