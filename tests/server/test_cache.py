"""SingleFlightCache: the observed-attention stampede fix's validation list.

12 concurrent callers at expiry, cold start, bounded wait, failed refresh,
retry window, cold-start failure hand-off, unchanged results; then the extras
(invalidate, LRU bound, events, argument checks).

Time is a fake clock for TTL / retry windows. Cold waits are real but tiny.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from keepersim.server.cache import (
    CACHE_EVENTS,
    CacheUnavailableError,
    SingleFlightCache,
)

JOIN_TIMEOUT = 5.0  # generous upper bound; never reached when the code is right


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class ScriptedCompute:
    """A compute function whose calls follow a script of step functions.

    Each call takes the next step (the last one repeats). Calls are counted and
    ``entered`` is set when a call starts, so tests can see who is computing.
    """

    def __init__(self, *steps: Callable[[str], Any]) -> None:
        self._steps = list(steps)
        self._lock = threading.Lock()
        self.calls = 0
        self.entered = threading.Event()

    def __call__(self, key: str) -> Any:
        with self._lock:
            index = min(self.calls, len(self._steps) - 1)
            self.calls += 1
        self.entered.set()
        return self._steps[index](key)


def returns(value: Any) -> Callable[[str], Any]:
    return lambda key: value


def blocks_then(release: threading.Event, step: Callable[[str], Any]) -> Callable[[str], Any]:
    def run(key: str) -> Any:
        assert release.wait(JOIN_TIMEOUT), "test never released the computation"
        return step(key)

    return run


def raises(exc: BaseException) -> Callable[[str], Any]:
    def run(key: str) -> Any:
        raise exc

    return run


def run_in_threads(
    n: int, target: Callable[[], Any]
) -> tuple[list[threading.Thread], queue.Queue[Any]]:
    """Start ``n`` threads calling ``target``; results (or exceptions) land in the queue."""
    results: queue.Queue[Any] = queue.Queue()

    def worker() -> None:
        try:
            results.put(target())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results.put(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads, results


def take(results: queue.Queue[Any], n: int) -> list[Any]:
    return [results.get(timeout=JOIN_TIMEOUT) for _ in range(n)]


def join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
        assert not thread.is_alive()


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.001)


# -- the seed's validation list ----------------------------------------------


def test_twelve_concurrent_callers_at_expiry_recompute_exactly_once() -> None:
    clock = FakeClock()
    release = threading.Event()
    compute = ScriptedCompute(returns("v1"), blocks_then(release, returns("v2")))
    cache: SingleFlightCache[str, str] = SingleFlightCache(compute, ttl=1800, clock=clock)
    assert cache.get("sessions") == "v1"
    clock.advance(1800)  # exactly at expiry

    barrier = threading.Barrier(12)

    def caller() -> str:
        barrier.wait(JOIN_TIMEOUT)
        return cache.get("sessions")

    threads, results = run_in_threads(12, caller)
    # Eleven callers get the stale value while the twelfth is still recomputing.
    assert take(results, 11) == ["v1"] * 11
    wait_until(lambda: compute.calls == 2)
    release.set()
    assert take(results, 1) == ["v2"]
    join_all(threads)

    assert compute.calls == 2  # the initial fill + exactly one recompute
    stats = cache.stats()
    assert (stats.recomputes, stats.stale_serves, stats.hits) == (2, 11, 0)
    assert cache.get("sessions") == "v2"
    assert cache.stats().hits == 1


def test_cold_start_one_caller_computes_the_others_wait_and_get_the_value() -> None:
    release = threading.Event()
    compute = ScriptedCompute(blocks_then(release, returns("v1")))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, cold_wait=JOIN_TIMEOUT, clock=FakeClock()
    )
    barrier = threading.Barrier(8)

    def caller() -> str:
        barrier.wait(JOIN_TIMEOUT)
        return cache.get("sessions")

    threads, results = run_in_threads(8, caller)
    wait_until(lambda: cache.stats().cold_waits == 7)
    assert results.empty()
    release.set()
    assert take(results, 8) == ["v1"] * 8
    join_all(threads)

    assert compute.calls == 1
    stats = cache.stats()
    assert (stats.recomputes, stats.cold_waits, stats.unavailable) == (1, 7, 0)


def test_cold_wait_is_bounded_then_cache_unavailable() -> None:
    release = threading.Event()
    compute = ScriptedCompute(blocks_then(release, returns("v1")))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, cold_wait=0.05, clock=FakeClock()
    )
    threads, results = run_in_threads(1, lambda: cache.get("sessions"))
    assert compute.entered.wait(JOIN_TIMEOUT)

    started = time.monotonic()
    with pytest.raises(CacheUnavailableError, match=r"'sessions'.*0\.05s") as info:
        cache.get("sessions")
    assert 0.04 <= time.monotonic() - started < 2.0
    assert info.value.key == "sessions"
    assert info.value.cause is None

    release.set()
    assert take(results, 1) == ["v1"]
    join_all(threads)
    assert compute.calls == 1
    assert cache.stats().unavailable == 1
    assert cache.get("sessions") == "v1"  # the computation was not abandoned


def test_failed_refresh_keeps_and_serves_the_previous_value() -> None:
    clock = FakeClock()
    compute = ScriptedCompute(returns("v1"), raises(RuntimeError("db timeout")))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, refresh_retry=60, clock=clock
    )
    assert cache.get("sessions") == "v1"
    clock.advance(1801)

    assert cache.get("sessions") == "v1"  # the refreshing caller itself is served
    assert cache.get("sessions") == "v1"
    assert compute.calls == 2
    stats = cache.stats()
    assert (stats.refresh_failures, stats.stale_serves) == (1, 2)


def test_refresh_retry_window_is_respected() -> None:
    clock = FakeClock()
    compute = ScriptedCompute(
        returns("v1"), raises(RuntimeError("first")), raises(RuntimeError("second")), returns("v2")
    )
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, refresh_retry=60, clock=clock
    )
    assert cache.get("sessions") == "v1"
    clock.advance(1800)
    assert cache.get("sessions") == "v1"  # refresh fails at t
    assert compute.calls == 2

    clock.advance(59.9)
    assert cache.get("sessions") == "v1"  # inside the window: no new attempt
    assert compute.calls == 2

    clock.advance(0.1)
    assert cache.get("sessions") == "v1"  # window over: retried, fails again
    assert compute.calls == 3

    clock.advance(59.9)
    assert cache.get("sessions") == "v1"  # the window restarted at the second failure
    assert compute.calls == 3

    clock.advance(0.1)
    assert cache.get("sessions") == "v2"  # retried and succeeded
    assert compute.calls == 4
    clock.advance(1799)
    assert cache.get("sessions") == "v2"  # fresh for a full ttl again
    assert compute.calls == 4
    assert cache.stats().refresh_failures == 2


def test_cold_start_failure_is_raised_to_the_computer_and_a_waiter_takes_over() -> None:
    release = threading.Event()
    boom = RuntimeError("rollup failed")
    compute = ScriptedCompute(blocks_then(release, raises(boom)), returns("v1"))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, cold_wait=JOIN_TIMEOUT, clock=FakeClock()
    )
    first, first_result = run_in_threads(1, lambda: cache.get("sessions"))
    assert compute.entered.wait(JOIN_TIMEOUT)
    waiters, waiter_results = run_in_threads(3, lambda: cache.get("sessions"))
    wait_until(lambda: cache.stats().cold_waits == 3)

    release.set()
    assert take(first_result, 1) == [boom]
    assert take(waiter_results, 3) == ["v1"] * 3
    join_all(first + waiters)

    assert compute.calls == 2  # one waiter recomputed; the others waited for it
    stats = cache.stats()
    assert (stats.recomputes, stats.refresh_failures, stats.unavailable) == (2, 1, 0)


def test_cold_start_failure_without_waiters_leaves_no_entry_and_next_caller_computes() -> None:
    compute = ScriptedCompute(raises(RuntimeError("down")), returns("v1"))
    cache: SingleFlightCache[str, str] = SingleFlightCache(compute, ttl=1800, clock=FakeClock())
    with pytest.raises(RuntimeError, match="down"):
        cache.get("sessions")
    assert len(cache) == 0
    assert cache.get("sessions") == "v1"  # no retry window without a value to serve


def test_waiter_timing_out_after_a_cold_failure_carries_the_cause() -> None:
    release_first = threading.Event()
    release_second = threading.Event()
    boom = RuntimeError("rollup failed")
    compute = ScriptedCompute(
        blocks_then(release_first, raises(boom)), blocks_then(release_second, returns("v1"))
    )
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, cold_wait=0.15, clock=FakeClock()
    )
    first, first_result = run_in_threads(1, lambda: cache.get("sessions"))
    assert compute.entered.wait(JOIN_TIMEOUT)
    waiters, waiter_results = run_in_threads(2, lambda: cache.get("sessions"))
    wait_until(lambda: cache.stats().cold_waits == 2)

    release_first.set()  # one waiter takes over and blocks; the other times out
    assert take(first_result, 1) == [boom]
    [timed_out] = take(waiter_results, 1)
    assert isinstance(timed_out, CacheUnavailableError)
    assert timed_out.cause is boom and timed_out.__cause__ is boom
    assert "rollup failed" in str(timed_out)

    release_second.set()
    assert take(waiter_results, 1) == ["v1"]
    join_all(first + waiters)


def test_results_are_unchanged_compared_with_calling_compute_directly() -> None:
    def rollup(key: int) -> tuple[int, ...]:
        rng = random.Random(key)
        return tuple(rng.randrange(1000) for _ in range(5))

    clock = FakeClock()
    cache: SingleFlightCache[int, tuple[int, ...]] = SingleFlightCache(
        rollup, ttl=10, refresh_retry=3, clock=clock, max_entries=8
    )
    mismatches: list[int] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            key = rng.randrange(20)
            if cache.get(key) != rollup(key):
                mismatches.append(key)
            if rng.random() < 0.2:
                clock.advance(rng.random() * 4)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    join_all(threads)

    assert mismatches == []
    stats = cache.stats()
    assert stats.hits > 0 and stats.recomputes > 0
    assert (stats.unavailable, stats.refresh_failures) == (0, 0)


# -- extras ------------------------------------------------------------------


def test_none_is_a_cacheable_value() -> None:
    compute = ScriptedCompute(returns(None))
    cache: SingleFlightCache[str, None] = SingleFlightCache(compute, ttl=10, clock=FakeClock())
    assert cache.get("k") is None
    assert cache.get("k") is None
    assert compute.calls == 1


def test_keys_are_independent() -> None:
    cache: SingleFlightCache[str, str] = SingleFlightCache(str.upper, ttl=10, clock=FakeClock())
    assert [cache.get("a"), cache.get("b"), cache.get("a")] == ["A", "B", "A"]
    assert cache.stats().recomputes == 2


def test_invalidate_forgets_the_value() -> None:
    compute = ScriptedCompute(returns("v1"), returns("v2"))
    cache: SingleFlightCache[str, str] = SingleFlightCache(compute, ttl=1800, clock=FakeClock())
    assert cache.get("k") == "v1"
    cache.invalidate("k")
    cache.invalidate("absent")
    assert cache.get("k") == "v2"
    assert compute.calls == 2


def test_invalidate_during_a_computation_discards_its_result() -> None:
    release = threading.Event()
    compute = ScriptedCompute(blocks_then(release, returns("old")), returns("new"))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, cold_wait=JOIN_TIMEOUT, clock=FakeClock()
    )
    first, first_result = run_in_threads(1, lambda: cache.get("k"))
    assert compute.entered.wait(JOIN_TIMEOUT)
    cache.invalidate("k")
    release.set()
    assert take(first_result, 1) == ["old"]  # its own caller still gets it
    join_all(first)
    assert cache.get("k") == "new"  # ...but it was not stored


def test_max_entries_evicts_the_least_recently_used_key() -> None:
    compute = ScriptedCompute(lambda key: key + "!")
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=1800, clock=FakeClock(), max_entries=2
    )
    cache.get("a")
    cache.get("b")
    cache.get("a")  # "b" is now least recently used
    cache.get("c")
    assert len(cache) == 2
    calls = compute.calls
    cache.get("a")
    assert compute.calls == calls  # kept
    cache.get("b")
    assert compute.calls == calls + 1  # evicted, recomputed


def test_on_event_reports_every_outcome_outside_the_lock() -> None:
    clock = FakeClock()
    events: list[str] = []
    compute = ScriptedCompute(returns("v1"), raises(RuntimeError("x")))

    def on_event(name: str) -> None:
        events.append(name)
        cache.stats()  # would deadlock if called with the lock held

    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=10, refresh_retry=5, cold_wait=0, clock=clock, on_event=on_event
    )
    cache.get("k")
    cache.get("k")
    clock.advance(10)
    cache.get("k")
    cache.get("k")
    assert events == ["recompute", "hit", "recompute", "refresh_failed", "stale", "stale"]
    assert set(events) <= set(CACHE_EVENTS)


def test_cold_wait_and_unavailable_events() -> None:
    release = threading.Event()
    events: list[str] = []
    compute = ScriptedCompute(blocks_then(release, returns("v1")))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=10, cold_wait=0, clock=FakeClock(), on_event=events.append
    )
    threads, results = run_in_threads(1, lambda: cache.get("k"))
    assert compute.entered.wait(JOIN_TIMEOUT)
    with pytest.raises(CacheUnavailableError):
        cache.get("k")
    release.set()
    assert take(results, 1) == ["v1"]
    join_all(threads)
    assert events == ["recompute", "cold_wait", "unavailable"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttl": -1},
        {"ttl": 1, "refresh_retry": -1},
        {"ttl": 1, "cold_wait": -1},
        {"ttl": 1, "max_entries": 0},
    ],
)
def test_rejects_invalid_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SingleFlightCache(str.upper, **kwargs)


def test_a_failing_event_hook_does_not_break_the_cache() -> None:
    def on_event(name: str) -> None:
        raise RuntimeError("metrics backend down")

    compute = ScriptedCompute(returns("v1"))
    cache: SingleFlightCache[str, str] = SingleFlightCache(
        compute, ttl=10, clock=FakeClock(), on_event=on_event
    )
    assert cache.get("k") == "v1"
    assert cache.get("k") == "v1"
    assert compute.calls == 1
