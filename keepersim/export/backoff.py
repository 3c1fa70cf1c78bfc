"""Back-off shared by all exporter worker threads.

A retryable fetch failure (timeout, transport error, HTTP 429 or 5xx) pauses
*every* worker, not just the one that failed, so the exporter stops adding load
to a struggling server instead of refilling its queue. After the n-th
consecutive retryable failure of a request, all workers hold off until
``now + base * 2**(n-1)`` seconds (capped at ``cap``), stretched by up to
``jitter`` of itself at random (so clients that failed together do not come
back together; 0 by default, the exporter uses :data:`DEFAULT_JITTER`), and at
least the server's ``Retry-After``. A pause only ever extends the current
deadline, never shortens it. (Wall-clock pacing of a client, not chain state:
the randomness never reaches a trace.)
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

__all__ = [
    "DEFAULT_BACKOFF_BASE_SECONDS",
    "DEFAULT_BACKOFF_CAP_SECONDS",
    "DEFAULT_JITTER",
    "BackoffGate",
    "compute_backoff_delay",
]

DEFAULT_BACKOFF_BASE_SECONDS = 5.0
DEFAULT_BACKOFF_CAP_SECONDS = 120.0
#: The exporter's jitter: a pause is ``delay * (1 + U[0, 0.25))``.
DEFAULT_JITTER = 0.25


def compute_backoff_delay(
    n: int,
    base: float = DEFAULT_BACKOFF_BASE_SECONDS,
    cap: float = DEFAULT_BACKOFF_CAP_SECONDS,
) -> float:
    """Return ``min(cap, base * 2**(n-1))``, the pause after the n-th consecutive failure.

    Raises:
        ValueError: ``n < 1``, or ``base`` or ``cap`` negative.
    """
    if n < 1:
        raise ValueError(f"failure number must be >= 1, got {n!r}")
    _check_non_negative("base", base)
    _check_non_negative("cap", cap)
    try:
        delay = base * 2.0 ** (n - 1)
    except OverflowError:  # 2.0**k overflows a float for k >= 1024
        return float(cap)
    return float(min(cap, delay))


class BackoffGate:
    """A pause deadline shared by all worker threads.

    Workers call :meth:`wait` before each request and :meth:`pause` after each
    retryable failure. Thread-safe.

    Args:
        base: delay, in seconds, after the first consecutive failure.
        cap: longest single delay, in seconds.
        clock: monotonic time source.
        sleep: blocks the calling thread for the given number of seconds
            (injected by tests together with ``clock``).
        jitter: a pause is stretched by ``U[0, jitter)`` of itself.
        rng: the jitter's random source (``random.random`` by default).
    """

    def __init__(
        self,
        base: float = DEFAULT_BACKOFF_BASE_SECONDS,
        cap: float = DEFAULT_BACKOFF_CAP_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        jitter: float = 0.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        _check_non_negative("base", base)
        _check_non_negative("cap", cap)
        _check_non_negative("jitter", jitter)
        self._jitter = float(jitter)
        self._rng = rng
        self._base = float(base)
        self._cap = float(cap)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._paused_until = -float("inf")
        self._pauses = 0

    @property
    def base(self) -> float:
        return self._base

    @property
    def cap(self) -> float:
        return self._cap

    @property
    def pauses(self) -> int:
        """Number of :meth:`pause` calls so far (the ``fetch_backoff_pauses`` figure)."""
        with self._lock:
            return self._pauses

    @property
    def paused_until(self) -> float:
        """Deadline (on ``clock``) of the current pause; in the past when none is in force."""
        with self._lock:
            return self._paused_until

    def remaining(self) -> float:
        """Seconds until the current pause ends (0.0 when none is in force)."""
        with self._lock:
            return max(0.0, self._paused_until - self._clock())

    def pause(self, n: int, *, at_least: float | None = None) -> float:
        """Pause all workers after the n-th consecutive retryable failure.

        The delay is the back-off for ``n`` with jitter, and at least ``at_least`` (a
        ``Retry-After``); the shared deadline becomes ``max(current deadline, now + delay)``.
        Returns the delay.
        """
        delay = compute_backoff_delay(n, self._base, self._cap)
        if self._jitter:
            delay *= 1.0 + self._jitter * self._rng()
        if at_least is not None:
            delay = max(delay, at_least)
        with self._lock:
            self._pauses += 1
            self._paused_until = max(self._paused_until, self._clock() + delay)
        return delay

    def wait(self) -> float:
        """Block while a pause is in force; return the seconds slept.

        Re-checks after each sleep, so a pause extended meanwhile (by another
        worker's failure) is honoured too.
        """
        slept = 0.0
        while True:
            with self._lock:
                remaining = self._paused_until - self._clock()
            if remaining <= 0:
                return slept
            self._sleep(remaining)
            slept += remaining


def _check_non_negative(name: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0, got {value!r}")
