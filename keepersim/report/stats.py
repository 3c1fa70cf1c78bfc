"""Small statistics for comparisons (numpy only): means, intervals, NaN-safe ratios.

Which interval goes with which metric is in docs/metrics.md: Wilson score intervals for a rate
that is a count over a total (:func:`compute_wilson_interval`), a seeded percentile bootstrap
over seeds for the mean of per-seed rates and shares (:func:`compute_bootstrap_interval`), both
within [0, 1] by construction; t-intervals (:func:`compute_t_interval`) only for unbounded
values (counts, differences, oracle efficiency)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "compute_bootstrap_interval",
    "compute_oracle_efficiency",
    "compute_t_interval",
    "compute_wilson_interval",
    "get_t_quantile",
    "mean_or_none",
]

#: Resamples and generator seed of :func:`compute_bootstrap_interval` (fixed: the same values
#: always give the same interval).
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20240611

# Two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30.
_T975 = (
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.131450,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.045230,
    2.042272,
)
_Z975 = 1.959963984540054
_ROUNDING = 1e-12


def get_t_quantile(df: int) -> float:
    """t_{0.975, df}: exact table up to 30 degrees of freedom, Cornish-Fisher above (error < 1e-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def _finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_or_none(values: Iterable[float | None]) -> float | None:
    """Mean of the finite values (None and NaN skipped); None when there are none."""
    xs = _finite(values)
    return float(np.mean(xs)) if xs else None


def compute_t_interval(
    values: Sequence[float | None],
) -> tuple[float | None, float | None, float | None]:
    """``(mean, low, high)`` of a 95% t-interval over the finite values.

    With one value the interval is undefined: ``(value, None, None)``; with none, all None.
    """
    xs, mean = _get_sample(values)
    n = len(xs)
    if mean is None or n == 1:
        return mean, None, None
    half = get_t_quantile(n - 1) * float(xs.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def compute_wilson_interval(
    successes: int, total: int
) -> tuple[float | None, float | None, float | None]:
    """``(successes / total, low, high)``: the 95% Wilson score interval of a binomial rate.

    Within [0, 1] and around the estimate for any counts (0 and ``total`` included, where a
    t-interval would collapse or leave [0, 1]); all None when ``total`` is 0. The ends are the
    exact values 0 and 1 when ``successes`` is 0 or ``total`` (not a clip: the formula gives
    them, floating point aside); elsewhere only rounding error is corrected (:func:`_snap`).
    """
    if total < 0 or successes < 0 or successes > total:
        raise ValueError(f"need 0 <= successes <= total, got {successes}, {total}")
    if total == 0:
        return None, None, None
    z = _Z975
    p = successes / total
    z2n = z * z / total
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / total + z2n / (4 * total)) / (1 + z2n)
    low = 0.0 if successes == 0 else _snap(centre - half, 0.0, p)
    high = 1.0 if successes == total else _snap(centre + half, p, 1.0)
    return p, low, high


def _snap(value: float, low: float, high: float) -> float:
    """``value`` within ``[low, high]``, where the maths puts it: only rounding error (a few
    ulps) is moved; anything more is a bug and raises instead of being clipped."""
    if value < low - _ROUNDING or value > high + _ROUNDING:
        raise ArithmeticError(f"interval end {value!r} outside [{low!r}, {high!r}]")
    return min(high, max(low, value))


def compute_bootstrap_interval(
    values: Sequence[float | None],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float | None, float | None, float | None]:
    """``(mean, low, high)``: the 95% percentile bootstrap interval of the mean of the finite
    values (the seeds are resampled with replacement; numpy's generator with a fixed ``seed``).

    The ends are means of resampled values, so they stay within the values' range (a rate
    within [0, 1] keeps its interval within [0, 1]). One value: ``(value, None, None)``; none:
    all None.
    """
    xs, mean = _get_sample(values)
    n = len(xs)
    if mean is None or n == 1:
        return mean, None, None
    rng = np.random.default_rng(seed)
    means = xs[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    # A mean of values lies within their range; only float rounding of the means can step
    # past it (by an ulp), which _snap moves back.
    lo_bound, hi_bound = float(xs.min()), float(xs.max())
    return mean, _snap(float(low), lo_bound, hi_bound), _snap(float(high), lo_bound, hi_bound)


def _get_sample(values: Sequence[float | None]) -> tuple[Any, float | None]:
    """The finite values as an array, and their mean (None when there is none)."""
    xs = np.asarray(_finite(values), dtype=float)
    return xs, (float(xs.mean()) if len(xs) else None)


def compute_oracle_efficiency(misses_none: int, misses_policy: int, misses_oracle: int) -> float:
    """``(none - policy) / (none - oracle)`` on one seed; NaN unless the oracle beats no policy
    (with nothing avoidable, e.g. the oracle's exclusions overloading a capacity-limited fleet,
    the ratio has no meaning: a worse policy would score a large positive "efficiency")."""
    denominator = misses_none - misses_oracle
    if denominator <= 0:
        return math.nan
    return (misses_none - misses_policy) / denominator
