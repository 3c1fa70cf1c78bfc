"""Empirical behaviour of each participant, estimated from a trace (the what-if replay's model).

Outcomes, by the arrival (start) height of the inference: EXPIRED is a miss; FINISHED (and
VALIDATED / INVALIDATED / VOTING) a success; declined (capacity pushback: STARTED with an end
height) and still-STARTED inferences are not samples.

``segments`` (the default; chosen by the calibration against ``simulate``, docs/what-if.md):
each participant's outcome sequence is cut at change points (binary segmentation, a split kept
when it raises the Bernoulli log-likelihood by more than ``penalty * ln(n)``, at least
``min_segment`` samples a side), and each segment's rate is shrunk a little to the
participant's own whole-trace rate, itself shrunk to the fleet's:

    p_seg = (m_seg + k * p_i) / (n_seg + k),   p_i = (m_i + s * mu) / (n_i + s),
    mu = (M + a) / (N + a + b),                s = a + b,  k = segment_strength

So a small participant keeps its own rate (the fixed windows shrank its few samples per window
to the fleet's rate: a degraded small node looked healthy and what-if understated every
policy's gain), and an outage, a flap or a ramp gets its own segment instead of being smeared
over a window.

``windows`` (``--estimator windows``): the posterior mean per (participant, window of
``window_blocks`` heights) with a hierarchical prior centred on the fleet's rate of the window,

    p(i, w) = (m_iw + s * mu_w) / (n_iw + s),        mu_w = (M_w + a) / (N_w + a + b)

Known bias (both): the recording's own policy decided who got traffic. A participant the
recorded policy kept out has few samples then, and its estimate there is carried over from its
neighbouring segment (or the fleet's window rate). Traces recorded under ``none`` do not have it.

Latency: per participant, the exact histogram of recorded ``end - start`` of its finished
inferences (0 for a finish recorded before its start); values are bounded by the expiry, so the
histogram has at most ``expiration_blocks + 1`` bins. A participant with no finishes uses the
fleet's histogram; an empty trace uses ``DEFAULT_LATENCY_BLOCKS``.

Memory: segments keep one start height (8 bytes) and one outcome byte per sample, the windows
counts per (participant, window with data), plus one histogram per participant.
"""

from __future__ import annotations

import itertools
import math
import os
from array import array
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

from keepersim.keeper.inferences import is_declined
from keepersim.trace.format import FINISHED_LIKE
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import BadLines, Header, InferenceRecord
from keepersim.types.messages import EXPIRED, Inference

__all__ = [
    "DEFAULT_LATENCY_BLOCKS",
    "DEFAULT_METHOD",
    "METHODS",
    "BehaviourEstimator",
    "BetaPrior",
    "compute_change_points",
    "estimate_trace",
]

DEFAULT_LATENCY_BLOCKS: Final = 2


@dataclass(frozen=True, slots=True)
class BetaPrior:
    """Beta(a, b) prior of a miss probability: mean a / (a + b), strength a + b samples."""

    a: float = 1.0
    b: float = 30.0

    def __post_init__(self) -> None:
        if not (self.a > 0 and self.b > 0):
            raise ValueError(f"a Beta prior needs a > 0 and b > 0, got ({self.a}, {self.b})")

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def strength(self) -> float:
        return self.a + self.b


class _Latency:
    """An exact integer histogram with a cached cumulative table for drawing."""

    __slots__ = ("counts", "_table")

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self._table: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def add(self, value: int, n: int = 1) -> None:
        self.counts[value] += n
        self._table = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def get_table(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if self._table is None:
            values = tuple(sorted(self.counts))
            cumulative: list[int] = []
            running = 0
            for v in values:
                running += self.counts[v]
                cumulative.append(running)
            self._table = (values, tuple(cumulative))
        return self._table

    def draw(self, r: int) -> int:
        """The value at rank ``r mod total`` (integers only: the same on every machine)."""
        values, cumulative = self.get_table()
        return values[bisect_right(cumulative, r % cumulative[-1])]

    def get_quantile(self, q: float) -> int:
        values, cumulative = self.get_table()
        rank = min(int(q * cumulative[-1]), cumulative[-1] - 1)
        return values[bisect_right(cumulative, rank)]

    def to_dict(self) -> dict[str, Any]:
        if not self.counts:
            return {"count": 0}
        return {
            "count": self.total,
            "min": min(self.counts),
            "p50": self.get_quantile(0.5),
            "p90": self.get_quantile(0.9),
            "max": max(self.counts),
            "histogram": {str(k): v for k, v in sorted(self.counts.items())},
        }


#: The estimators: change-point segments per participant (the default) or fixed block windows.
METHODS: Final = ("segments", "windows")
DEFAULT_METHOD: Final = "segments"
#: A change point is kept when it raises the segment's Bernoulli log-likelihood by more than
#: ``penalty * ln(n)`` (n: the segment's samples); 1.0 is about BIC for the two extra
#: parameters (the new rate and where it starts). Chosen by the calibration (docs/what-if.md).
DEFAULT_PENALTY: Final = 1.0
#: The fewest samples on either side of a change point.
DEFAULT_MIN_SEGMENT: Final = 8
#: A segment's rate is shrunk towards its participant's whole-trace rate by this many samples.
DEFAULT_SEGMENT_STRENGTH: Final = 2.0


class BehaviourEstimator:
    """Miss probabilities per participant over height and latency histograms (see the module doc)."""

    def __init__(
        self,
        first_height: int,
        *,
        method: str = DEFAULT_METHOD,
        window_blocks: int = 1000,
        prior: BetaPrior | tuple[float, float] = (1.0, 30.0),
        penalty: float = DEFAULT_PENALTY,
        min_segment: int = DEFAULT_MIN_SEGMENT,
        segment_strength: float = DEFAULT_SEGMENT_STRENGTH,
    ) -> None:
        if method not in METHODS:
            raise ValueError(
                f"estimator method must be one of {', '.join(METHODS)}, got {method!r}"
            )
        if window_blocks < 1:
            raise ValueError(f"window_blocks must be >= 1, got {window_blocks}")
        if min_segment < 1:
            raise ValueError(f"min_segment must be >= 1, got {min_segment}")
        if not (penalty >= 0 and segment_strength >= 0):
            raise ValueError(
                f"penalty and segment_strength must be >= 0, got {penalty}, {segment_strength}"
            )
        self.first_height = first_height
        self.method = method
        self.window_blocks = window_blocks
        self.prior = prior if isinstance(prior, BetaPrior) else BetaPrior(*prior)
        self.penalty = penalty
        self.min_segment = min_segment
        self.segment_strength = segment_strength
        # participant -> window -> [samples, misses]
        self._counts: dict[str, dict[int, list[int]]] = {}
        self._fleet: dict[int, list[int]] = {}
        # segments: participant -> (start heights, misses flags) in observation order
        self._heights: dict[str, array[int]] = {}
        self._misses: dict[str, bytearray] = {}
        self._segments: dict[str, _Segments] | None = None
        self._declines: Counter[str] = Counter()
        self._latency: dict[str, _Latency] = {}
        self._fleet_latency = _Latency()
        self.inferences = 0

    def get_window(self, height: int) -> int:
        return max(0, (height - self.first_height) // self.window_blocks)

    def observe(self, inference: Inference) -> None:
        """Count one recorded inference (by its start height and recorded outcome)."""
        self.inferences += 1
        status = inference.status
        address = inference.assigned_to
        if status in FINISHED_LIKE:
            miss = 0
            latency = max(0, inference.end_block_height - inference.start_block_height)
            self._latency.setdefault(address, _Latency()).add(latency)
            self._fleet_latency.add(latency)
        elif status == EXPIRED:
            miss = 1
        else:
            if is_declined(inference):  # pushback, not a sample
                self._declines[address] += 1
            return
        window = self.get_window(inference.start_block_height)
        cell = self._counts.setdefault(address, {}).setdefault(window, [0, 0])
        cell[0] += 1
        cell[1] += miss
        fleet = self._fleet.setdefault(window, [0, 0])
        fleet[0] += 1
        fleet[1] += miss
        if self.method == "segments":
            self._heights.setdefault(address, array("q")).append(inference.start_block_height)
            self._misses.setdefault(address, bytearray()).append(miss)
            self._segments = None

    def get_counts(self, address: str, window: int) -> tuple[int, int]:
        """(samples, misses) of a participant in a window."""
        cell = self._counts.get(address, {}).get(window)
        return (cell[0], cell[1]) if cell else (0, 0)

    def get_fleet_rate(self, window: int) -> float:
        """The prior mean of a window: the fleet's rate, shrunk to the global prior mean."""
        n, m = self._fleet.get(window, (0, 0))
        return (m + self.prior.a) / (n + self.prior.strength)

    def get_global_rate(self) -> float:
        """The fleet's whole-trace rate, shrunk to the prior mean."""
        n = sum(c[0] for c in self._fleet.values())
        m = sum(c[1] for c in self._fleet.values())
        return (m + self.prior.a) / (n + self.prior.strength)

    def get_segments(self) -> dict[str, _Segments]:
        """Per participant, its change-point segments (fitted once, after the last observe)."""
        if self._segments is None:
            mu = self.get_global_rate()
            s = self.prior.strength
            segments: dict[str, _Segments] = {}
            for address, flags in self._misses.items():
                n, m = len(flags), sum(flags)
                own = (m + s * mu) / (n + s)
                cuts = compute_change_points(flags, self.penalty, self.min_segment)
                heights = self._heights[address]
                bounds = [0, *cuts, n]
                starts: list[int] = []
                rates: list[float] = []
                counts: list[tuple[int, int]] = []
                k = self.segment_strength
                for lo, hi in itertools.pairwise(bounds):
                    seg_m = sum(flags[lo:hi])
                    starts.append(heights[lo])
                    rates.append((seg_m + k * own) / (hi - lo + k))
                    counts.append((hi - lo, seg_m))
                segments[address] = _Segments(own, tuple(starts), tuple(rates), tuple(counts))
            self._segments = segments
        return self._segments

    def get_miss_probability(self, address: str, height: int) -> float:
        """Estimated miss probability of ``address`` for a request arriving at ``height``."""
        if self.method == "segments":
            found = self.get_segments().get(address)
            if found is None:
                return self.get_global_rate()
            # The segment holding ``height``; before the first sample, the first segment.
            index = max(0, bisect_right(found.starts, height) - 1)
            return found.rates[index]
        window = self.get_window(height)
        n, m = self.get_counts(address, window)
        s = self.prior.strength
        return (m + s * self.get_fleet_rate(window)) / (n + s)

    def draw_latency(self, address: str, r: int) -> int:
        """A latency for ``address`` from its empirical distribution, by the integer ``r``."""
        histogram = self._latency.get(address)
        if histogram is None or not histogram.counts:
            histogram = self._fleet_latency
        if not histogram.counts:
            return DEFAULT_LATENCY_BLOCKS
        return histogram.draw(r)

    @property
    def participants(self) -> list[str]:
        return sorted(set(self._counts) | set(self._latency) | set(self._declines))

    @property
    def declines(self) -> int:
        """Recorded declines (capacity pushback): a capacity-limited recording."""
        return sum(self._declines.values())

    @property
    def windows(self) -> int:
        return max(self._fleet, default=-1) + 1

    def get_settings(self) -> dict[str, Any]:
        """The estimator's settings (what the replay's fingerprint and report name)."""
        settings: dict[str, Any] = {
            "method": self.method,
            "prior": [self.prior.a, self.prior.b],
        }
        if self.method == "segments":
            settings.update(
                penalty=self.penalty,
                min_segment=self.min_segment,
                segment_strength=self.segment_strength,
            )
        else:
            settings["window_blocks"] = self.window_blocks
        return settings

    def to_dict(self) -> dict[str, Any]:
        fleet = []
        for w in range(self.windows):
            n, m = self._fleet.get(w, (0, 0))
            fleet.append(
                {
                    "window": w,
                    "from_height": self.first_height + w * self.window_blocks,
                    "samples": n,
                    "misses": m,
                    "prior_mean": round(self.get_fleet_rate(w), 6),
                }
            )
        segments = self.get_segments() if self.method == "segments" else {}
        participants: dict[str, Any] = {}
        for address in self.participants:
            cells = self._counts.get(address, {})
            n = sum(c[0] for c in cells.values())
            m = sum(c[1] for c in cells.values())
            entry: dict[str, Any] = {"samples": n, "misses": m, "declines": self._declines[address]}
            if self.method == "segments":
                found = segments.get(address)
                entry["segments"] = (
                    []
                    if found is None
                    else [
                        {"from_height": h, "samples": c[0], "misses": c[1], "p": round(p, 6)}
                        for h, p, c in zip(found.starts, found.rates, found.counts, strict=True)
                    ]
                )
            else:
                entry["windows"] = {
                    str(w): {
                        "samples": cells[w][0],
                        "misses": cells[w][1],
                        "p": round(
                            self.get_miss_probability(
                                address, self.first_height + w * self.window_blocks
                            ),
                            6,
                        ),
                    }
                    for w in sorted(cells)
                }
            entry["latency"] = self._latency.get(address, _Latency()).to_dict()
            participants[address] = entry
        formula = (
            "segments: p = (m_seg + k*p_i) / (n_seg + k), p_i = (m_i + s*mu) / (n_i + s), "
            "mu = (M + a) / (N + a + b), s = a + b"
            if self.method == "segments"
            else "p = (m + s*mu_w) / (n + s), s = a + b, mu_w = (M_w + a) / (N_w + a + b)"
        )
        return {
            **self.get_settings(),
            "window_blocks": self.window_blocks,
            "prior": {"a": self.prior.a, "b": self.prior.b, "mean": round(self.prior.mean, 6)},
            "formula": formula,
            "inferences": self.inferences,
            "fleet": fleet,
            "fleet_latency": self._fleet_latency.to_dict(),
            "participants": participants,
        }


@dataclass(frozen=True, slots=True)
class _Segments:
    """One participant's fitted segments: start heights, rates, (samples, misses)."""

    own_rate: float
    starts: tuple[int, ...]
    rates: tuple[float, ...]
    counts: tuple[tuple[int, int], ...]


def _compute_log_likelihood(n: int, m: int) -> float:
    """The Bernoulli log-likelihood of m misses in n samples at its maximum (rate m / n)."""
    if m == 0 or m == n:
        return 0.0
    return m * math.log(m / n) + (n - m) * math.log((n - m) / n)


def compute_change_points(flags: bytes | bytearray, penalty: float, min_segment: int) -> list[int]:
    """Sample indices where the miss rate changes (binary segmentation, penalised likelihood).

    A segment is split at the index that most raises its log-likelihood, if the gain exceeds
    ``penalty * ln(n)`` and both sides hold at least ``min_segment`` samples; the halves are
    split again the same way. Deterministic: ties go to the earliest index.
    """
    cumulative = [0]
    for f in flags:
        cumulative.append(cumulative[-1] + f)
    cuts: list[int] = []
    stack = [(0, len(flags))]
    while stack:
        lo, hi = stack.pop()
        n = hi - lo
        if n < 2 * min_segment:
            continue
        m = cumulative[hi] - cumulative[lo]
        if m == 0 or m == n:
            continue
        whole = _compute_log_likelihood(n, m)
        best_gain = 0.0
        best = -1
        for k in range(lo + min_segment, hi - min_segment + 1):
            left = cumulative[k] - cumulative[lo]
            gain = (
                _compute_log_likelihood(k - lo, left)
                + _compute_log_likelihood(hi - k, m - left)
                - whole
            )
            if gain > best_gain:
                best_gain, best = gain, k
        if best >= 0 and best_gain > penalty * math.log(n):
            cuts.append(best)
            stack.append((lo, best))
            stack.append((best, hi))
    return sorted(cuts)


def estimate_trace(
    path: str | os.PathLike[str],
    *,
    method: str = DEFAULT_METHOD,
    window_blocks: int = 1000,
    prior: BetaPrior | tuple[float, float] = (1.0, 30.0),
    penalty: float = DEFAULT_PENALTY,
    min_segment: int = DEFAULT_MIN_SEGMENT,
    segment_strength: float = DEFAULT_SEGMENT_STRENGTH,
    skip_bad: bool = False,
    bad_lines: BadLines | None = None,
    allow_partial: bool = False,
) -> tuple[Header, BehaviourEstimator]:
    """One streaming pass over a trace: its header and the fitted estimator (``allow_partial``:
    of a trace without its closing record, up to its last whole line)."""
    records = iterate_trace(
        path, skip_bad=skip_bad, bad_lines=bad_lines, allow_partial=allow_partial
    )
    header = next(records)
    assert isinstance(header, Header)
    estimator = BehaviourEstimator(
        header.first_height,
        method=method,
        window_blocks=window_blocks,
        prior=prior,
        penalty=penalty,
        min_segment=min_segment,
        segment_strength=segment_strength,
    )
    for record in records:
        if isinstance(record, InferenceRecord):
            estimator.observe(record.inference)
    if method == "segments":
        estimator.get_segments()
    return header, estimator
