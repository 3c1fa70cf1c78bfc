"""Keyed single-flight, stale-while-refresh cache.

Semantics (from the observed-attention stampede fix):

* fresh entry -> returned (``"hit"``);
* expired entry -> exactly one caller recomputes and pays the latency itself
  (``"recompute"``); callers arriving meanwhile get the stale value at once
  (``"stale"``);
* failed refresh -> the previous value is kept and served, also to the caller
  whose refresh failed (``"refresh_failed"`` then ``"stale"``); no new refresh
  is attempted until ``refresh_retry`` seconds have passed;
* cold start (no value yet) -> one caller computes; the others wait
  (``"cold_wait"``) at most ``cold_wait`` seconds, then raise
  :class:`CacheUnavailableError` (``"unavailable"``);
* cold-start failure -> the exception is raised to the caller that computed,
  and one of the waiting callers takes the computation over (the others keep
  waiting for it, within their own ``cold_wait`` bound).

Values are exactly what ``compute`` returns; the cache changes only who calls
``compute`` and when.

One lock guards all bookkeeping; each key has a condition variable on that
lock for cold-start waiters. ``compute`` and ``on_event`` are never called
with the lock held, so they may be slow or call back into the cache.

Times: ``clock`` (injectable) drives the TTL and the refresh-retry window.
``cold_wait`` bounds a real blocking wait, so it is measured with
``time.monotonic`` whatever ``clock`` is.

The single-flight guarantee is per process (per cache object): N processes
can still run N concurrent computations per key.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "CACHE_EVENTS",
    "CacheStats",
    "CacheUnavailableError",
    "SingleFlightCache",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_log = logging.getLogger(__name__)

EVENT_HIT = "hit"
EVENT_RECOMPUTE = "recompute"
EVENT_STALE = "stale"
EVENT_COLD_WAIT = "cold_wait"
EVENT_UNAVAILABLE = "unavailable"
EVENT_REFRESH_FAILED = "refresh_failed"
#: Every event name ``on_event`` may receive.
CACHE_EVENTS = (
    EVENT_HIT,
    EVENT_RECOMPUTE,
    EVENT_STALE,
    EVENT_COLD_WAIT,
    EVENT_UNAVAILABLE,
    EVENT_REFRESH_FAILED,
)


class CacheUnavailableError(RuntimeError):
    """No value for ``key`` could be served within the cold-start wait bound.

    ``cause`` is the exception of the most recent failed cold-start
    computation for the key, if any (it is also chained as ``__cause__``).
    """

    def __init__(self, key: object, waited: float, cause: BaseException | None = None) -> None:
        message = (
            f"cache value for key {key!r} unavailable: cold-start computation did not "
            f"finish within the {waited:g}s wait bound"
        )
        if cause is not None:
            message += f" (last computation failed: {type(cause).__name__}: {cause})"
        super().__init__(message)
        self.key = key
        self.waited = waited
        self.cause = cause


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since the cache was created (``entries`` is the current size)."""

    hits: int
    recomputes: int
    stale_serves: int
    cold_waits: int
    unavailable: int
    refresh_failures: int
    entries: int


@dataclass(eq=False, slots=True)
class _Entry(Generic[V]):
    cond: threading.Condition
    # ``(value,)`` once a value exists; a 1-tuple keeps ``None`` a valid value.
    box: tuple[V] | None = None
    expires_at: float = -math.inf
    # No refresh is started before this time (set after a failed refresh).
    retry_at: float = -math.inf
    computing: bool = False
    waiters: int = 0
    # Bumped by invalidate(); a computation started under an older generation
    # does not store its result.
    generation: int = 0
    # Most recent cold-start failure, reported to waiters that time out.
    last_error: BaseException | None = None


class SingleFlightCache(Generic[K, V]):
    """Thread-safe keyed cache with single-flight computation and stale serving.

    Args:
        compute: produces the value for a key; called by at most one thread
            per key at a time (except that ``invalidate`` lets a new
            computation start while an older one is still running).
        ttl: seconds (on ``clock``) a computed value stays fresh.
        refresh_retry: seconds (on ``clock``) after a failed refresh before
            another refresh may start; the previous value is served meanwhile.
        cold_wait: longest real time, in seconds, a caller waits for another
            caller's cold-start computation before raising
            :class:`CacheUnavailableError`.
        clock: monotonic time source for ``ttl`` and ``refresh_retry``.
        max_entries: keep at most this many keys, dropping the least recently
            used idle ones (entries being computed or waited on are kept,
            so the bound may be exceeded while they are busy).
        on_event: called, without the lock held, with one of ``"hit"``,
            ``"recompute"``, ``"stale"``, ``"cold_wait"``, ``"unavailable"``,
            ``"refresh_failed"`` (any failed computation, cold or refresh).
            Exceptions it raises are logged and otherwise ignored.
    """

    def __init__(
        self,
        compute: Callable[[K], V],
        ttl: float,
        refresh_retry: float = 60.0,
        cold_wait: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        for name, value in (("ttl", ttl), ("refresh_retry", refresh_retry)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if not cold_wait >= 0:
            raise ValueError(f"cold_wait must be >= 0, got {cold_wait!r}")
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be >= 1 or None, got {max_entries!r}")
        self._compute = compute
        self._ttl = float(ttl)
        self._refresh_retry = float(refresh_retry)
        self._cold_wait = float(cold_wait)
        self._clock = clock
        self._max_entries = max_entries
        self._on_event = on_event
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()
        self._hits = 0
        self._recomputes = 0
        self._stale_serves = 0
        self._cold_waits = 0
        self._unavailable = 0
        self._refresh_failures = 0

    # -- public API ---------------------------------------------------------

    def get(self, key: K) -> V:
        """Return the value for ``key``, computing it if this caller must.

        Raises:
            CacheUnavailableError: no value exists yet and another caller's
                cold-start computation did not produce one within
                ``cold_wait`` seconds.
            Exception: whatever ``compute`` raised, if this caller ran a
                cold-start computation and it failed.
        """
        wait_started: float | None = None  # time.monotonic() when this caller began waiting
        while True:
            served: tuple[V] | None = None
            error: CacheUnavailableError | None = None
            with self._lock:
                entry = self._entry_for(key)
                now = self._clock()
                box = entry.box
                if box is not None and (wait_started is not None or now < entry.expires_at):
                    # Fresh, or produced by the computation this caller waited for.
                    event = EVENT_HIT if wait_started is None else None
                    if event is not None:
                        self._hits += 1
                    served = box
                elif box is not None and (entry.computing or now < entry.retry_at):
                    self._stale_serves += 1
                    event, served = EVENT_STALE, box
                elif not entry.computing:
                    entry.computing = True
                    self._recomputes += 1
                    generation = entry.generation
                    break  # this caller computes, outside the lock
                elif wait_started is None:
                    # Another caller is computing the first value: wait for it.
                    wait_started = time.monotonic()
                    self._cold_waits += 1
                    event = EVENT_COLD_WAIT
                else:
                    remaining = wait_started + self._cold_wait - time.monotonic()
                    if remaining > 0:
                        entry.waiters += 1
                        try:
                            entry.cond.wait(remaining)
                        finally:
                            entry.waiters -= 1
                        continue
                    self._unavailable += 1
                    error = CacheUnavailableError(key, self._cold_wait, entry.last_error)
                    self._discard_if_idle(key, entry)
                    event = EVENT_UNAVAILABLE
            self._emit(event)
            if served is not None:
                return served[0]
            if error is not None:
                raise error from error.cause
            # The cold wait was announced: re-check, then block.
        self._emit(EVENT_RECOMPUTE)
        return self._run_compute(key, entry, generation, box)

    def invalidate(self, key: K) -> None:
        """Forget ``key``'s value.

        A computation already running for ``key`` still returns its result to
        its own caller but does not store it; callers arriving after this
        call never see a value computed before it.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.generation += 1
            if entry.computing or entry.waiters:
                entry.box = None
                entry.expires_at = -math.inf
                entry.retry_at = -math.inf
                entry.last_error = None
            else:
                del self._entries[key]

    def stats(self) -> CacheStats:
        """Snapshot of the counters."""
        with self._lock:
            return CacheStats(
                hits=self._hits,
                recomputes=self._recomputes,
                stale_serves=self._stale_serves,
                cold_waits=self._cold_waits,
                unavailable=self._unavailable,
                refresh_failures=self._refresh_failures,
                entries=len(self._entries),
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # -- internals (call with the lock held unless noted) --------------------

    def _entry_for(self, key: K) -> _Entry[V]:
        entry = self._entries.get(key)
        if entry is None:
            if self._max_entries is not None:
                self._evict_idle(self._max_entries - 1)
            entry = _Entry(cond=threading.Condition(self._lock))
            self._entries[key] = entry
        else:
            self._entries.move_to_end(key)
        return entry

    def _evict_idle(self, limit: int) -> None:
        """Drop least recently used idle entries until at most ``limit`` remain."""
        excess = len(self._entries) - limit
        if excess <= 0:
            return
        victims = []
        for key, entry in self._entries.items():
            if not entry.computing and entry.waiters == 0:
                victims.append(key)
                if len(victims) == excess:
                    break
        for key in victims:
            del self._entries[key]

    def _discard_if_idle(self, key: K, entry: _Entry[V]) -> None:
        """Drop an entry that holds no value and that nobody computes or waits on."""
        if (
            entry.box is None
            and not entry.computing
            and entry.waiters == 0
            and self._entries.get(key) is entry
        ):
            del self._entries[key]

    def _run_compute(self, key: K, entry: _Entry[V], generation: int, stale: tuple[V] | None) -> V:
        """Run ``compute`` for ``key`` (lock not held) and record the outcome."""
        try:
            value = self._compute(key)
        except Exception as exc:
            with self._lock:
                entry.computing = False
                self._refresh_failures += 1
                current = entry.generation == generation
                if stale is not None:
                    if current:
                        entry.retry_at = self._clock() + self._refresh_retry
                    self._stale_serves += 1
                elif current:
                    entry.last_error = exc
                # A cold-start waiter wakes, finds nobody computing and takes over.
                entry.cond.notify_all()
                self._discard_if_idle(key, entry)
            if stale is None:
                # Raised to this caller; a waiting caller (if any) takes over.
                self._emit(EVENT_REFRESH_FAILED)
                raise
            _log.warning(
                "refresh for key %r failed; serving the previous value, next attempt in %gs",
                key,
                self._refresh_retry,
                exc_info=True,
            )
            self._emit(EVENT_REFRESH_FAILED)
            self._emit(EVENT_STALE)
            return stale[0]
        except BaseException:
            # KeyboardInterrupt and the like: release the key, record nothing.
            with self._lock:
                entry.computing = False
                entry.cond.notify_all()
                self._discard_if_idle(key, entry)
            raise
        with self._lock:
            entry.computing = False
            if entry.generation == generation:
                entry.box = (value,)
                entry.expires_at = self._clock() + self._ttl
                entry.retry_at = -math.inf
                entry.last_error = None
            entry.cond.notify_all()
            self._discard_if_idle(key, entry)
            if self._max_entries is not None:
                self._evict_idle(self._max_entries)
        return value

    def _emit(self, event: str | None) -> None:
        """Report ``event`` to the hook (lock not held); a failing hook is logged, not raised."""
        if event is None or self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            _log.exception("cache on_event hook failed for event %r", event)
