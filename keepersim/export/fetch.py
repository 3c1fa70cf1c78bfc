"""JSON fetching for exporters: bounded retries and a shared back-off.

Semantics (from the export back-off fix):

* client timeout 60 s by default (a short timeout abandons requests that keep
  running server-side, and the next request piles more load on);
* at most ``max_attempts`` (3) attempts, retried only on timeout, transport
  error, HTTP 429, HTTP 5xx except 501 and a 2xx answer whose body is not valid
  JSON (a truncated body: the answer of an overloaded proxy or a cut connection,
  worth asking again like a transport error);
* any other non-2xx status (4xx: the request itself is wrong; 501: the gateway's
  "no such route", gRPC code 12, which no retry changes) fails at once, with the
  gateway's gRPC ``code`` when the body is ``{"code", "message", "details"}``;
* every retryable failure pauses all workers sharing the
  :class:`~keepersim.export.backoff.BackoffGate` (at least as long as the
  answer's ``Retry-After`` says), and every attempt first waits for the gate.

A :class:`Fetcher` is meant to be shared by the exporter's worker threads
(``DEFAULT_CONCURRENCY`` of them by default); its counters are thread-safe.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

from keepersim.export.backoff import BackoffGate

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TIMEOUT_SECONDS",
    "ExportFetchError",
    "FetchStats",
    "Fetcher",
    "JsonResponse",
    "QueryParams",
    "is_retryable_status",
    "parse_retry_after",
]

DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_ATTEMPTS = 3

_BODY_EXCERPT_CHARS = 200

QueryValue = str | int | float | bool | None
QueryParams = Mapping[str, QueryValue | Sequence[QueryValue]]


def is_retryable_status(status_code: int) -> bool:
    """HTTP 429 and 5xx are worth retrying, except 501 (the gateway's unknown route: no retry
    makes it known); every other status is final."""
    return status_code == 429 or (500 <= status_code <= 599 and status_code != 501)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (None when absent or bad)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class ExportFetchError(Exception):
    """A GET failed for good.

    Attributes:
        url: the full request URL, query included.
        reason: what went wrong (status code, JSON error position, ...).
        status_code: the last HTTP status received, if any.
        attempts: attempts made.
        retryable: whether the last failure was of a retryable kind (so the
            request gave up after ``attempts`` attempts).
        grpc_code: the gateway's gRPC code from a JSON error body, if any
            (12: Unimplemented, an unknown route).
    """

    def __init__(
        self,
        url: str,
        reason: str,
        *,
        status_code: int | None = None,
        attempts: int = 1,
        retryable: bool = False,
        grpc_code: int | None = None,
    ) -> None:
        if retryable:
            message = f"GET {url} failed after {attempts} attempt(s): {reason}"
        else:
            message = f"GET {url} failed: {reason}"
        super().__init__(message)
        self.url = url
        self.reason = reason
        self.status_code = status_code
        self.attempts = attempts
        self.retryable = retryable
        self.grpc_code = grpc_code


@dataclass(frozen=True, slots=True)
class JsonResponse:
    """A decoded 2xx body and the answer's headers (names lower-cased)."""

    body: Any
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class FetchStats:
    """Counter snapshot.

    Attributes:
        requests: HTTP requests sent (attempts).
        retries: attempts made after a retryable failure.
        errors: retryable failures seen (timeouts, transport errors, 429, 5xx,
            2xx bodies that are not JSON).
        fatal_errors: non-retryable failures (4xx, other non-2xx).
        gave_up: ``get_json`` calls that exhausted their attempts.
        backoff_pauses: pauses of the shared gate (``fetch_backoff_pauses``).
        bad_bodies: the retryable failures that were 2xx bodies not valid JSON.
    """

    requests: int
    retries: int
    errors: int
    fatal_errors: int
    gave_up: int
    backoff_pauses: int
    bad_bodies: int = 0


class _RetryableFailure(Exception):
    def __init__(
        self,
        reason: str,
        status_code: int | None = None,
        *,
        bad_body: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status_code = status_code
        self.bad_body = bad_body
        self.retry_after = retry_after


class Fetcher:
    """GETs JSON documents with bounded retries and a shared back-off gate.

    Args:
        client: HTTP client to use; the fetcher creates (and :meth:`close`
            closes) its own when omitted. An injected client is not closed.
        gate: back-off gate shared by all workers; a fresh
            :class:`BackoffGate` when omitted (shared by every thread using
            this fetcher).
        timeout: per-request timeout in seconds (connect, read, write, pool).
        max_attempts: attempts per ``get_json`` call, at least 1.
    """

    def __init__(
        self,
        client: httpx.Client | None = None,
        *,
        gate: BackoffGate | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client()
        self._gate = gate if gate is not None else BackoffGate()
        self._timeout = float(timeout)
        self._max_attempts = max_attempts
        self._lock = threading.Lock()
        self._requests = 0
        self._retries = 0
        self._errors = 0
        self._fatal_errors = 0
        self._gave_up = 0
        self._bad_bodies = 0

    @property
    def gate(self) -> BackoffGate:
        return self._gate

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    def get_json(self, url: str, params: QueryParams | None = None) -> Any:
        """GET ``url`` (with query ``params``) and return the decoded JSON body.

        Raises:
            ExportFetchError: a non-retryable failure, or retryable failures
                on every one of ``max_attempts`` attempts. The message names
                the full URL and the cause.
        """
        return self.get_response(url, params).body

    def get_response(
        self,
        url: str,
        params: QueryParams | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> JsonResponse:
        """As :meth:`get_json`, sending ``headers`` (e.g. a height pin), with the answer's
        headers."""
        attempt = 1
        while True:
            self._gate.wait()
            request = self._client.build_request(
                "GET", url, params=params, headers=headers, timeout=httpx.Timeout(self._timeout)
            )
            full_url = str(request.url)
            self._count(requests=1, retries=1 if attempt > 1 else 0)
            try:
                return self._attempt(request, full_url)
            except _RetryableFailure as failure:
                self._count(errors=1, bad_bodies=1 if failure.bad_body else 0)
                self._gate.pause(attempt, at_least=failure.retry_after)
                if attempt >= self._max_attempts:
                    self._count(gave_up=1)
                    raise ExportFetchError(
                        full_url,
                        failure.reason,
                        status_code=failure.status_code,
                        attempts=attempt,
                        retryable=True,
                    ) from failure.__cause__
                attempt += 1
            except ExportFetchError as error:
                self._count(fatal_errors=1)
                error.attempts = attempt
                raise

    def stats(self) -> FetchStats:
        """Snapshot of the counters."""
        with self._lock:
            return FetchStats(
                requests=self._requests,
                retries=self._retries,
                errors=self._errors,
                fatal_errors=self._fatal_errors,
                gave_up=self._gave_up,
                backoff_pauses=self._gate.pauses,
                bad_bodies=self._bad_bodies,
            )

    def close(self) -> None:
        """Close the HTTP client if this fetcher created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ------------------------------------------------------------

    def _attempt(self, request: httpx.Request, full_url: str) -> JsonResponse:
        """One attempt: the decoded body, or _RetryableFailure / ExportFetchError (a 4xx or
        another non-2xx status)."""
        try:
            response = self._client.send(request)
        except httpx.TimeoutException as exc:
            raise _RetryableFailure(
                f"timed out after {self._timeout:g}s ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            raise _RetryableFailure(f"transport error: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if is_retryable_status(status):
            raise _RetryableFailure(
                _describe_status(response),
                status_code=status,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        if not response.is_success:
            raise ExportFetchError(
                full_url,
                _describe_status(response),
                status_code=status,
                grpc_code=_get_grpc_code(response),
            )
        try:
            body = json.loads(response.content)
        except json.JSONDecodeError as exc:
            raise _RetryableFailure(
                f"invalid JSON in HTTP {status} response: {exc.msg} at line {exc.lineno} "
                f"column {exc.colno} (char {exc.pos})",
                status_code=status,
                bad_body=True,
            ) from exc
        except UnicodeDecodeError as exc:
            raise _RetryableFailure(
                f"invalid JSON in HTTP {status} response: undecodable byte at position "
                f"{exc.start} ({exc.reason})",
                status_code=status,
                bad_body=True,
            ) from exc
        return JsonResponse(body, {k.lower(): v for k, v in response.headers.items()})

    def _count(
        self,
        *,
        requests: int = 0,
        retries: int = 0,
        errors: int = 0,
        fatal_errors: int = 0,
        gave_up: int = 0,
        bad_bodies: int = 0,
    ) -> None:
        with self._lock:
            self._requests += requests
            self._retries += retries
            self._errors += errors
            self._fatal_errors += fatal_errors
            self._gave_up += gave_up
            self._bad_bodies += bad_bodies


def _get_grpc_code(response: httpx.Response) -> int | None:
    """The ``code`` of the gateway's error body ``{"code", "message", "details"}``."""
    try:
        body = json.loads(response.content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    code = body.get("code") if isinstance(body, dict) else None
    return code if type(code) is int else None


def _describe_status(response: httpx.Response) -> str:
    text = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    try:
        body = response.text.strip()
    except (UnicodeDecodeError, LookupError):
        body = ""
    if body:
        excerpt = body[:_BODY_EXCERPT_CHARS]
        if len(body) > _BODY_EXCERPT_CHARS:
            excerpt += "..."
        text += f": {excerpt}"
    return text
