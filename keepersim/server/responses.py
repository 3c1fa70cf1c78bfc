"""Answers and errors as the chain's REST gateway sends them.

A handler returns an :data:`Answer` (a JSON payload and its headers) or raises :class:`ApiError`;
:func:`answer` runs it in the threadpool and turns either into a response. Errors are the
gateway's JSON ``{"code": <gRPC code>, "message": ..., "details": []}``: 400 for a bad parameter
(the message names it), 404 for an unknown id / epoch / model / route, 405 for a wrong method,
409 for a block posted while a runner drives the chain, 500 for a bug, 503 (``Retry-After: 1``)
when no executor can be selected or a cold cache computation did not finish in time. Every chain
answer carries :func:`compute_height_headers`: the height it was read at, under the header newer
SDKs send and the one grpc-gateway forwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from keepersim.types.errors import KeepersimError
from keepersim.types.rest_routes import GATEWAY_HEIGHT_HEADER, HEIGHT_HEADER

__all__ = [
    "GRPC_CODES",
    "Answer",
    "ApiError",
    "answer",
    "compute_error_body",
    "compute_height_headers",
    "error_response",
]

#: gRPC status codes of the HTTP statuses keepersim answers with (the gateway's mapping; any
#: other status is code 2, Unknown).
GRPC_CODES = {400: 3, 404: 5, 409: 9, 429: 8, 500: 13, 503: 14}

#: What a handler returns: the JSON payload (or a ready :class:`Response`) and its headers.
Answer = tuple[Any, dict[str, str]]


class ApiError(Exception):
    """An HTTP error answer: status and message (the message names the bad parameter)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def compute_height_headers(height: int) -> dict[str, str]:
    return {HEIGHT_HEADER: str(height), GATEWAY_HEIGHT_HEADER: str(height)}


def compute_error_body(status: int, message: str) -> dict[str, Any]:
    return {"code": GRPC_CODES.get(status, 2), "message": message, "details": []}


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse(
        compute_error_body(status, message), status_code=status, headers=dict(headers or {})
    )


async def answer(fn: Callable[..., Answer], *args: Any, **kwargs: Any) -> Response:
    """``fn``'s answer, run in the threadpool (the event loop never blocks on the chain); an
    :class:`ApiError` is its error response, any other keepersim error a 400 naming its type."""
    try:
        payload, headers = await run_in_threadpool(fn, *args, **kwargs)
    except ApiError as exc:
        return error_response(exc.status, exc.message, exc.headers)
    except KeepersimError as exc:
        return error_response(400, f"{type(exc).__name__}: {exc}")
    if isinstance(payload, Response):
        return payload
    return JSONResponse(payload, headers=headers)
