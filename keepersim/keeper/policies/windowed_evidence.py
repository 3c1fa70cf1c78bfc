"""The evidence a windowed entry keeps, and the rules computed from it alone: the outcome ring
and its flags, the success spans behind the saturation guard, the confidence gate, suspicion
weighting, cooldown, ramp and overdue threshold (keepersim/keeper/policies/windowed.py applies
them; its docstring says why each is as it is). Pure functions of an entry and the params, or
in-place edits of one entry: nothing here reads the store.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import MutableSequence, Sequence

from keepersim.types.pb.keepersim.v1.extension_params_pb2 import WindowedParams
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    W_EXCLUDED,
    W_HEALTHY,
    W_PROBE,
    OpenInference,
    WindowedEntry,
)

STATE_NAMES = {W_HEALTHY: "healthy", W_EXCLUDED: "excluded", W_PROBE: "probe"}
RING_BITS = 64
RING_MASK = (1 << RING_BITS) - 1
LATENCY_SAMPLES = 8
FLEET_LATENCY_SAMPLES = 32
MIN_OWN_LATENCY_SAMPLES = 4
FLEET = ""  # the entry that holds the fleet's latency samples and its capacity-miss ring
MIN_SATURATION_SAMPLES = 16
SUCCESS_SPANS = 32
RAMP_STEPS = 10
MAX_STRIKES = 32
PPM = 1_000_000
RECOVERY_EVIDENCE = 16  # clean outcomes after an exclusion that prove a recovery


# --- the ring -----------------------------------------------------------------------------


def compute_window(entry: WindowedEntry, window: int) -> tuple[int, int]:
    """(misses, samples) among the newest ``window`` recorded outcomes."""
    n = count_window_samples(entry, window)
    return (entry.failure_bits & ((1 << n) - 1)).bit_count(), n


def count_window_samples(entry: WindowedEntry, window: int) -> int:
    """How many recorded outcomes the newest ``window`` holds."""
    return min(entry.outcome_seq, window, RING_BITS)


def process_push(entry: WindowedEntry, miss: bool) -> None:
    entry.failure_bits = ((entry.failure_bits << 1) | int(miss)) & RING_MASK
    entry.outcome_seq += 1


def get_ring_position(entry: WindowedEntry, seq: int) -> int | None:
    """Bit index of the outcome pushed as number ``seq``, or None if it left the ring."""
    position = entry.outcome_seq - 1 - seq
    return position if 0 <= position < RING_BITS else None


def count_running(entry: WindowedEntry, height: int) -> int:
    """Recent successes of the participant that were running at ``height``."""
    return count_running_spans(entry.recent_latencies, entry.success_finishes, height)


def count_running_spans(latencies: Sequence[int], finishes: Sequence[int], height: int) -> int:
    """Spans are kept in finish order, so only the newest ones, those finishing after
    ``height``, need a look."""
    running = 0
    i = len(finishes) - 1
    while i >= 0 and finishes[i] > height:
        running += finishes[i] - latencies[i] <= height
        i -= 1
    return running


def is_capacity_miss(entry: WindowedEntry, start_height: int) -> bool:
    """It started while as many successes ran as the participant was ever seen to serve."""
    running = count_running(entry, start_height)
    return running >= 1 and running >= entry.served_concurrency


def process_record_span(entry: WindowedEntry, start_height: int, height: int) -> None:
    """A success ran over [start_height, height): note it (its latency, for the overdue
    threshold, and its finish) and how many ran beside it."""
    # Each access to a repeated field builds a wrapper (upb): each is taken once here.
    latencies, finishes = entry.recent_latencies, entry.success_finishes
    running = count_running_spans(latencies, finishes, start_height)
    if running >= entry.served_concurrency:
        entry.served_concurrency = running + 1
    latencies.append(height - start_height)
    finishes.append(height)
    if len(finishes) > SUCCESS_SPANS:  # both hold one span each: they are bounded together
        process_bound(latencies, SUCCESS_SPANS)
        process_bound(finishes, SUCCESS_SPANS)


def get_own_latencies(entry: WindowedEntry) -> Sequence[int]:
    """The newest LATENCY_SAMPLES success latencies: the participant's overdue threshold."""
    return entry.recent_latencies[-LATENCY_SAMPLES:]


def process_push_capacity_bit(fleet: WindowedEntry, capacity: bool) -> None:
    fleet.capacity_bits = ((fleet.capacity_bits << 1) | int(capacity)) & RING_MASK
    fleet.capacity_seq += 1


def is_fleet_saturated(fleet: WindowedEntry, params: WindowedParams) -> bool:
    """At least saturation_pct of the fleet's recent misses were capacity misses."""
    n = min(fleet.capacity_seq, RING_BITS)
    if params.saturation_pct == 0 or n < MIN_SATURATION_SAMPLES:
        return False
    return 100 * (fleet.capacity_bits & ((1 << n) - 1)).bit_count() >= params.saturation_pct * n


def process_clear_flag(entry: WindowedEntry, item: OpenInference) -> None:
    """A flagged inference finished late: its provisional miss becomes a success."""
    position = get_ring_position(entry, item.flag_seq)
    if position is not None:
        entry.failure_bits &= ~(1 << position) & RING_MASK


def process_remove_flag(entry: WindowedEntry, item: OpenInference) -> None:
    """A flagged inference was no miss of this participant (declined, or never attributed to it):
    take its provisional miss out of the ring entirely."""
    position = get_ring_position(entry, item.flag_seq)
    if position is None:
        return
    low = entry.failure_bits & ((1 << position) - 1)
    high = entry.failure_bits >> (position + 1)
    entry.failure_bits = (high << position) | low
    entry.outcome_seq -= 1
    if item.flag_seq < entry.probe_from_seq:
        entry.probe_from_seq -= 1  # the probe evidence keeps its outcomes
    for other in entry.open:
        if other.flagged and other.flag_seq > item.flag_seq:
            other.flag_seq -= 1


# --- the gate, cooldown, ramp -------------------------------------------------------------


def is_window_failing(misses: int, samples: int, params: WindowedParams) -> bool:
    """Enough samples, a miss rate above the baseline, and a one-sided z-score above z."""
    if samples < params.min_samples:
        return False
    b = params.baseline_miss_pct
    excess = 100 * misses - b * samples
    if excess <= 0:
        return False
    z = params.confidence_z_milli
    return excess * excess * 1_000_000 > z * z * samples * b * (100 - b)


def count_probe_outcomes(entry: WindowedEntry) -> int:
    """Outcomes recorded since the current (or last) probing began."""
    return max(0, entry.outcome_seq - entry.probe_from_seq)


def compute_readmission_window(entry: WindowedEntry, params: WindowedParams) -> tuple[int, int]:
    """The evidence a probe success is judged on: with ``readmit_successes`` set, only the
    outcomes since probing began (a recovered node need not outlive its old misses, which the
    exclusion gate still reads); else the whole window."""
    if params.readmit_successes == 0:
        return compute_window(entry, params.window)
    return compute_probe_window(entry, params)


def compute_probe_window(entry: WindowedEntry, params: WindowedParams) -> tuple[int, int]:
    """(misses, samples) among the outcomes since probing began, at most the window."""
    return compute_window(entry, min(params.window, count_probe_outcomes(entry)))


def is_gate_failing(entry: WindowedEntry, params: WindowedParams) -> bool:
    """The exclusion gate: the window fails, or (with short_window) its newest outcomes do."""
    if is_window_failing(*compute_window(entry, params.window), params):
        return True
    return params.short_window > 0 and is_window_failing(
        *compute_window(entry, params.short_window), params
    )


def is_recovery_proven(entry: WindowedEntry) -> bool:
    """Back in after an exclusion, with its newest RECOVERY_EVIDENCE outcomes since probing began
    all successes, and not proven yet for this probing: rare for a node still bad (a 30%-miss
    node shows 16 clean outcomes in a row 0.3% of the time, a 1% node 85%)."""
    if entry.exclusions == 0 or entry.proven_for_seq == entry.probe_from_seq + 1:
        return False
    if count_probe_outcomes(entry) < RECOVERY_EVIDENCE:
        return False
    return entry.failure_bits & ((1 << RECOVERY_EVIDENCE) - 1) == 0


def compute_healthy_ppm(misses: int, samples: int, prior: int, good: int, bad: int) -> int:
    """Posterior probability, in ppm, that a participant with ``misses`` among ``samples``
    outcomes is healthy, for a prior share of ``prior`` percent bad participants and a miss
    rate of ``good`` percent when healthy and ``bad`` percent when bad. Exact integers: the two
    likelihoods are products of whole percents (at most 64 factors each)."""
    successes = samples - misses
    # (int ** int is typed Any: a negative exponent would give a float; these never are)
    healthy: int = (100 - prior) * good**misses * (100 - good) ** successes
    degraded: int = prior * bad**misses * (100 - bad) ** successes
    return healthy * PPM // (healthy + degraded)


@functools.lru_cache(maxsize=4096)
def compute_suspicion_pct(misses: int, samples: int, prior: int, good: int, bad: int) -> int:
    """compute_healthy_ppm in whole percents, rounded, at least 1 (pure, so memoized: at
    most 65 x 65 values per params)."""
    return max(1, (compute_healthy_ppm(misses, samples, prior, good, bad) + 5_000) // 10_000)


def compute_suspicion_window(entry: WindowedEntry, params: WindowedParams) -> tuple[int, int]:
    """The evidence suspicion weighting reads: the window, or for a participant back from an
    exclusion only the outcomes since its probing began (its old misses already cost it the
    exclusion, and the gate still reads them)."""
    if entry.exclusions == 0:
        return compute_window(entry, params.window)
    return compute_probe_window(entry, params)


def get_suspicion_pct(entry: WindowedEntry, params: WindowedParams) -> int:
    """The percent of its weight a participant in keeps under suspicion weighting: its
    posterior probability of being healthy, rounded, at least 1; 100 without a recent miss."""
    if params.suspicion_prior_pct == 0:
        return 100
    misses, samples = compute_suspicion_window(entry, params)
    if misses == 0:
        return 100
    return compute_suspicion_pct(
        misses,
        samples,
        params.suspicion_prior_pct,
        params.suspicion_good_miss_pct,
        params.suspicion_bad_miss_pct,
    )


def compute_miss_ppm(misses: int, samples: int) -> int:
    return misses * PPM // samples if samples else 0


def compute_jitter_pct(address: str, exclusions: int, jitter_pct: int) -> int:
    """A deterministic offset in [-jitter_pct, +jitter_pct] from sha256(address, exclusions)."""
    if jitter_pct == 0:
        return 0
    digest = hashlib.sha256(
        b"keepersim/windowed/jitter\x00"
        + address.encode()
        + b"\x00"
        + exclusions.to_bytes(8, "big")
    ).digest()
    return int.from_bytes(digest[:8], "big") % (2 * jitter_pct + 1) - jitter_pct


def get_max_cooldown(recoveries: int, params: WindowedParams) -> int:
    """The cooldown's cap: shorter for a participant that has proven a recovery before (never
    above max_cooldown_blocks)."""
    if recoveries > 0 and params.recovered_max_cooldown_blocks > 0:
        return min(params.recovered_max_cooldown_blocks, params.max_cooldown_blocks)
    return params.max_cooldown_blocks


def compute_cooldown(
    address: str, strikes: int, exclusions: int, recoveries: int, params: WindowedParams
) -> int:
    """initial * 2^strikes capped (get_max_cooldown), then jittered; at least one block."""
    base = min(
        params.initial_cooldown_blocks << min(strikes, MAX_STRIKES),
        get_max_cooldown(recoveries, params),
    )
    jitter = compute_jitter_pct(address, exclusions, params.jitter_pct)
    return max(1, base * (100 + jitter) // 100)


def get_probation_blocks(params: WindowedParams) -> int:
    """A re-exclusion this soon after re-admission is one more strike, not a fresh start."""
    return max(params.ramp_blocks, params.initial_cooldown_blocks)


def compute_ramp(readmitted_at: int, height: int, params: WindowedParams) -> tuple[int, int] | None:
    """(weight percent, last height of this step) while ramping, else None."""
    ramp = params.ramp_blocks
    if ramp <= 0 or readmitted_at <= 0 or height >= readmitted_at + ramp:
        return None
    step = (height - readmitted_at) * RAMP_STEPS // ramp
    pct = params.ramp_start_pct + (100 - params.ramp_start_pct) * step // RAMP_STEPS
    next_step_at = readmitted_at + -(-(step + 1) * ramp // RAMP_STEPS)
    return pct, next_step_at - 1


def compute_overdue_blocks(
    own: Sequence[int], fleet: Sequence[int], params: WindowedParams
) -> int | None:
    """Blocks after which an open inference is provisional miss evidence (None: no samples)."""
    slowest = max(own, default=0)
    if len(own) < MIN_OWN_LATENCY_SAMPLES:
        if not own and not fleet:
            return None
        slowest = max(slowest, max(fleet, default=0))
    return max(params.overdue_min_blocks, params.overdue_factor * slowest)


def count_probes_in_flight(entry: WindowedEntry, height: int, expiration_blocks: int) -> int:
    return sum(
        1 for item in entry.open if item.probe and item.start_height + expiration_blocks > height
    )


def find_open(entry: WindowedEntry, inference_id: str) -> int | None:
    """Index of the remembered inference with this id, if any."""
    if not entry.open:
        return None  # the common case: a healthy participant remembers nothing
    for i, item in enumerate(entry.open):
        if item.inference_id == inference_id:
            return i
    return None


def process_take_open(entry: WindowedEntry, inference_id: str) -> OpenInference | None:
    """Remove the remembered inference with this id from the entry and return it."""
    if not entry.open:
        return None  # the common case: a healthy participant remembers nothing
    index = find_open(entry, inference_id)
    if index is None:
        return None
    item = OpenInference()
    item.CopyFrom(entry.open[index])
    del entry.open[index]
    return item


def process_prune(entry: WindowedEntry, height: int, expiration_blocks: int) -> None:
    """Drop open inferences past their expiry that never got a result here (finished by another
    executor, or resolved while another policy ran): the chain attributed no miss to this
    participant, so a provisional miss of theirs is withdrawn too."""
    if not entry.open:
        return
    stale = [
        i for i, item in enumerate(entry.open) if item.start_height + expiration_blocks < height
    ]
    for i in reversed(stale):
        item = OpenInference()
        item.CopyFrom(entry.open[i])
        del entry.open[i]
        if item.flagged:
            process_remove_flag(entry, item)


def process_bound(values: MutableSequence[int], bound: int) -> None:
    """Drop the oldest beyond ``bound`` (in place: a protobuf repeated field)."""
    excess = len(values) - bound
    if excess > 0:
        del values[:excess]
