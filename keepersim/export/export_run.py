"""What an export run takes and gives: its options, its result, the error that stops it, and the
one fetcher it runs with (a trace export, :mod:`keepersim.export.exporter`, and ``--aggregate``,
:mod:`keepersim.export.aggregate`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import httpx

from keepersim.export.backoff import (
    DEFAULT_BACKOFF_BASE_SECONDS,
    DEFAULT_BACKOFF_CAP_SECONDS,
    DEFAULT_JITTER,
    BackoffGate,
)
from keepersim.export.fetch import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT_SECONDS,
    ExportFetchError,
    Fetcher,
    FetchStats,
)
from keepersim.types.rest_routes import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT

__all__ = [
    "GRPC_UNIMPLEMENTED",
    "ExportError",
    "ExportOptions",
    "ExportResult",
    "ExportResultLike",
    "FetchOutcome",
    "parse_epoch_range",
    "run_fetcher",
]

#: google.golang.org/grpc/codes Unimplemented: the gateway's answer to an unknown route.
GRPC_UNIMPLEMENTED = 12


@dataclass
class FetchOutcome:
    """What every export run (a trace, ``--aggregate``) reports of its fetching: the fetcher's
    counters, the duration and whether it ended well. :func:`run_fetcher` fills it; each result
    is one (keyword-only fields, after the result's own)."""

    fetch_requests: int = field(default=0, kw_only=True)
    fetch_retries: int = field(default=0, kw_only=True)
    fetch_errors: int = field(default=0, kw_only=True)
    fetch_bad_bodies: int = field(default=0, kw_only=True)
    fatal_errors: int = field(default=0, kw_only=True)
    gave_up: int = field(default=0, kw_only=True)
    fetch_backoff_pauses: int = field(default=0, kw_only=True)
    duration_seconds: float = field(default=0.0, kw_only=True)
    ok: bool = field(default=False, kw_only=True)
    error: str | None = field(default=None, kw_only=True)

    def process_fetch_stats(self, stats: FetchStats) -> None:
        self.fetch_requests = stats.requests
        self.fetch_retries = stats.retries
        self.fetch_errors = stats.errors
        self.fetch_bad_bodies = stats.bad_bodies
        self.fatal_errors = stats.fatal_errors
        self.gave_up = stats.gave_up
        self.fetch_backoff_pauses = stats.backoff_pauses

    def get_fetch_counts(self) -> dict[str, int]:
        """The counters as the results' JSON names them."""
        return {
            "fetches": self.fetch_requests,
            "fetch_retries": self.fetch_retries,
            "fetch_errors": self.fetch_errors,
            "fetch_bad_bodies": self.fetch_bad_bodies,
            "fatal_errors": self.fatal_errors,
            "gave_up": self.gave_up,
            "fetch_backoff_pauses": self.fetch_backoff_pauses,
        }


class ExportResultLike(Protocol):
    """An export's result (:class:`ExportResult`, or ``--aggregate``'s)."""

    def to_dict(self) -> dict[str, Any]: ...


class ExportError(Exception):
    """The export stopped; the message names the URL when a fetch failed. ``result`` holds the
    counters so far (the progress file keeps what was done, for a rerun)."""

    def __init__(self, message: str, result: ExportResultLike | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True, slots=True)
class ExportOptions:
    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base: float = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_cap: float = DEFAULT_BACKOFF_CAP_SECONDS
    page_limit: int = DEFAULT_PAGE_LIMIT
    progress: bool = False
    restart: bool = False
    #: the trace's chain id when the node serves no node_info
    chain_id: str | None = None
    #: the height to pin the snapshot to (default: the node's latest)
    height: int | None = None
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not 1 <= self.page_limit <= MAX_PAGE_LIMIT:
            raise ValueError(f"page limit must be in [1, {MAX_PAGE_LIMIT}], got {self.page_limit}")
        if self.height is not None and self.height < 1:
            raise ValueError(f"--height must be >= 1, got {self.height}")


@dataclass
class ExportResult(FetchOutcome):
    node: str
    out: str
    epochs: tuple[int, int]
    chain_id: str = ""
    chain_id_source: str = ""
    first_height: int = 0
    last_height: int = 0
    pinned_height: int = 0
    summaries_available: bool = True
    pages_per_epoch: dict[str, dict[str, int]] = field(default_factory=dict)
    shared_pages: dict[str, int] = field(default_factory=dict)
    requests_by_route: dict[str, int] = field(default_factory=dict)
    reputations: dict[str, dict[str, int]] = field(default_factory=dict)
    excluded: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    members_not_listed: list[str] = field(default_factory=list)
    payloads_dropped: int = 0
    summaries_omitted: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pages_fetched: int = 0
    units_resumed: int = 0
    records: dict[str, int] = field(default_factory=dict)
    records_written: int = 0
    skipped_inferences: int = 0
    unknown_fields: dict[str, list[str]] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records_written / self.duration_seconds if self.duration_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "out": self.out,
            "epochs": list(self.epochs),
            "chain_id": self.chain_id,
            "chain_id_source": self.chain_id_source,
            "first_height": self.first_height,
            "last_height": self.last_height,
            "pinned_height": self.pinned_height,
            "summaries_available": self.summaries_available,
            "pages_per_epoch": self.pages_per_epoch,
            "shared_pages": dict(self.shared_pages),
            "requests_by_route": dict(sorted(self.requests_by_route.items())),
            "reputations": self.reputations,
            "excluded": self.excluded,
            "members_not_listed": list(self.members_not_listed),
            "payloads_dropped": self.payloads_dropped,
            "summaries_omitted": dict(self.summaries_omitted),
            "notes": list(self.notes),
            **self.get_fetch_counts(),
            "pages_fetched": self.pages_fetched,
            "units_resumed": self.units_resumed,
            "records": dict(self.records),
            "records_written": self.records_written,
            "skipped_inferences": self.skipped_inferences,
            "unknown_fields": {k: sorted(v) for k, v in self.unknown_fields.items()},
            "duration_seconds": round(self.duration_seconds, 6),
            "records_per_second": round(self.records_per_second, 3),
            "ok": self.ok,
            "error": self.error,
        }


def parse_epoch_range(text: str) -> tuple[int, int]:
    """``"A-B"`` or ``"A"`` -> (A, B); raises ValueError naming the problem."""
    first, sep, last = text.strip().partition("-")
    try:
        a = int(first)
        b = int(last) if sep else a
    except ValueError:
        raise ValueError(f"--epochs: expected A-B (e.g. 3-5) or A, got {text!r}") from None
    if a < 0 or b < a:
        raise ValueError(f"--epochs: need 0 <= A <= B, got {text!r}")
    return a, b


@contextmanager
def run_fetcher(
    result: FetchOutcome,
    options: ExportOptions,
    client: httpx.Client | None = None,
    gate: BackoffGate | None = None,
) -> Iterator[Fetcher]:
    """The one fetcher of an export run (trace or ``--aggregate``): its client (owned unless
    injected) and back-off gate; on exit the fetch counters and duration are copied into
    ``result`` whatever happened, and a failed fetch becomes :class:`ExportError` carrying it."""
    if gate is None:
        gate = BackoffGate(options.backoff_base, options.backoff_cap, jitter=options.jitter)
    own_client = client is None
    if client is None:
        limits = httpx.Limits(
            max_connections=options.concurrency * 2, max_keepalive_connections=options.concurrency
        )
        client = httpx.Client(limits=limits)
    fetcher = Fetcher(client, gate=gate, timeout=options.timeout, max_attempts=options.max_attempts)
    started = time.perf_counter()
    try:
        yield fetcher
        result.ok = True
    except ExportFetchError as exc:
        result.error = str(exc)
        raise ExportError(f"export stopped: {exc}", cast(ExportResultLike, result)) from exc
    except ExportError as exc:
        result.error = str(exc)
        exc.result = cast(ExportResultLike, result)
        raise
    finally:
        result.duration_seconds = time.perf_counter() - started
        result.process_fetch_stats(fetcher.stats())
        if own_client:
            client.close()
