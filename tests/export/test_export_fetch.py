"""Fetcher: bounded retries on timeout / transport / 429 / 5xx / a 2xx body that is not JSON
only (a 4xx fails at once), shared back-off, counters."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from keepersim.export.backoff import BackoffGate
from keepersim.export.fetch import (
    ExportFetchError,
    Fetcher,
    QueryParams,
    is_retryable_status,
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


URL = "http://verify.test/v1/intelligence/servers/acme/tool"
PARAMS: QueryParams = {"fields": "policy", "page": 2}
FULL_URL = URL + "?fields=policy&page=2"

Handler = Callable[[httpx.Request], httpx.Response]


class Script:
    """A MockTransport handler replaying responses (or raising exceptions) in order."""

    def __init__(self, *steps: httpx.Response | Exception, fake: FakeTime | None = None) -> None:
        self._steps = list(steps)
        self._lock = threading.Lock()
        self._fake = fake
        self.requests: list[httpx.Request] = []
        self.sent_at: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.requests.append(request)
            if self._fake is not None:
                self.sent_at.append(self._fake.clock())
            step = self._steps[min(len(self.requests), len(self._steps)) - 1]
        if isinstance(step, Exception):
            raise step
        return step


def ok(payload: Any) -> httpx.Response:
    return httpx.Response(200, json=payload)


def make_fetcher(handler: Handler, fake: FakeTime, **kwargs: Any) -> Fetcher:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    return Fetcher(client, gate=gate, **kwargs)


def test_success_returns_the_decoded_json_with_the_default_timeout() -> None:
    fake = FakeTime()
    script = Script(ok({"name": "tool", "score": 0.5}))
    fetcher = make_fetcher(script, fake)
    assert fetcher.get_json(URL, PARAMS) == {"name": "tool", "score": 0.5}
    [request] = script.requests
    assert str(request.url) == FULL_URL
    assert request.extensions["timeout"] == {"connect": 60, "read": 60, "write": 60, "pool": 60}
    stats = fetcher.stats()
    assert (stats.requests, stats.retries, stats.errors, stats.fatal_errors) == (1, 0, 0, 0)
    assert fake.sleeps == []


def test_custom_timeout_is_applied() -> None:
    script = Script(ok([]))
    fetcher = make_fetcher(script, FakeTime(), timeout=7.5)
    fetcher.get_json(URL)
    assert script.requests[0].extensions["timeout"]["read"] == 7.5


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_429_and_5xx_are_retried_with_a_shared_pause_between_attempts(status: int) -> None:
    fake = FakeTime()
    script = Script(httpx.Response(status), httpx.Response(status), ok({"ok": True}), fake=fake)
    fetcher = make_fetcher(script, fake)
    assert fetcher.get_json(URL, PARAMS) == {"ok": True}
    assert len(script.requests) == 3
    assert fake.sleeps == [5, 10]  # base * 2**(n-1) after the n-th failure
    assert script.sent_at == [1000, 1005, 1015]
    stats = fetcher.stats()
    assert (stats.requests, stats.retries, stats.errors, stats.fatal_errors) == (3, 2, 2, 0)
    assert (stats.gave_up, stats.backoff_pauses) == (0, 2)


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ConnectError("connection refused"),
        httpx.RemoteProtocolError("server disconnected"),
    ],
)
def test_timeouts_and_transport_errors_are_retried(exc: Exception) -> None:
    fake = FakeTime()
    fetcher = make_fetcher(Script(exc, ok(1)), fake)
    assert fetcher.get_json(URL) == 1
    assert fake.sleeps == [5]
    assert fetcher.stats().errors == 1


def test_retries_are_bounded() -> None:
    fake = FakeTime()
    script = Script(httpx.Response(503, text="overloaded"))
    fetcher = make_fetcher(script, fake)
    with pytest.raises(ExportFetchError) as info:
        fetcher.get_json(URL, PARAMS)
    error = info.value
    assert len(script.requests) == 3
    assert (
        str(error)
        == f"GET {FULL_URL} failed after 3 attempt(s): HTTP 503 Service Unavailable: overloaded"
    )
    assert (error.url, error.status_code, error.attempts, error.retryable) == (
        FULL_URL,
        503,
        3,
        True,
    )
    # The third failure pauses the other workers too; this caller gives up at once.
    assert fake.sleeps == [5, 10]
    assert fetcher.gate.remaining() == 20
    stats = fetcher.stats()
    assert (stats.requests, stats.retries, stats.errors, stats.fatal_errors) == (3, 2, 3, 0)
    assert (stats.gave_up, stats.backoff_pauses) == (1, 3)


def test_timeout_exhaustion_names_the_timeout() -> None:
    fake = FakeTime()
    fetcher = make_fetcher(Script(httpx.ReadTimeout("slow")), fake, max_attempts=2)
    with pytest.raises(
        ExportFetchError, match=r"failed after 2 attempt\(s\): timed out after 60s"
    ) as info:
        fetcher.get_json(URL)
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


def test_max_attempts_one_means_no_retry() -> None:
    fake = FakeTime()
    script = Script(httpx.Response(500), ok(1))
    fetcher = make_fetcher(script, fake, max_attempts=1)
    with pytest.raises(ExportFetchError):
        fetcher.get_json(URL)
    assert len(script.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422, 301, 304])
def test_other_statuses_fail_at_once(status: int) -> None:
    fake = FakeTime()
    script = Script(httpx.Response(status, text="no such server"), ok(1))
    fetcher = make_fetcher(script, fake)
    with pytest.raises(ExportFetchError) as info:
        fetcher.get_json(URL, PARAMS)
    error = info.value
    assert len(script.requests) == 1
    assert str(error).startswith(f"GET {FULL_URL} failed: HTTP {status} ")
    assert "no such server" in str(error)
    assert (error.status_code, error.attempts, error.retryable) == (status, 1, False)
    assert fake.sleeps == []
    stats = fetcher.stats()
    assert (stats.requests, stats.errors, stats.fatal_errors, stats.backoff_pauses) == (1, 0, 1, 0)


BAD_BODIES = [
    (b'{"name": "tool",}', "line 1 column 17 (char 16)"),
    (b"", "line 1 column 1 (char 0)"),
    (b"<html>\n<h1>Bad gateway</h1>", "line 1 column 1 (char 0)"),
    (b'{"a": 1}\n{"b": 2}', "Extra data at line 2 column 1 (char 9)"),
    (
        b'{"inference": [{"index": "req-1", "mod',
        "Unterminated string starting at at line 1 column 35 (char 34)",
    ),  # cut
]


@pytest.mark.parametrize("bad", [1, 2])
@pytest.mark.parametrize(("body", "where"), BAD_BODIES)
def test_a_200_that_is_not_json_is_retried_like_a_transport_error(
    body: bytes, where: str, bad: int
) -> None:
    fake = FakeTime()
    script = Script(*[httpx.Response(200, content=body)] * bad, ok({"ok": 1}), fake=fake)
    fetcher = make_fetcher(script, fake)
    assert fetcher.get_json(URL, PARAMS) == {"ok": 1}
    assert len(script.requests) == bad + 1
    assert fake.sleeps == [5, 10][:bad]  # the same shared back-off as a 503
    stats = fetcher.stats()
    assert (stats.requests, stats.retries, stats.errors, stats.bad_bodies) == (
        bad + 1,
        bad,
        bad,
        bad,
    )
    assert (stats.fatal_errors, stats.gave_up, stats.backoff_pauses) == (0, 0, bad)


@pytest.mark.parametrize(("body", "where"), BAD_BODIES)
def test_a_200_that_is_never_json_gives_up_after_the_bounded_attempts(
    body: bytes, where: str
) -> None:
    fake = FakeTime()
    script = Script(httpx.Response(200, content=body))
    fetcher = make_fetcher(script, fake, max_attempts=4)
    with pytest.raises(ExportFetchError) as info:
        fetcher.get_json(URL, PARAMS)
    error = info.value
    assert str(error).startswith(
        f"GET {FULL_URL} failed after 4 attempt(s): invalid JSON in HTTP 200 response: "
    )
    assert str(error).endswith(where)
    assert isinstance(error.__cause__, json.JSONDecodeError)
    assert (error.url, error.status_code, error.attempts, error.retryable) == (
        FULL_URL,
        200,
        4,
        True,
    )
    assert len(script.requests) == 4 and fake.sleeps == [5, 10, 20]
    stats = fetcher.stats()
    assert (stats.errors, stats.bad_bodies, stats.gave_up, stats.fatal_errors) == (4, 4, 1, 0)


def test_an_undecodable_body_is_retried_then_named() -> None:
    fake = FakeTime()
    fetcher = make_fetcher(Script(httpx.Response(200, content=b'{"a": "\xff"}')), fake)
    with pytest.raises(ExportFetchError, match=r"after 3 attempt\(s\): invalid JSON .*position 7"):
        fetcher.get_json(URL)
    assert fetcher.stats().bad_bodies == 3


def test_a_404_after_a_bad_body_still_fails_at_once() -> None:
    fake = FakeTime()
    script = Script(httpx.Response(200, content=b"{"), httpx.Response(404, text="gone"), ok(1))
    fetcher = make_fetcher(script, fake)
    with pytest.raises(ExportFetchError, match=r"failed: HTTP 404 Not Found: gone$") as info:
        fetcher.get_json(URL)
    assert len(script.requests) == 2 and info.value.attempts == 2
    assert fetcher.stats().fatal_errors == 1 and fake.sleeps == [5]


def test_a_pause_from_another_worker_delays_the_next_request() -> None:
    fake = FakeTime()
    script = Script(ok(1), fake=fake)
    fetcher = make_fetcher(script, fake)
    fetcher.gate.pause(3)  # another worker's third consecutive failure: 20 s
    worker = threading.Thread(target=fetcher.get_json, args=(URL,))
    worker.start()
    worker.join(5)
    assert fake.sleeps == [20]
    assert script.sent_at == [1020]


def test_one_worker_failure_pauses_every_worker() -> None:
    """4 workers share a fetcher; after the 503, no worker sends until the pause is over."""
    fake = FakeTime()
    lock = threading.Lock()
    sent_at: dict[str, list[float]] = {}
    first_failure = threading.Event()
    others_may_go = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        with lock:
            sent_at.setdefault(path, []).append(fake.clock())
            attempt = len(sent_at[path])
        if path == "/0" and attempt == 1:
            first_failure.set()
            return httpx.Response(503)
        return ok(path)

    fetcher = make_fetcher(handler, fake)
    results: dict[str, Any] = {}

    def worker(path: str) -> None:
        if path != "/0":
            assert others_may_go.wait(5)
        results[path] = fetcher.get_json("http://verify.test" + path)

    threads = [threading.Thread(target=worker, args=(f"/{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    assert first_failure.wait(5)
    # Let the gate record the pause before the other workers ask it.
    while fetcher.gate.pauses == 0:
        threading.Event().wait(0.001)
    others_may_go.set()
    for thread in threads:
        thread.join(5)

    assert results == {f"/{i}": f"/{i}" for i in range(4)}
    assert sent_at["/0"][0] == 1000
    every_later_send = [t for path, times in sent_at.items() for t in times if t != 1000]
    assert len(every_later_send) == 4
    assert all(t >= 1005 for t in every_later_send)
    assert fetcher.stats().backoff_pauses == 1


def test_counters_are_thread_safe() -> None:
    fake = FakeTime()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500) if request.url.params.get("fail") == "1" else ok(0)

    fetcher = make_fetcher(handler, fake, max_attempts=2)

    def worker(i: int) -> None:
        for j in range(25):
            with contextlib.suppress(ExportFetchError):
                fetcher.get_json(URL, {"fail": int((i + j) % 5 == 0)})

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    failing_calls = sum(1 for i in range(8) for j in range(25) if (i + j) % 5 == 0)
    stats = fetcher.stats()
    assert stats.requests == 200 + failing_calls
    assert stats.retries == failing_calls
    assert stats.errors == 2 * failing_calls
    assert stats.gave_up == failing_calls
    assert stats.backoff_pauses == 2 * failing_calls


def test_retryable_statuses() -> None:
    expected = [429, 500, *range(502, 600)]  # 501: the gateway's unknown route, never retried
    assert [s for s in range(100, 600) if is_retryable_status(s)] == expected


def test_rejects_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        Fetcher(timeout=0)
    with pytest.raises(ValueError):
        Fetcher(max_attempts=0)


# -- the real transport path ---------------------------------------------------


class _FlakyHandler(http.server.BaseHTTPRequestHandler):
    """Answers 503 twice, then 200 with a JSON body echoing the query."""

    lock = threading.Lock()
    statuses: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        with self.lock:
            status = 503 if len(self.statuses) < 2 else 200
            self.statuses.append(status)
        body = json.dumps({"path": self.path}).encode() if status == 200 else b"try again later"
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if status == 200 else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature
        pass


@pytest.fixture
def flaky_server() -> Iterator[tuple[str, list[int]]]:
    statuses: list[int] = []
    handler = type("Handler", (_FlakyHandler,), {"statuses": statuses, "lock": threading.Lock()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}", statuses
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_real_server_503_twice_then_200(flaky_server: tuple[str, list[int]]) -> None:
    base_url, statuses = flaky_server
    fake = FakeTime()
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    with httpx.Client() as client:
        fetcher = Fetcher(client, gate=gate, timeout=5)
        result = fetcher.get_json(base_url + "/v1/intelligence/servers/acme/tool", {"x": "1 2"})
    assert result == {"path": "/v1/intelligence/servers/acme/tool?x=1+2"}
    assert statuses == [503, 503, 200]
    assert fake.sleeps == [5, 10]
    stats = fetcher.stats()
    assert (stats.requests, stats.retries, stats.errors, stats.backoff_pauses) == (3, 2, 2, 2)


def test_real_server_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # find a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fake = FakeTime()
    gate = BackoffGate(clock=fake.clock, sleep=fake.sleep)
    expected = (
        rf"GET http://127\.0\.0\.1:{port}/x\?q=1 failed after 3 attempt\(s\): transport error"
    )
    with (
        Fetcher(gate=gate, timeout=2) as fetcher,
        pytest.raises(ExportFetchError, match=expected),
    ):
        fetcher.get_json(f"http://127.0.0.1:{port}/x", {"q": 1})
    assert fake.sleeps == [5, 10]
