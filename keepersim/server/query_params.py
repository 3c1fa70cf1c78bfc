"""Query and path parameters, checked: a bad one is a 400 :class:`ApiError` naming it."""

from __future__ import annotations

from collections.abc import Mapping

from keepersim.server.responses import ApiError
from keepersim.types import keys

__all__ = ["parse_bool", "parse_model", "parse_uint"]


def parse_bool(params: Mapping[str, str], name: str) -> bool:
    """A ``true`` / ``false`` (or ``1`` / ``0``) flag; absent or empty is false."""
    value = params.get(name)
    if value is None or value == "":
        return False
    low = value.lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ApiError(400, f"invalid {name}: expected true or false, got {value!r}")


def parse_uint(value: str, name: str) -> int:
    """A decimal uint64 (the chain's path and query integers)."""
    if not (value.isascii() and value.isdigit()):  # str.isdigit alone accepts '²
        raise ApiError(400, f"invalid {name}: expected an unsigned integer, got {value!r}")
    n = int(value)
    if n > keys.U64_MAX:
        raise ApiError(400, f"invalid {name}: {value} does not fit in a uint64")
    return n


def parse_model(params: Mapping[str, str], name: str) -> str:
    """A model id query parameter (default ""): any text without a NUL byte (a store key)."""
    value = params.get(name, "")
    if "\x00" in value:
        raise ApiError(400, f"invalid {name}: expected a model id without NUL bytes, got {value!r}")
    return value
