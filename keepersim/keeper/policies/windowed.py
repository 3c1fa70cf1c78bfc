"""keepersim's windowed breaker: recent evidence, early evidence, confidence, bounded probing.

Built on what the reference simulation taught (docs: policy-lessons) and on its peers' fixes:

- Judge a participant on its last ``window`` outcomes (a 64-bit ring, newest bit 0), never on
  the epoch's cumulative counts, which lag and keep recovered nodes out. The ring is kept when a
  probe succeeds (clearing it lets a 30%-miss node back with a clean record 70% of the time) and
  at the epoch boundary (a reset throws away the evidence against persistent offenders).
- Earliest chain-visible evidence: an inference still open ``overdue`` blocks after its start
  counts as a provisional miss long before it expires. ``overdue = max(overdue_min_blocks,
  overdue_factor * slowest recent latency)`` of the participant (its last 8 successes), or of
  the fleet (last 32) while it has fewer than 4, so slow-but-healthy nodes are not flagged.
  Each inference is checked overdue_min_blocks after its start, with the threshold of the
  latencies known then (a higher one schedules another look at its own height); the checks find
  the starts through the chain's timeout index, or the StartsMemo, so a start writes nothing.
  An inference still in progress at its threshold (STARTED, not declined) is flagged and
  remembered in the entry. Each flag sits at a ring position (``flag_seq``): a late success
  turns it into the success it was, a decline removes it (pushback never counts) and the final
  expiry adds nothing (counted once).
- Confidence gate instead of a bare threshold: exclude when n >= min_samples, m/n > p0 and the
  one-sided z-score (m/n - p0) / sqrt(p0 (1 - p0) / n) exceeds z, p0 = baseline_miss_pct / 100.
  In integers: (100 m - b n)^2 * 10^6 > z_milli^2 * n * b * (100 - b). One miss in four is not
  enough; 30% misses over 32 outcomes is, 5% is not. With ``short_window`` the gate also judges
  the newest short_window outcomes, so a burst after a long clean record (a shared outage) is
  not diluted in the window.
- Suspicion weighting, for the evidence too thin to exclude on: a participant in keeps the
  share of its weight that is its posterior probability of being healthy given its window
  (compute_healthy_ppm: a prior share suspicion_prior_pct of bad participants, a healthy miss
  rate against a bad one, exact integers), at least 1%, and all of it without a miss in the
  window. Back from an exclusion it is judged on the outcomes since its probing began. One
  miss on a newcomer costs it most of its weight at once; a miss among 31 successes 1%.
  Held while the fleet is saturated (the saturation guard below), and a change of that state
  asks every verdict again.
- Cooldown initial * 2^strikes (capped), with a jitter of +-jitter_pct derived from
  sha256(address, exclusion count): bounded, deterministic, and different per participant.
  Strikes = failed probes and re-exclusions of the episode: with ``strikes_until_proven`` an
  episode lasts until a recovery is proven (below), else until the probation after a
  re-admission passes. A participant that has proven a recovery before flaps rather than
  stays bad: its cap is ``recovered_max_cooldown_blocks``.
- A recovery is proven when a participant back in after an exclusion shows RECOVERY_EVIDENCE
  (16) clean outcomes in a row since its probing began (a 30%-miss node does so 0.3% of the
  time). With ``incident_blocks`` the proof ends the incident: everyone excluded whose episode
  began within incident_blocks of its own is probed at once (mass degradations and shared
  outages end for many together; one still bad fails its probe as usual).
- Probing by weight: after the cooldown the participant is admitted at probe_weight_pct of its
  weight, with no cap on its probes in flight. (With probe_weight_pct 0 it is admitted at full
  weight with at most ``max_probes`` in flight, counted from process_start, any result freeing
  a slot, a decline too; kept out while they are taken, which for a healthy node is false
  exclusion, and a big node drew several probes in the block it came back: measured worse.)
  A probe that misses or turns overdue sends it back with a longer cooldown. When overdue
  evidence behind an exclusion is withdrawn (the inferences finished late) and the window passes
  again, probing starts at once: a false alarm costs no cooldown. A probe success
  re-admits once the evidence passes the gate: with ``readmit_successes`` the outcomes since
  probing began (at least that many), else the whole window (probe included). Otherwise
  probing simply goes on, while a bad node meets its next miss within a few probes; the
  exclusion gate still reads the whole window, so a node let back by luck goes out again on
  its next miss. The probe cap holds per committed height: requests of one block all see the
  same table.
- Slow start: after re-admission the weight factor ramps from ramp_start_pct to 100% in 10 steps
  over ramp_blocks (valid_until marks each step, so the chain's memo keeps its hits).
- The pipeline caps the excluded share of candidate weight (max_excluded_weight_pct; the most
  degraded stay out, severity = window miss rate in ppm) and panics below
  panic_healthy_weight_pct admitted weight: capacity limits cannot cascade into an outage.
  A participant let in by the cap or the panic gets its full weight, as the cap intends.
- Pushback (a decline) never counts: it is not a failure, never resets or closes anything.
- Saturation guard. The entry keeps its newest successes as [start, finish) spans, and
  ``served_concurrency``, the most it was seen to run at once. A miss that started with at
  least that many recent successes running
  found the participant full: a capacity miss (a dead or flaky node misses with nothing
  running). One such miss is ambiguous (a burst can look the same), so it still counts in the
  window; but the fleet keeps a ring of its recent misses' kinds, and while at least
  ``saturation_pct`` of them were capacity misses the fleet is saturated and the gate excludes
  no one: excluding a node then only moves its traffic onto full nodes (on the built-in
  overload fleet even the oracle's exclusions raise the miss rate).

State is written by outcomes, by starts while probing, and by the end block's wake-ups
(overdue deadlines, cooldown ends) and gate, each entry once per block (PolicyStore's block
cache), so a quiet block costs nothing per participant and a healthy participant's start
reads and writes nothing of its own. The fleet's latency samples, capacity-miss ring and list
of probing participants live in the entry of the empty address (never a participant's).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import MutableSequence, Sequence
from typing import ClassVar

# Pending the split into windowed_index.py (branch windowed-index): the speed-ups this file
# still calls, from the acceleration layer.
from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import (
    ADMITTED,
    Health,
    HealthPolicy,
    PolicyReader,
    PolicyStore,
)
from keepersim.types.events import Outcome
from keepersim.types.messages import STARTED, Inference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, WindowedParams
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    W_EXCLUDED,
    W_HEALTHY,
    W_PROBE,
    OpenInference,
    WindowedEntry,
    WindowedState,
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


def get_verdict_marker(entry: WindowedEntry, params: WindowedParams) -> tuple[int, int, int]:
    """What a healthy participant's verdict depends on besides its ramp: its state and the
    evidence its suspicion weight is computed from (none without a miss), which is cheaper
    to compare than the weight itself."""
    if entry.state != W_HEALTHY or params.suspicion_prior_pct == 0:
        return entry.state, 0, 0
    misses, samples = compute_suspicion_window(entry, params)
    return (entry.state, misses, samples) if misses else (entry.state, 0, 0)


def is_verdict_moved(
    entry: WindowedEntry, before: tuple[int, int, int], params: WindowedParams
) -> bool:
    """Whether a write may change the participant's verdict: always while it is not healthy
    (a probe slot, the cooldown's end), else when its state or suspicion evidence moved."""
    return entry.state != W_HEALTHY or get_verdict_marker(entry, params) != before


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


class WindowedBreaker(HealthPolicy):
    name: ClassVar[str] = "windowed"
    prefix: ClassVar[bytes] = b"\x05"

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> WindowedEntry:
        if raw is None:
            return WindowedEntry(address=address, state=W_HEALTHY)
        return WindowedEntry.FromString(raw)

    # --- writes -------------------------------------------------------------------------

    def process_start(self, ctx: PolicyStore, address: str, inference: Inference) -> None:
        """Only a probe's start is recorded (it takes a slot). Every start's overdue check
        finds it through the chain's own timeout index (process_overdue_checks), so a healthy
        participant's start reads and writes nothing of its own."""
        if inference.status != STARTED:
            return  # finished before it started: already resolved (and no timeout)
        probing = ctx.get(FLEET, self.get_entry).probing
        if not probing or address not in probing:  # (a protobuf list: its `in` costs more)
            return
        expiration = ctx.expiration_blocks
        entry = ctx.get(address, self.get_entry)
        process_prune(entry, ctx.height, expiration)
        entry.open.append(
            OpenInference(start_height=ctx.height, probe=True, inference_id=inference.inference_id)
        )
        ctx.set(address, entry)  # a probe slot taken

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        params = ctx.params.health_params.windowed
        entry = ctx.get(address, self.get_entry)
        before = get_verdict_marker(entry, params)
        item = process_take_open(entry, inference.inference_id)
        if item is None and outcome is Outcome.NEUTRAL:
            return  # pushback about nothing we track: nothing to record
        flagged = item is not None and item.flagged
        if outcome is Outcome.NEUTRAL:
            if item is not None and flagged:
                process_remove_flag(entry, item)
        elif outcome is Outcome.SUCCESS:
            process_record_span(entry, inference.start_block_height, ctx.height)
            self.process_fleet_latency(ctx, ctx.height - inference.start_block_height)
            if item is not None and flagged:
                process_clear_flag(entry, item)
                entry.overdue_undone += 1
            else:
                process_push(entry, miss=False)
        elif not flagged:
            capacity = is_capacity_miss(entry, inference.start_block_height)
            self.process_record_miss(ctx, entry, capacity)
        process_prune(entry, ctx.height, ctx.expiration_blocks)
        if count_window_samples(entry, params.window) <= params.min_samples:
            acceleration.get_recheck(ctx).add(
                address
            )  # too few samples before: the window may be judged now
        # Provisional evidence withdrawn: if the window no longer fails, probe right away
        # instead of sitting out a cooldown that a false alarm earned.
        if (
            entry.state == W_EXCLUDED
            and flagged
            and outcome is not Outcome.MISS
            and not is_gate_failing(entry, params)
        ):
            self.process_promote(ctx, entry, "overdue evidence withdrawn")
        # Probe decisions: only a probe's own (unflagged) result decides; a flagged probe already
        # failed when it turned overdue.
        if entry.state == W_PROBE and item is not None and item.probe and not flagged:
            if outcome is Outcome.MISS:
                self.process_exclude(ctx, entry, "probe missed", failed_probe=True)
            elif outcome is Outcome.SUCCESS:
                misses, samples = compute_readmission_window(entry, params)
                if samples >= params.readmit_successes and not is_window_failing(
                    misses, samples, params
                ):
                    self.process_readmit(ctx, entry, misses, samples)
        if outcome is Outcome.SUCCESS and entry.state == W_HEALTHY and is_recovery_proven(entry):
            self.process_recovered(ctx, entry)
        acceleration.set_with_hint(ctx, address, entry, is_verdict_moved(entry, before, params))

    def process_record_miss(self, ctx: PolicyStore, entry: WindowedEntry, capacity: bool) -> None:
        """Count a miss in the window and tell the fleet whether it was a capacity miss."""
        process_push(entry, miss=True)
        acceleration.get_recheck(ctx).add(entry.address)
        entry.capacity_misses += int(capacity)
        fleet = ctx.get(FLEET, self.get_entry)
        params = ctx.params.health_params.windowed
        # Suspicion weighting is held while the fleet is saturated: a flip re-asks everyone.
        watched = params.suspicion_prior_pct > 0
        saturated = watched and is_fleet_saturated(fleet, params)
        process_push_capacity_bit(fleet, capacity)
        acceleration.set_keeping_verdict(ctx, FLEET, fleet)
        if watched and is_fleet_saturated(fleet, params) != saturated:
            acceleration.touch_all_verdicts(ctx)

    def process_fleet_latency(self, ctx: PolicyStore, latency: int) -> None:
        """Noted for now: the fleet entry takes the block's latencies together at the start of
        the end block, before anything reads them (process_add_fleet_latencies)."""
        memo = acceleration.get_memo(ctx)
        pending = memo.get("fleet_latencies")
        if not isinstance(pending, list):
            pending = memo["fleet_latencies"] = []
        pending.append(latency)

    def process_add_fleet_latencies(self, ctx: PolicyStore) -> None:
        pending = acceleration.get_memo(ctx).pop("fleet_latencies", None)
        if not isinstance(pending, list) or not pending:
            return
        fleet = ctx.get(FLEET, self.get_entry)
        fleet.recent_latencies.extend(pending)
        process_bound(fleet.recent_latencies, FLEET_LATENCY_SAMPLES)
        acceleration.set_keeping_verdict(ctx, FLEET, fleet)

    def process_end_block(self, ctx: PolicyStore) -> None:
        """Overdue deadlines, cooldown ends, then the gate for the windows that may now fail
        (the block's entries are written once, after the end block)."""
        self.process_add_fleet_latencies(ctx)
        self.process_overdue_checks(ctx)
        for address in ctx.pop_due():
            entry = ctx.find(address, self.get_entry)
            if entry is None:
                continue
            if entry.state != W_EXCLUDED or ctx.height < entry.probe_at_block:
                continue
            self.process_promote(ctx, entry, f"cooldown of {entry.cooldown_blocks} blocks over")
            ctx.set(address, entry)
        # Gates after every wake-up: the saturation guard sees all of this block's overdue
        # flags. A window can start failing only on a new miss or by reaching min_samples
        # (process_outcome marks both for recheck); everyone touched is judged under new params,
        # and so is anyone this block touched without the policy (a registration).
        judge = acceleration.get_recheck_candidates(ctx)
        judge.discard(FLEET)
        for address in sorted(judge):
            entry = ctx.find(address, self.get_entry)
            if entry is not None and self.process_gate(ctx, entry):
                ctx.set(address, entry)

    def process_gate(self, ctx: PolicyStore, entry: WindowedEntry) -> bool:
        """Exclude a healthy participant whose window fails the gate; True if it did. Not while
        the fleet is saturated: its traffic would only overload the others."""
        if entry.state != W_HEALTHY:
            return False
        params = ctx.params.health_params.windowed
        if not is_gate_failing(entry, params):
            return False
        if is_fleet_saturated(ctx.get(FLEET, self.get_entry), params):
            return False
        misses, samples = compute_window(entry, params.window)
        self.process_exclude(ctx, entry, f"window {misses}/{samples} missed")
        return True

    def process_recovered(self, ctx: PolicyStore, entry: WindowedEntry) -> None:
        """A recovery proven: its incident is over (incident_blocks), and with
        strikes_until_proven its episode closes (the next exclusion starts from no strikes)."""
        params = ctx.params.health_params.windowed
        entry.recoveries += 1
        entry.proven_for_seq = entry.probe_from_seq + 1
        if params.incident_blocks > 0:
            self.process_incident_over(ctx, entry)
        if params.strikes_until_proven:
            entry.strikes = 0
            entry.episode_started_at = 0

    def process_incident_over(self, ctx: PolicyStore, recovered: WindowedEntry) -> None:
        """``recovered`` came back from an exclusion and stayed in: whoever was excluded in the
        same incident (an episode begun within incident_blocks of its own) is probed now
        instead of sitting out its cooldown. Still bad, it fails its probe as usual."""
        incident = ctx.params.health_params.windowed.incident_blocks
        for address in list(ctx.get(FLEET, self.get_entry).excluded):
            entry = ctx.get(address, self.get_entry)
            if abs(entry.episode_started_at - recovered.episode_started_at) <= incident:
                self.process_promote(ctx, entry, f"incident over: {recovered.address} recovered")
                ctx.set(address, entry)

    def process_overdue_checks(self, ctx: PolicyStore) -> None:
        """Look at the inferences started overdue_min_blocks ago (the chain's timeout index
        lists them by expiry height) and at those whose participant's own threshold is due."""
        expiration = ctx.expiration_blocks
        min_blocks = ctx.params.health_params.windowed.overdue_min_blocks
        started_at = ctx.height - min_blocks
        timeout_at = started_at + expiration
        if min_blocks < expiration:
            # Read from the chain's timeout index: the reads a chain makes are what its gas
            # counts (no in-memory list of starts: a restart would lose it and change a
            # block's gas; docs/metrics.md, "Gas").
            for inference_id in ctx.chain.get_timeouts_due(timeout_at):
                self.process_overdue(ctx, inference_id, started_at)
        for inference_id in ctx.pop_due_items():
            self.process_overdue(ctx, inference_id)

    def process_overdue(
        self, ctx: PolicyStore, inference_id: str, started_at: int | None = None
    ) -> None:
        """Still unfinished past its participant's overdue threshold: a provisional miss. The
        threshold is taken now, from the latencies seen up to now; not yet reached, the
        inference is looked at again when it is."""
        # (imported here: keeper.inferences imports the block context, which imports policies)
        from keepersim.keeper.inferences import is_declined

        inference = ctx.chain.get_inference(inference_id)
        # A declined inference stays STARTED (with an end height) and keeps its timeout.
        if inference is None or inference.status != STARTED or is_declined(inference):
            return  # resolved in time (or declined, or finished by another executor)
        if started_at is not None and inference.start_block_height != started_at:
            return  # its timeout was set under another expiration_blocks: it expires unchecked
        address = inference.assigned_to
        entry = ctx.get(address, self.get_entry)
        overdue = self.get_overdue_blocks(ctx, entry)
        if overdue is None or overdue >= ctx.expiration_blocks:
            return  # no latency seen yet, or the expiry comes first
        if inference.start_block_height + overdue > ctx.height:
            ctx.schedule_item(inference.start_block_height + overdue, inference_id)
            return
        params = ctx.params.health_params.windowed
        before = get_verdict_marker(entry, params)
        process_prune(entry, ctx.height, ctx.expiration_blocks)
        index = find_open(entry, inference_id)
        if index is None:
            item = entry.open.add(start_height=inference.start_block_height)
            item.inference_id = inference_id
        else:
            item = entry.open[index]
            if item.flagged:
                return
        item.flagged = True
        item.flag_seq = entry.outcome_seq
        self.process_record_miss(ctx, entry, is_capacity_miss(entry, item.start_height))
        entry.overdue_flags += 1
        if item.probe and entry.state == W_PROBE:
            self.process_exclude(ctx, entry, "probe overdue", failed_probe=True)
        acceleration.set_with_hint(ctx, address, entry, is_verdict_moved(entry, before, params))

    def get_overdue_blocks(self, ctx: PolicyStore, entry: WindowedEntry) -> int | None:
        fleet = ctx.get(FLEET, self.get_entry).recent_latencies
        return compute_overdue_blocks(
            get_own_latencies(entry), fleet, ctx.params.health_params.windowed
        )

    def process_exclude(
        self, ctx: PolicyStore, entry: WindowedEntry, reason: str, failed_probe: bool = False
    ) -> None:
        params = ctx.params.health_params.windowed
        from_state = STATE_NAMES[entry.state]
        if params.strikes_until_proven:
            quick = entry.episode_started_at > 0  # an episode open: no recovery proven since
        else:
            quick = (
                entry.readmitted_at_block > 0
                and ctx.height < entry.readmitted_at_block + get_probation_blocks(params)
            )
        entry.strikes = min(entry.strikes + 1, MAX_STRIKES) if failed_probe or quick else 0
        if entry.strikes == 0:
            entry.episode_started_at = ctx.height
        entry.exclusions += 1
        entry.cooldown_blocks = compute_cooldown(
            entry.address, entry.strikes, entry.exclusions, entry.recoveries, params
        )
        self.process_set_state(ctx, entry, W_EXCLUDED)
        entry.excluded_at_block = ctx.height
        entry.probe_at_block = ctx.height + entry.cooldown_blocks
        ctx.schedule(entry.probe_at_block, entry.address)
        ctx.emit_transition(
            entry.address,
            from_state,
            "excluded",
            f"{reason}; cooldown {entry.cooldown_blocks} (strikes {entry.strikes})",
        )

    def process_set_state(
        self, ctx: PolicyStore, entry: WindowedEntry, state: WindowedState.ValueType
    ) -> None:
        """Every state change passes here: the fleet entry lists who is probing."""
        for listed_state, attribute in ((W_PROBE, "probing"), (W_EXCLUDED, "excluded")):
            if (entry.state == listed_state) != (state == listed_state):
                fleet = ctx.get(FLEET, self.get_entry)
                listed = getattr(fleet, attribute)
                if state == listed_state:
                    listed.append(entry.address)
                else:
                    listed.remove(entry.address)
                acceleration.set_keeping_verdict(ctx, FLEET, fleet)
        entry.state = state

    def process_promote(self, ctx: PolicyStore, entry: WindowedEntry, reason: str) -> None:
        self.process_set_state(ctx, entry, W_PROBE)
        entry.probe_from_seq = entry.outcome_seq
        ctx.emit_transition(entry.address, "excluded", "probe", reason)

    def process_readmit(
        self, ctx: PolicyStore, entry: WindowedEntry, misses: int, samples: int
    ) -> None:
        self.process_set_state(ctx, entry, W_HEALTHY)
        entry.readmitted_at_block = ctx.height
        ctx.emit_transition(
            entry.address, "probe", "healthy", f"probe succeeded; window {misses}/{samples} missed"
        )

    def process_epoch_boundary(self, ctx: PolicyStore) -> None:
        """Nothing: the window and any exclusion outlive the epoch (a reset discards evidence)."""

    # --- reads --------------------------------------------------------------------------

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        raw = reader.get_raw(address)
        if raw is None:
            return Health(True)
        params = reader.params.health_params.windowed
        entry = WindowedEntry.FromString(raw)
        if entry.state == W_HEALTHY:
            suspicion = get_suspicion_pct(entry, params)
            if suspicion != 100 and self.is_saturated(reader):
                suspicion = 100
            ramp = compute_ramp(entry.readmitted_at_block, height, params)
            if ramp is None:
                if suspicion == 100:
                    return ADMITTED
                return Health(True, factor_num=suspicion, factor_den=100, state="suspect")
            pct, valid_until = ramp
            num, den = (pct, 100) if suspicion == 100 else (pct * suspicion, 100 * 100)
            return Health(
                True, factor_num=num, factor_den=den, valid_until=valid_until, state="ramping"
            )
        severity = compute_miss_ppm(*compute_window(entry, params.window))
        if entry.state == W_EXCLUDED and height < entry.probe_at_block:
            return Health(
                False,
                severity=severity,
                valid_until=entry.probe_at_block - 1,
                state="excluded",
            )
        # Probing (or excluded past its cooldown, promoted in that height's end block).
        if params.probe_weight_pct > 0:
            return Health(True, factor_num=params.probe_weight_pct, factor_den=100, state="probe")
        expiration = reader.expiration_blocks
        in_flight = count_probes_in_flight(entry, height, expiration)
        if in_flight >= params.max_probes:
            # A slot frees on a result (which touches the participant) or, for a probe that
            # never gets one here, at its expiry height.
            frees_at = min(
                item.start_height + expiration
                for item in entry.open
                if item.probe and item.start_height + expiration > height
            )
            return Health(False, severity=severity, valid_until=frees_at - 1, state="probe_full")
        return Health(True, state="probe")

    def is_saturated(self, reader: PolicyReader) -> bool:
        """The saturation guard, read once per reader: while the fleet is saturated, down-
        weighting a node only moves its traffic onto full nodes, as excluding it would."""
        memo = acceleration.get_memo(reader)
        saturated = memo.get("saturated")
        if not isinstance(saturated, bool):
            fleet = self.get_entry(reader.get_raw(FLEET), FLEET)
            saturated = is_fleet_saturated(fleet, reader.params.health_params.windowed)
            memo["saturated"] = saturated
        return saturated

    def get_exclusion_cap_pct(self, params: ExtensionParams) -> int:
        return params.health_params.windowed.max_excluded_weight_pct

    def get_panic_pct(self, params: ExtensionParams) -> int:
        return params.health_params.windowed.panic_healthy_weight_pct

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        params = reader.params.health_params.windowed
        entry = self.get_entry(reader.get_raw(address), address)
        health = self.get_health(reader, address, height)
        misses, samples = compute_window(entry, params.window)
        fleet_entry = self.get_entry(reader.get_raw(FLEET), FLEET)
        fleet = list(fleet_entry.recent_latencies)
        return {
            "state": STATE_NAMES[entry.state],
            "verdict": health.state,
            "admitted": health.admitted,
            "factor_pct": health.factor_num * 100 // health.factor_den,
            "window_misses": misses,
            "window_samples": samples,
            "window_miss_ppm": compute_miss_ppm(misses, samples),
            "window_failing": is_window_failing(misses, samples, params),
            "suspicion_pct": get_suspicion_pct(entry, params),
            "outcomes_recorded": entry.outcome_seq,
            "exclusions": entry.exclusions,
            "strikes": entry.strikes,
            "excluded_at_block": entry.excluded_at_block,
            "cooldown_blocks": entry.cooldown_blocks,
            "probe_at_block": entry.probe_at_block if entry.state == W_EXCLUDED else None,
            "readmitted_at_block": entry.readmitted_at_block,
            "remembered_inferences": len(entry.open),  # probes and flagged ones
            "open_flagged": sum(1 for item in entry.open if item.flagged),
            "probes_in_flight": count_probes_in_flight(entry, height, reader.expiration_blocks),
            "overdue_blocks": compute_overdue_blocks(get_own_latencies(entry), fleet, params),
            "overdue_flags": entry.overdue_flags,
            "served_concurrency": entry.served_concurrency,
            "capacity_misses": entry.capacity_misses,
            "fleet_saturated": is_fleet_saturated(fleet_entry, params),
            "overdue_undone": entry.overdue_undone,
            "recoveries": entry.recoveries,
            "episode_started_at": entry.episode_started_at,
            "probe_outcomes": count_probe_outcomes(entry) if entry.exclusions else 0,
            "recent_latencies": list(get_own_latencies(entry)),
        }
