"""Fault injection for tests and demos: an ASGI middleware answering a configurable share of
requests with 429 or 503, slowly, not at all (dropped connection) or with malformed JSON.

Spec (the ``--faults`` option): comma-separated ``kind=share`` items, e.g.
``429=0.1,503=0.2,slow=0.05:200,drop=0.02,badjson=0.01``:

``429`` / ``503``
    answer that status at once with a JSON error body (and ``Retry-After: 1``);
``slow=SHARE:MS``
    wait ``MS`` milliseconds, then answer normally;
``drop``
    start a 200 answer, send part of the body, then close the connection (the client sees a
    truncated response: a transport error);
``badjson``
    answer 200 with a body that is not valid JSON.

Shares are probabilities in [0, 1] summing to at most 1; at most one fault per request.

Determinism: the fate of a request is a function of the seed, the request's key (method, path
and query string) and how many requests with that key came before, ``blake2b(seed/key/n)``, not
of thread timing: with concurrent clients each URL still sees the same sequence of faults in
every run. ``max_streak`` (default 2; 0 = no limit) bounds the consecutive failing answers
(429, 503, drop, badjson; not slow) one key gets: the next request with that key passes. With
the default, a client that tries 3 times always gets through, so a retrying exporter finishes
and its output can be compared byte for byte with a fault-free run.

Only the requests the middleware is told to cover get faults: by default GET requests except
``/metrics``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "FAULT_KINDS",
    "FaultDecision",
    "FaultInjector",
    "FaultMiddleware",
    "FaultSpec",
    "FaultSpecError",
    "parse_fault_spec",
]

#: Fault kinds, in the order their shares are laid out on [0, 1).
FAULT_KINDS = ("429", "503", "slow", "drop", "badjson")
_FAILING = frozenset({"429", "503", "drop", "badjson"})
DEFAULT_SLOW_MS = 200
DEFAULT_MAX_STREAK = 2


class FaultSpecError(ValueError):
    """A malformed ``--faults`` spec (names the item and the rule)."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """Shares of each fault kind (probabilities per request) and the slow delay."""

    shares: dict[str, float] = field(default_factory=dict)
    slow_ms: int = DEFAULT_SLOW_MS

    def __post_init__(self) -> None:
        for kind, share in self.shares.items():
            if kind not in FAULT_KINDS:
                raise FaultSpecError(
                    f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}"
                )
            if not 0.0 <= share <= 1.0:
                raise FaultSpecError(f"{kind}: share must be in [0, 1], got {share!r}")
        total = sum(self.shares.values())
        if total > 1.0 + 1e-9:
            raise FaultSpecError(f"fault shares sum to {total:g}, more than 1")
        if self.slow_ms < 0:
            raise FaultSpecError(f"slow: delay must be >= 0 ms, got {self.slow_ms}")

    @property
    def total(self) -> float:
        return sum(self.shares.values())

    def to_text(self) -> str:
        parts = []
        for kind in FAULT_KINDS:
            share = self.shares.get(kind, 0.0)
            if share > 0:
                parts.append(f"{kind}={share:g}" + (f":{self.slow_ms}" if kind == "slow" else ""))
        return ",".join(parts)


def parse_fault_spec(text: str) -> FaultSpec:
    """Parse ``429=0.1,503=0.2,slow=0.05:200,drop=0.02,badjson=0.01`` (empty: no faults)."""
    shares: dict[str, float] = {}
    slow_ms = DEFAULT_SLOW_MS
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        kind, sep, value = item.partition("=")
        kind = kind.strip()
        if not sep:
            raise FaultSpecError(f"{item!r}: expected KIND=SHARE (e.g. 503=0.2)")
        if kind not in FAULT_KINDS:
            raise FaultSpecError(
                f"{item!r}: unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}"
            )
        if kind in shares:
            raise FaultSpecError(f"{item!r}: fault kind {kind!r} given twice")
        share_text, colon, ms_text = value.partition(":")
        if colon and kind != "slow":
            raise FaultSpecError(f"{item!r}: only slow takes a delay (slow=SHARE:MS)")
        try:
            share = float(share_text)
        except ValueError:
            raise FaultSpecError(f"{item!r}: share {share_text!r} is not a number") from None
        if colon:
            try:
                slow_ms = int(ms_text)
            except ValueError:
                raise FaultSpecError(
                    f"{item!r}: delay {ms_text!r} is not an integer (ms)"
                ) from None
        shares[kind] = share
    return FaultSpec(shares, slow_ms)


@dataclass(frozen=True, slots=True)
class FaultDecision:
    kind: str | None  # None: answer normally
    n: int  # index of this request among those with the same key


class FaultInjector:
    """Decides each request's fate (thread-safe); counts what it injected."""

    def __init__(
        self, spec: FaultSpec, *, seed: int = 0, max_streak: int = DEFAULT_MAX_STREAK
    ) -> None:
        if max_streak < 0:
            raise FaultSpecError(f"max_streak must be >= 0, got {max_streak}")
        self.spec = spec
        self.seed = seed
        self.max_streak = max_streak
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._streak: dict[str, int] = {}
        self._counts: dict[str, int] = {kind: 0 for kind in FAULT_KINDS}
        self._requests = 0
        bounds: list[tuple[float, str]] = []
        edge = 0.0
        for kind in FAULT_KINDS:
            share = spec.shares.get(kind, 0.0)
            if share > 0:
                edge += share
                bounds.append((edge, kind))
        self._bounds = bounds

    def draw(self, key: str, n: int) -> str | None:
        """The fault drawn for the ``n``-th request with ``key`` (before the streak bound)."""
        digest = hashlib.blake2b(f"{self.seed}/{key}/{n}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2.0**64
        for edge, kind in self._bounds:
            if u < edge:
                return kind
        return None

    def decide(self, key: str) -> FaultDecision:
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            self._requests += 1
            kind = self.draw(key, n)
            streak = self._streak.get(key, 0)
            if kind in _FAILING:
                if self.max_streak and streak >= self.max_streak:
                    kind = None
                    self._streak[key] = 0
                else:
                    self._streak[key] = streak + 1
            elif streak:
                self._streak[key] = 0
            if kind is not None:
                self._counts[kind] += 1
            return FaultDecision(kind, n)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "spec": self.spec.to_text(),
                "seed": self.seed,
                "max_streak": self.max_streak,
                "requests": self._requests,
                "injected": dict(self._counts),
            }


def _json_error(status: int, message: str) -> bytes:
    code = 8 if status == 429 else 14  # gRPC ResourceExhausted / Unavailable
    return json.dumps({"code": code, "message": message, "details": []}).encode()


class FaultMiddleware:
    """Pure ASGI middleware applying a :class:`FaultInjector` to HTTP requests.

    Args:
        app: the wrapped application.
        injector: decides each request's fate.
        methods: request methods that may get a fault (default GET only).
        exclude_prefixes: paths never faulted (default ``/metrics``).
    """

    def __init__(
        self,
        app: ASGIApp,
        injector: FaultInjector,
        *,
        methods: Iterable[str] = ("GET",),
        exclude_prefixes: Iterable[str] = ("/metrics",),
    ) -> None:
        self.app = app
        self.injector = injector
        self.methods = frozenset(m.upper() for m in methods)
        self.exclude = tuple(exclude_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(self.exclude):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        key = f"{scope['method']} {path}?{query}"
        decision = self.injector.decide(key)
        kind = decision.kind
        if kind is None:
            await self.app(scope, receive, send)
        elif kind in ("429", "503"):
            status = int(kind)
            body = _json_error(
                status,
                "injected fault: too many requests"
                if status == 429
                else "injected fault: service unavailable",
            )
            await _send_all(
                send,
                status,
                body,
                [(b"content-type", b"application/json"), (b"retry-after", b"1")],
            )
        elif kind == "slow":
            await asyncio.sleep(self.injector.spec.slow_ms / 1000.0)
            await self.app(scope, receive, send)
        elif kind == "drop":
            await self._drop(scope, receive, send)
        else:  # badjson
            await self._bad_json(scope, receive, send)

    async def _drop(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Announce a body, send part of it, return: the server closes the connection."""
        body = b'{"truncated": "the connection was dropped by fault injection"}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        # Returning with the body incomplete makes the server drop the connection.

    async def _bad_json(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, then replace its body by a malformed JSON document of status 200."""
        captured: list[Message] = []

        async def capture(message: Message) -> None:
            captured.append(message)

        await self.app(scope, receive, capture)
        body = b"".join(m.get("body", b"") for m in captured if m["type"] == "http.response.body")
        broken = body[: max(1, len(body) // 2)] if body.startswith((b"{", b"[")) else b"{"
        if broken == body:
            broken = b'{"malformed": '
        await _send_all(send, 200, broken, [(b"content-type", b"application/json")])


async def _send_all(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
