"""The chain's slow deactivation: a Wald SPRT on misses, in fixed-point decimal (12 digits).

Its params are the chain's (``ValidationParams``: p0 = ``downtime_good_percentage``, p1 =
``downtime_bad_percentage``, H = ``downtime_h_threshold``; gonka-ai/gonka ee730031
``keeper/sprt_precompute.go`` and ``calculations/status.go`` getInactiveStatus); keepersim's
``extension_params.sprt_enabled`` says whether it runs.

The logarithms are computed once per params with Python's decimal module (correctly rounded, so
identical on every machine) and quantized to 12 fractional digits; the running LLR is then an
integer count of 1e-12 units, as the chain's Decimal{value, exponent=-12}.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context
from decimal import Decimal as PyDecimal
from functools import lru_cache

from keepersim.types.messages import Decimal, ValidationParams
from keepersim.types.params import DECIMAL_EXPONENT, get_decimal_value

_CTX = Context(prec=40, rounding=ROUND_HALF_EVEN)
_QUANTUM = PyDecimal(1).scaleb(DECIMAL_EXPONENT)


@dataclass(frozen=True, slots=True)
class SprtConstants:
    log_fail: int  # ln(p1/p0) in 1e-12 units
    log_pass: int  # ln((1-p1)/(1-p0)) in 1e-12 units
    threshold: int  # H in 1e-12 units


def _to_units(x: PyDecimal) -> int:
    return int(x.quantize(_QUANTUM, context=_CTX).scaleb(-DECIMAL_EXPONENT))


@lru_cache(maxsize=32)
def _compute_constants(p0: PyDecimal, p1: PyDecimal, threshold: PyDecimal) -> SprtConstants:
    log_fail = _CTX.ln(_CTX.divide(p1, p0))
    log_pass = _CTX.ln(_CTX.divide(1 - p1, 1 - p0))
    return SprtConstants(_to_units(log_fail), _to_units(log_pass), _to_units(threshold))


def compute_sprt_constants(params: ValidationParams) -> SprtConstants:
    good, bad, h = (
        params.downtime_good_percentage,
        params.downtime_bad_percentage,
        params.downtime_h_threshold,
    )
    # Keyed by the decimals' integers: reading them is cheap, converting them is not.
    return _compute_for(good.value, good.exponent, bad.value, bad.exponent, h.value, h.exponent)


@lru_cache(maxsize=32)
def _compute_for(*digits: int) -> SprtConstants:
    pairs = zip(digits[::2], digits[1::2], strict=True)
    good, bad, h = (Decimal(value=v, exponent=e) for v, e in pairs)
    return _compute_constants(get_decimal_value(good), get_decimal_value(bad), get_decimal_value(h))


def compute_llr_update(llr: int, fails: int, passes: int, constants: SprtConstants) -> int:
    """LLR += fails * ln(p1/p0) + passes * ln((1-p1)/(1-p0)); never clamped."""
    return llr + fails * constants.log_fail + passes * constants.log_pass


def is_sprt_failed(llr: int, constants: SprtConstants) -> bool:
    return llr >= constants.threshold


def get_llr(d: Decimal) -> int:
    """A stored LLR in 1e-12 units (an unset Decimal is 0)."""
    value: int = d.value
    exponent: int = d.exponent
    if exponent == DECIMAL_EXPONENT or value == 0:  # as set_llr writes it, or unset
        return value
    shift: int = exponent - DECIMAL_EXPONENT
    scale: int = 10 ** abs(shift)
    return value * scale if shift >= 0 else value // scale


def set_llr(d: Decimal, llr: int) -> None:
    d.value = llr
    d.exponent = DECIMAL_EXPONENT
