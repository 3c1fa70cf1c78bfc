"""Cosmos ``PageRequest`` / ``PageResponse`` over :meth:`keepersim.chain.Chain.get_page`.

``pagination.key`` (base64 of the key to start at, as a previous ``next_key``),
``pagination.offset`` (not with a key), ``pagination.limit`` (default 100, at most 1000),
``pagination.count_total`` (``total`` is counted only then, as in Cosmos; otherwise ``"0"``).
``pagination.reverse=true`` is not supported (400). A page is read in one consistent view of the
last committed block.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from keepersim.chain import Chain
from keepersim.server.query_params import parse_bool, parse_uint
from keepersim.server.responses import ApiError
from keepersim.server.state import ServerConfig
from keepersim.types.chain_json import compute_chain_json

__all__ = ["PageRequest", "get_chain_page", "parse_page"]


@dataclass(frozen=True, slots=True)
class PageRequest:
    key: bytes | None
    offset: int
    limit: int
    count_total: bool


def _decode_key(text: str) -> bytes:
    # A '+' sent unencoded in a query string arrives as a space; accept URL-safe base64 too.
    raw = text.replace(" ", "+").replace("-", "+").replace("_", "/")
    raw += "=" * (-len(raw) % 4)
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400, f"invalid pagination.key: not base64 (as a previous next_key): {text!r}"
        ) from None


def parse_page(params: Mapping[str, str], config: ServerConfig) -> PageRequest:
    key_text = params.get("pagination.key")
    key = _decode_key(key_text) if key_text else None
    offset_text = params.get("pagination.offset")
    offset = parse_uint(offset_text, "pagination.offset") if offset_text else 0
    if key is not None and offset:
        raise ApiError(400, "invalid pagination.offset: cannot be used with pagination.key")
    limit_text = params.get("pagination.limit")
    limit = config.default_page_limit
    if limit_text:
        limit = parse_uint(limit_text, "pagination.limit")
        if not 1 <= limit <= config.max_page_limit:
            raise ApiError(
                400,
                f"invalid pagination.limit: must be between 1 and {config.max_page_limit}, "
                f"got {limit}",
            )
    if parse_bool(params, "pagination.reverse"):
        raise ApiError(400, "invalid pagination.reverse: reverse pagination is not supported")
    return PageRequest(key, offset, limit, parse_bool(params, "pagination.count_total"))


def get_chain_page(
    chain: Chain, prefix: bytes, page: PageRequest, decode: Callable[[bytes], Message]
) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """One page of the collection under ``prefix``: its height, items (chain JSON) and the
    ``PageResponse`` JSON."""
    read = chain.get_page(
        prefix,
        key=page.key or b"",
        offset=page.offset,
        limit=page.limit,
        count_total=page.count_total,
    )
    items = [compute_chain_json(decode(raw)) for raw in read.values]
    next_key = read.next_key
    return (
        read.height,
        items,
        {
            "next_key": None if next_key is None else base64.b64encode(next_key).decode(),
            "total": str(read.total),
        },
    )
