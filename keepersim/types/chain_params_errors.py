"""How a broken rule of the chain's params is reported, as upstream's ``Validate`` functions print
it (gonka v0.2.14, commit ee730031decedd2428aa56c65084ae5ab33d9192): Go's ``%q`` and
``hex.DecodeString`` texts, nil checks, and the ``ToLegacyDec`` checks the rules of
:mod:`keepersim.types.chain_params` share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NoReturn

from google.protobuf.message import Message

from keepersim.types.chain_decimal import (
    LEGACY_PRECISION,
    compute_legacy_dec,
    get_chain_decimal_value,
)
from keepersim.types.errors import InvalidParamsError
from keepersim.types.pb.inference.inference.params_pb2 import (
    BitcoinRewardParams,
    Decimal,
    DynamicPricingParams,
    TokenomicsParams,
    ValidationParams,
)

__all__ = [
    "GO_NIL_DEREFERENCE",
    "LEGACY_ONE",
    "check_decimal",
    "fail",
    "get_go_quoted",
    "get_hex_error",
    "is_set",
    "require_decimals",
]

GO_NIL_DEREFERENCE = "runtime error: invalid memory address or nil pointer dereference"
LEGACY_ONE = 10**LEGACY_PRECISION  # 1 as a LegacyDec's scaled integer


def get_go_quoted(text: str) -> str:
    """Go's ``%q`` for ordinary strings (printable text; control characters escaped)."""
    return json.dumps(text, ensure_ascii=False)


def get_hex_error(text: str) -> str:
    """``hex.DecodeString`` error text, or "" when ``text`` is valid hex."""
    raw = text.encode("utf-8")
    for byte in raw:
        if chr(byte) not in "0123456789abcdefABCDEF":
            shown = chr(byte)
            tail = f" '{shown}'" if shown.isprintable() else ""
            return f"encoding/hex: invalid byte: U+{byte:04X}{tail}"
    if len(raw) % 2:
        return "encoding/hex: odd length hex string"
    return ""


def is_set(message: Message, name: str) -> bool:
    """Whether the sub-message ``name`` is set (non-nil upstream); the name comes from a table."""
    return message.HasField(name)


def fail(field: str, rule: str, value: object) -> NoReturn:
    raise InvalidParamsError(field, rule, value)


def require_decimals(
    message: ValidationParams | TokenomicsParams | BitcoinRewardParams | DynamicPricingParams,
    prefix: str,
    checks: tuple[tuple[str, str], ...],
) -> None:
    for name, text in checks:
        if not is_set(message, name):
            fail(f"{prefix}.{name}", text, None)


def check_decimal(
    field: str,
    d: Decimal,
    wrap: str,
    rule: Callable[[int], str],
) -> None:
    """One ``ToLegacyDec`` check: a conversion error, or ``rule(scaled)`` when it is not ""."""
    scaled, error = compute_legacy_dec(d)
    problem = error or rule(scaled)
    if problem:
        fail(field, f"{wrap}: {problem}" if wrap else problem, get_chain_decimal_value(d))
