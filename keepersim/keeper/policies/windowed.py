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
  the starts through the chain's timeout index, so a start writes nothing.
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
reads and writes nothing of its own. The gate judges a window at the end of each block in
which it took a miss or reached min_samples (a window can start failing no other way), and
every window when new params take effect. The fleet's latency samples, capacity-miss ring and lists of probing and
excluded participants live in the entry of the empty address (never a participant's).

The entry's evidence and the pure rules over it are in windowed_evidence.py; the speed-ups,
each proven equal to its plain form, in windowed_index.py.
"""

from __future__ import annotations

from typing import ClassVar

from keepersim.keeper.policies import windowed_index
from keepersim.keeper.policies.base import (
    ADMITTED,
    Health,
    HealthPolicy,
    PolicyReader,
    PolicyStore,
)
from keepersim.keeper.policies.windowed_evidence import (
    FLEET,
    FLEET_LATENCY_SAMPLES,
    MAX_STRIKES,
    RECOVERY_EVIDENCE,
    STATE_NAMES,
    compute_cooldown,
    compute_miss_ppm,
    compute_overdue_blocks,
    compute_ramp,
    compute_readmission_window,
    compute_window,
    count_probe_outcomes,
    count_probes_in_flight,
    count_window_samples,
    find_open,
    get_own_latencies,
    get_probation_blocks,
    get_suspicion_pct,
    is_capacity_miss,
    is_fleet_saturated,
    is_gate_failing,
    is_recovery_proven,
    is_window_failing,
    process_bound,
    process_clear_flag,
    process_prune,
    process_push,
    process_push_capacity_bit,
    process_record_span,
    process_remove_flag,
    process_take_open,
)
from keepersim.types.events import Outcome
from keepersim.types.messages import STARTED, Inference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    W_EXCLUDED,
    W_HEALTHY,
    W_PROBE,
    OpenInference,
    WindowedEntry,
    WindowedState,
)

# Also read from here by tests and scripts.
__all__ = [
    "FLEET",
    "MAX_STRIKES",
    "RECOVERY_EVIDENCE",
    "STATE_NAMES",
    "WindowedBreaker",
    "get_probation_blocks",
    "process_push",
]


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
        before = windowed_index.get_verdict_marker(entry, params)
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
            self.process_judge_later(ctx, address)  # too few samples before: judged from now
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
        windowed_index.set_entry(ctx, address, entry, before, params)

    def process_record_miss(self, ctx: PolicyStore, entry: WindowedEntry, capacity: bool) -> None:
        """Count a miss in the window and tell the fleet whether it was a capacity miss."""
        process_push(entry, miss=True)
        self.process_judge_later(ctx, entry.address)
        entry.capacity_misses += int(capacity)
        fleet = ctx.get(FLEET, self.get_entry)
        params = ctx.params.health_params.windowed
        # Suspicion weighting is held while the fleet is saturated: a flip re-asks everyone.
        watched = params.suspicion_prior_pct > 0
        saturated = watched and is_fleet_saturated(fleet, params)
        process_push_capacity_bit(fleet, capacity)
        windowed_index.set_keeping_verdict(ctx, FLEET, fleet)
        if watched and is_fleet_saturated(fleet, params) != saturated:
            windowed_index.touch_all_verdicts(ctx)

    def process_judge_later(self, ctx: PolicyStore, address: str) -> None:
        """The window of ``address`` took a miss or reached min_samples, so it may fail the gate
        now: this block's end block judges it, after every overdue flag of the block (the
        saturation guard sees them all). Nothing else can make a window fail. (Not a wake-up
        in the queue: a stale cooldown wake-up would then judge a window that took no miss.)"""
        windowed_index.get_block(ctx).to_judge.add(address)

    def process_fleet_latency(self, ctx: PolicyStore, latency: int) -> None:
        """A success's latency joins the fleet's samples (the index keeps the block's for its
        end block)."""
        if not windowed_index.get_index(ctx).process_defer_latency(latency):
            self.process_add_fleet_latencies(ctx, [latency])

    def process_add_fleet_latencies(self, ctx: PolicyStore, latencies: list[int]) -> None:
        if not latencies:
            return
        fleet = ctx.get(FLEET, self.get_entry)
        fleet.recent_latencies.extend(latencies)
        process_bound(fleet.recent_latencies, FLEET_LATENCY_SAMPLES)
        windowed_index.set_keeping_verdict(ctx, FLEET, fleet)

    def process_end_block(self, ctx: PolicyStore) -> None:
        """The block's fleet latencies, overdue deadlines, cooldowns over (probing starts), then
        the gate for every window that took a miss or reached min_samples in this block (after
        every wake-up); new params judge every window."""
        deferred = windowed_index.get_index(ctx).take_deferred_latencies()
        self.process_add_fleet_latencies(ctx, deferred)
        self.process_overdue_checks(ctx)
        for address in ctx.pop_due():
            entry = ctx.find(address, self.get_entry)
            if entry is None or entry.state != W_EXCLUDED or ctx.height < entry.probe_at_block:
                continue
            self.process_promote(ctx, entry, f"cooldown of {entry.cooldown_blocks} blocks over")
            ctx.set(address, entry)
        judged = windowed_index.get_block(ctx).take_to_judge()
        if ctx.chain.is_params_changed():
            judged = [address for address, _ in ctx.iterate(self.get_entry) if address != FLEET]
        for address in judged:
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
        before = windowed_index.get_verdict_marker(entry, params)
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
        windowed_index.set_entry(ctx, address, entry, before, params)

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
                windowed_index.set_keeping_verdict(ctx, FLEET, fleet)
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
        """The saturation guard: while the fleet is saturated, down-weighting a node only moves
        its traffic onto full nodes, as excluding it would."""

        def compute() -> bool:
            fleet = self.get_entry(reader.get_raw(FLEET), FLEET)
            return is_fleet_saturated(fleet, reader.params.health_params.windowed)

        return windowed_index.get_reader_value(reader, "saturated", compute)

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
