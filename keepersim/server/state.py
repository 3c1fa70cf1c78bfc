"""What the routes of one app share: the chain, its tunables, metrics, caches, sink and runner.

Caches (:class:`~keepersim.server.cache.SingleFlightCache`):

* selection tables, keyed by model, with a TTL of one *block*: the cache's clock is the chain's
  committed height, so an entry computed at height h expires when block h+1 commits. At a new
  block exactly one request recomputes the table; concurrent requests get the previous block's
  table at once (stale-while-refresh; the answer's height says which table was used). A failed
  computation keeps serving the previous table and is retried after ``refresh_retry_blocks``.
  Selection errors that are answers (unknown model, nobody selectable) are cached like tables.
  Only the very first request for a model waits (at most ``cold_wait`` seconds, then 503).
  If a block commits while the table is being recomputed, the new table may serve one block
  longer (the entry's expiry is set from the height at the end of the computation).
* reputations per epoch (the epoch group's), keyed by epoch index, never expiring (they are
  fixed when the group forms).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from keepersim.chain import Chain
from keepersim.keeper.selection import SelectionTable
from keepersim.server.cache import CacheUnavailableError, SingleFlightCache
from keepersim.server.faults import FaultInjector
from keepersim.server.metrics import ServerMetrics
from keepersim.server.responses import ApiError
from keepersim.server.runner import BlockSink, Runner
from keepersim.types.errors import KeepersimError, NoExecutorsError, UnknownModelError
from keepersim.types.rest_routes import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT

__all__ = ["ServerConfig", "ServerState", "TableAnswer"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Tunables of one app.

    Attributes:
        cold_wait: seconds a request waits for another request's first computation of a cached
            value before it gets a 503.
        refresh_retry_blocks: blocks to wait after a failed table refresh before trying again
            (the previous table is served meanwhile).
        cache_entries: most keys (models / epochs) each cache keeps.
        default_page_limit / max_page_limit: ``pagination.limit`` default and bound.
    """

    cold_wait: float = 5.0
    refresh_retry_blocks: int = 1
    cache_entries: int = 64
    default_page_limit: int = DEFAULT_PAGE_LIMIT
    max_page_limit: int = MAX_PAGE_LIMIT


@dataclass(frozen=True, slots=True)
class TableAnswer:
    """What the selection cache holds for a model: a table, or the error selection gave."""

    height: int
    table: SelectionTable | None
    error: KeepersimError | None


class ServerState:
    """Everything the routes share: the chain, metrics, caches, the block sink and runner."""

    def __init__(
        self,
        chain: Chain,
        *,
        config: ServerConfig | None = None,
        metrics: ServerMetrics | None = None,
        sink: BlockSink | None = None,
        runner: Runner | None = None,
        faults: FaultInjector | None = None,
        table_compute: Callable[[str], SelectionTable] | None = None,
    ) -> None:
        self.chain = chain
        self.config = config or ServerConfig()
        self.metrics = metrics or ServerMetrics()
        self.sink = sink or (runner.sink if runner is not None else BlockSink(chain, self.metrics))
        if self.sink.metrics is None:
            self.sink.metrics = self.metrics
        self.runner = runner
        self.faults = faults
        self._table_compute = table_compute or chain.get_selection_table
        self._counter = itertools.count()
        self._counter_lock = threading.Lock()
        self.selection_cache: SingleFlightCache[str, TableAnswer] = SingleFlightCache(
            self._compute_table,
            ttl=1.0,
            refresh_retry=float(self.config.refresh_retry_blocks),
            cold_wait=self.config.cold_wait,
            clock=self._height_clock,
            max_entries=self.config.cache_entries,
            on_event=self.metrics.get_cache_hook("selection"),
        )
        self.reputation_cache: SingleFlightCache[int, dict[str, int]] = SingleFlightCache(
            self._compute_reputation,
            ttl=math.inf,
            cold_wait=self.config.cold_wait,
            max_entries=self.config.cache_entries,
            on_event=self.metrics.get_cache_hook("reputation"),
        )
        self.started = time.time()

    def _height_clock(self) -> float:
        return float(self.chain.height)

    def next_request_id(self) -> str:
        with self._counter_lock:
            return f"srv-{next(self._counter)}"

    # cached computations ---------------------------------------------------------------

    def _compute_table(self, model: str) -> TableAnswer:
        height = self.chain.height
        try:
            table = self._table_compute(model)
        except (UnknownModelError, NoExecutorsError) as exc:
            return TableAnswer(height, None, exc)
        return TableAnswer(table.height, table, None)

    def _compute_reputation(self, epoch: int) -> dict[str, int]:
        with self.chain.read() as k:
            group = k.get_epoch_group(epoch, "")
        if group is None:
            raise ApiError(404, f"no epoch group for epoch {epoch}")
        return {m.member_address: int(m.reputation) for m in group.validation_weights}

    def get_table(self, model: str) -> SelectionTable:
        try:
            answer = self.selection_cache.get(model)
        except CacheUnavailableError as exc:
            raise ApiError(
                503,
                f"selection table for model {model!r} is not available yet: its first "
                f"computation did not finish within {self.config.cold_wait:g}s; retry later",
                {"Retry-After": "1"},
            ) from exc
        if answer.error is not None:
            if isinstance(answer.error, UnknownModelError):
                raise ApiError(404, str(answer.error))
            raise ApiError(503, str(answer.error), {"Retry-After": "1"})
        assert answer.table is not None
        return answer.table

    def get_reputation(self, epoch: int) -> dict[str, int]:
        try:
            return self.reputation_cache.get(epoch)
        except CacheUnavailableError as exc:
            raise ApiError(
                503,
                f"reputations of epoch {epoch} are not available yet: their first computation "
                f"did not finish within {self.config.cold_wait:g}s; retry later",
                {"Retry-After": "1"},
            ) from exc
