"""The chain's ``Decimal`` (``inference/params.proto``; upstream's shopspring decimal) at gonka v0.2.14
(commit ee730031decedd2428aa56c65084ae5ab33d9192): built from an exact decimal, read as an exact
value, and converted as upstream converts it (``ToLegacyDec``) and prints it (``String()``), for
the params rules (:mod:`keepersim.types.chain_params`) to say what Go would.

- ``compute_chain_decimal``: the chain's ``Decimal`` in upstream's shortest form
  (``DecimalFromFloat``, params.go:1312), from an exact decimal string.
- ``compute_legacy_dec`` follows cosmossdk.io/math v1.5.3 ``LegacyNewDecFromStr``
  (``maxDecBitLen`` = 256 + 59 bits; the "exceeds max precision by %d" count is negative, as
  upstream prints it). A Decimal whose exponent is beyond ±10000 is out of range/precision as
  upstream says, but its digit string is abbreviated (Go would build a string that long).
"""

from __future__ import annotations

import decimal

from keepersim.types.pb.inference.inference.params_pb2 import Decimal

__all__ = [
    "LEGACY_MAX_DEC_BIT_LEN",
    "LEGACY_PRECISION",
    "compute_chain_decimal",
    "compute_legacy_dec",
    "get_chain_decimal_value",
    "get_legacy_dec_string",
    "get_shopspring_string",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# cosmossdk.io/math v1.5.3 LegacyDec: 18 decimals; maxDecBitLen = MaxBitLen + decimalTruncateBits.
LEGACY_PRECISION = 18
LEGACY_MAX_DEC_BIT_LEN = 256 + 59
_MAX_SPELLED_EXPONENT = 10_000


def compute_chain_decimal(value: str | int) -> Decimal:
    """The chain's ``Decimal`` for an exact decimal, in ``DecimalFromFloat``'s shortest form.

    shopspring ``NewFromFloat`` keeps the shortest digit string with no trailing zeros, so 0.98 is
    {98,-2}, 100 is {1,2} and 0 is {0,0}. Taking a string (never a float) keeps it exact.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"chain decimal: expected a decimal string or an int, got {value!r}")
    try:
        parsed = (
            decimal.Decimal(value) if isinstance(value, int) else decimal.Decimal(value.strip())
        )
    except decimal.InvalidOperation:
        raise ValueError(f"chain decimal: {value!r} is not a decimal number") from None
    if not parsed.is_finite():
        raise ValueError(f"chain decimal: {value!r} is not a finite number")
    sign, digit_tuple, exponent = parsed.as_tuple()
    if not isinstance(exponent, int):  # unreachable for a finite number; keeps mypy exact
        raise ValueError(f"chain decimal: {value!r} is not a finite number")
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return Decimal(value=0, exponent=0)
    significant = digits.rstrip("0")
    exponent += len(digits) - len(significant)
    if len(significant) > 19:  # checked before int(): more digits than any int64 holds
        raise ValueError(f"chain decimal: {value!r}: {significant} does not fit int64")
    coefficient = -int(significant) if sign else int(significant)
    if not INT64_MIN <= coefficient <= INT64_MAX:
        raise ValueError(f"chain decimal: {value!r}: coefficient {coefficient} does not fit int64")
    if not INT32_MIN <= exponent <= INT32_MAX:
        raise ValueError(f"chain decimal: {value!r}: exponent {exponent} does not fit int32")
    return Decimal(value=coefficient, exponent=exponent)


def get_chain_decimal_value(d: Decimal) -> decimal.Decimal:
    """The exact value ``value × 10^exponent`` (upstream ``ToDecimal``), with no rounding."""
    digits = tuple(int(c) for c in str(abs(d.value)))
    return decimal.Decimal((1 if d.value < 0 else 0, digits, d.exponent))


def _get_trimmed(d: Decimal) -> tuple[int, int]:
    """(coefficient, exponent) with trailing zeros moved into the exponent; 0 is (0, 0)."""
    value, exponent = d.value, d.exponent
    if value == 0:
        return 0, 0
    while value % 10 == 0:
        value //= 10
        exponent += 1
    return value, exponent


def get_shopspring_string(d: Decimal) -> str:
    """shopspring ``Decimal.String()`` of ``decimal.New(value, exponent)``."""
    value, exponent = _get_trimmed(d)
    sign = "-" if value < 0 else ""
    digits = str(abs(value))
    if abs(exponent) > _MAX_SPELLED_EXPONENT:
        return f"{sign}{digits}e{exponent:+d}"
    if exponent >= 0:
        return f"{sign}{digits}{'0' * exponent}" if value else "0"
    if len(digits) > -exponent:
        return f"{sign}{digits[:exponent]}.{digits[exponent:]}"
    return f"{sign}0.{'0' * (-exponent - len(digits))}{digits}"


def get_legacy_dec_string(scaled: int) -> str:
    """cosmossdk ``LegacyDec.String()``: always 18 decimals."""
    digits = str(abs(scaled)).rjust(LEGACY_PRECISION + 1, "0")
    return f"{'-' if scaled < 0 else ''}{digits[:-LEGACY_PRECISION]}.{digits[-LEGACY_PRECISION:]}"


def compute_legacy_dec(d: Decimal) -> tuple[int, str]:
    """``Decimal.ToLegacyDec()``: (value × 10^18, "") or (0, upstream's error text)."""
    value, exponent = _get_trimmed(d)
    text = get_shopspring_string(d).lstrip("-")
    if exponent < 0 and -exponent > LEGACY_PRECISION:
        return 0, (
            f"value '{text}' exceeds max precision by {LEGACY_PRECISION + exponent} decimal "
            f"places: max precision {LEGACY_PRECISION}"
        )
    if exponent > _MAX_SPELLED_EXPONENT:
        bits = int(exponent * 3.321928094887362) + abs(value).bit_length()
        return 0, f"decimal '{text}' out of range; bitLen: got {bits}, max {LEGACY_MAX_DEC_BIT_LEN}"
    scaled = abs(value) * 10 ** (exponent + LEGACY_PRECISION)
    if scaled.bit_length() > LEGACY_MAX_DEC_BIT_LEN:
        return 0, (
            f"decimal '{text}' out of range; bitLen: got {scaled.bit_length()}, "
            f"max {LEGACY_MAX_DEC_BIT_LEN}"
        )
    return (-scaled if value < 0 else scaled), ""
