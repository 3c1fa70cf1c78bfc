"""Reputation by the chain's formula, in exact rational arithmetic.

m_i    = missed_i / inference_count_i      (0 when the epoch had no inferences)
actual = N - MRP * sum(m_i for m_i > MPC)
rep    = 100 if actual > ETM; 0 if actual <= 0; else trunc(actual / ETM, 2) * 100
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from keepersim.types.messages import EpochPerformanceSummary, ValidationParams
from keepersim.types.params import get_decimal_value


def compute_reputation(
    summaries: Sequence[EpochPerformanceSummary], params: ValidationParams
) -> int:
    """Integer reputation 0..100 from a participant's recent epoch summaries and the chain's
    ``epochs_to_max``, ``miss_percentage_cutoff`` and ``miss_requests_penalty``
    (calculations/reputation.go CalculateReputation)."""
    etm = params.epochs_to_max
    cutoff = Fraction(get_decimal_value(params.miss_percentage_cutoff))
    penalty = Fraction(get_decimal_value(params.miss_requests_penalty))
    penalized = Fraction(0)
    for s in summaries:
        if s.inference_count == 0:
            continue
        miss_share = Fraction(s.missed_requests, s.inference_count)
        if miss_share > cutoff:
            penalized += miss_share
    actual = len(summaries) - penalty * penalized
    if actual > etm:
        return 100
    if actual <= 0:
        return 0
    # trunc(actual / ETM, 2) * 100 == floor(actual * 100 / ETM) for positive values.
    return int(actual * 100 / etm)


def compute_adjusted_weight(weight: int, reputation: int) -> int:
    """Selection weight scaled by reputation (fork PR #8): weight * rep / 100, floor weight / 100."""
    return max(weight * reputation // 100, weight // 100)
