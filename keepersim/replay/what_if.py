"""What-if replay: the recorded request stream, with a policy choosing the executors.

Pass 1 (:mod:`keepersim.replay.estimator`) estimates each participant's miss probability per
block window and its latency distribution from the recorded outcomes. Pass 2 streams the trace
again and replays its requests - arrival heights, models and ids of the recorded inferences - on a
chain whose params run ``policy`` (not in shadow): before block h, each request starting at h asks
``chain.get_random_executor(model, inference_id)`` (the table of the committed height h - 1, as a
Transfer Agent would), and its outcome is drawn from the estimates:

* miss with probability p(executor, window of h): the module expires it at h + expiration_blocks;
* otherwise a finish after a latency drawn from the executor's histogram (a latency beyond the
  expiry is a miss, as the chain would reject the late finish).

Randomness is keyed by (seed, inference_id, executor): the same request sent to the same
executor has the same outcome under every policy, and every policy sees the same request stream,
so runs of different policies with one seed are paired (common random numbers). Integers and
SHA-256 only: the same on every machine.

Not modelled: capacity (load does not change a participant's miss rate), pushback (recorded
declines are requests like any other; outcomes are miss or success), and the selection bias of
the recording (see the estimator). Every report states the estimator's calibration error against
``simulate`` (:mod:`keepersim.replay.calibration`, docs/what-if.md) and flags a run the
calibration does not cover (other estimator settings, a capacity-limited recording). Recorded params changes, participant changes and the
governance schedule are applied as in the as-recorded replay, with ``policy`` kept in force.

Memory: the estimator (participants x windows), the pending finishes (in flight), one block's
requests, and the exclusion intervals.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from google.protobuf.message import Message

from keepersim.chain import BlockResult, Chain
from keepersim.keeper.selection import compute_weight_factors, get_candidates
from keepersim.replay.calibration import compute_calibration_note
from keepersim.replay.common import (
    Governance,
    IntervalTracker,
    StoreKind,
    check_policies,
    compute_replay_fingerprint,
    format_app_hash,
    get_table_exclusions,
    make_progress,
    open_trace,
    start_schedule,
)
from keepersim.replay.estimator import (
    DEFAULT_METHOD,
    BehaviourEstimator,
    BetaPrior,
    estimate_trace,
)
from keepersim.replay.lanes import close_lanes, drive_records, open_lanes, read_lane_checkpoint
from keepersim.store.checkpoint import encode_checkpoint, process_kill_point
from keepersim.trace.blocks import BlockFeeder, ParamsPart, resolve_scheduled
from keepersim.trace.format import FINISHED_LIKE
from keepersim.trace.genesis import Prologue
from keepersim.trace.messages import Listed, ParticipantTracker, Schedule
from keepersim.trace.reader import TraceCursor
from keepersim.trace.records import BadLines, InferenceRecord, TraceRecord
from keepersim.types.errors import KeepersimError
from keepersim.types.events import HealthTransition, InferenceExpired, InferenceFinished
from keepersim.types.messages import EXPIRED
from keepersim.types.params import params_to_dict
from keepersim.types.pb.inference.inference.tx_pb2 import MsgFinishInference, MsgStartInference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

__all__ = ["FALSE_EXCLUSION_P", "compute_keyed_int", "replay_what_if"]

# A participant kept out while its estimated miss probability is at most this is a false exclusion
# (the simulator's threshold on the true probability).
FALSE_EXCLUSION_P: Final = 0.05
_TWO_64: Final = float(1 << 64)

RequestHook = Callable[[int, str, str, int | None], None]


def compute_keyed_int(seed: int, inference_id: str, executor: str, purpose: str) -> int:
    """A 64-bit integer from (seed, request, executor, purpose): the pairing key of outcomes."""
    data = "\x00".join(("keepersim/what-if/v1", str(seed), inference_id, executor, purpose))
    return int.from_bytes(hashlib.sha256(data.encode()).digest()[:8], "big")


def get_policy_prologue(prologue: Prologue, policy: str) -> Prologue:
    """The prologue with ``policy``'s mechanisms in force (see :func:`apply_run_mechanisms`)."""
    if policy != "sprt" or prologue.params.params.extension_params.sprt_enabled:
        return prologue
    params = ModuleParams()
    params.CopyFrom(prologue.params.params)
    params.extension_params.sprt_enabled = True
    return dataclasses.replace(prologue, params=dataclasses.replace(prologue.params, params=params))


def apply_run_mechanisms(msg: Message, policy: str) -> Message:
    """A scheduled params message with ``policy``'s mechanisms: the ``sprt`` policy is the
    chain's SPRT deactivation alone, so a what-if of it turns ``sprt_enabled`` on, as
    ``simulate``'s sprt runs do (:func:`keepersim.sim.run_genesis.build_params`); other policies keep
    the recorded setting."""
    if policy == "sprt" and isinstance(msg, MsgUpdateExtensionParams):
        msg.extension_params.sprt_enabled = True
    return msg


def _draw_outcome(
    estimator: BehaviourEstimator,
    seed: int,
    inference_id: str,
    executor: str,
    height: int,
    expiration: int,
) -> int | None:
    """The latency of a success, or None for a miss."""
    p = estimator.get_miss_probability(executor, height)
    u = compute_keyed_int(seed, inference_id, executor, "miss") / _TWO_64
    if u < p:
        return None
    latency = estimator.draw_latency(
        executor, compute_keyed_int(seed, inference_id, executor, "latency")
    )
    return None if latency > expiration else latency


# The run's own state (besides the schedule, tracker and bad lines) a checkpoint holds.
_RUN_STATE = (
    "committed",
    "gather_height",
    "gather",
    "pending",
    "max_pending",
    "counts",
    "recorded",
    "by_participant",
    "transitions",
    "intervals",
    "fallback_blocks",
    "panic_blocks",
    "false_exclusion_sum",
    "withheld_sum",
    "excluded_share_sum",
    "blocks",
    "unserved",
    "tx_failures",
    "excluded",
)


def get_table_factors(chain: Chain) -> dict[str, float]:
    """The admitted participants the committed height's selection table for model "" draws at
    less than their candidate weight, each with the fraction it gives
    (:func:`~keepersim.keeper.selection.compute_weight_factors`); empty when there is no table."""
    try:
        table, weights = chain.get_table_weights("")
    except KeepersimError:
        return {}
    return compute_weight_factors(table, weights)


class _WhatIfRun(BlockFeeder[tuple[str, str, str]]):
    """Requests gathered as (inference_id, model, requested_by) per start height."""

    def __init__(
        self,
        chain: Chain,
        policy: str,
        estimator: BehaviourEstimator,
        schedule: Schedule,
        tracker: ParticipantTracker,
        *,
        seed: int,
        first_height: int,
        last_height: int,
        progress: Any,
        max_listed: int,
        on_request: RequestHook | None = None,
        fingerprint: bytes | None = None,
        cursor: TraceCursor | None = None,
        bad_lines: BadLines | None = None,
    ) -> None:
        super().__init__(first_height, last_height, schedule, tracker)
        # A resumable replay (leveldb): each commit carries a checkpoint of the state.
        self.fingerprint = fingerprint
        self.cursor = cursor
        self.bad_lines = bad_lines
        self.current: TraceRecord | None = None
        self.on_request = on_request
        self.chain = chain
        self.policy = policy
        self.estimator = estimator
        self.seed = seed
        self.progress = progress
        # (finish height, start, inference_id, executor)
        self.pending: list[tuple[int, int, str, str]] = []
        self.max_pending = 0
        self.counts: Counter[str] = Counter()
        self.recorded: Counter[str] = Counter()
        self.by_participant: dict[str, Counter[str]] = {}
        self.transitions: Counter[str] = Counter()
        self.intervals = IntervalTracker()
        self.fallback_blocks = 0
        self.panic_blocks = 0
        self.false_exclusion_sum = 0.0
        self.withheld_sum = 0.0
        self.excluded_share_sum = 0.0
        self.blocks = 0
        self.unserved = Listed(max_listed)
        self.tx_failures = Listed(max_listed)
        self.excluded: frozenset[str] = frozenset()

    def process_start(self, record: InferenceRecord) -> None:
        self.gather.append((record.inference_id, record.model, record.requested_by))
        status = record.status
        self.recorded["inferences"] += 1
        if status in FINISHED_LIKE:
            self.recorded["successes"] += 1
        elif status == EXPIRED:
            self.recorded["misses"] += 1

    def deliver(self, height: int, requests: list[tuple[str, str, str]]) -> None:
        chain = self.chain
        expiration = chain.get_params().params.validation_params.expiration_blocks
        msgs: list[Message] = [
            apply_run_mechanisms(resolve_scheduled(part, self.policy, False), self.policy)
            if isinstance(part, ParamsPart)
            else part
            for _, part in self.pop_scheduled(height)
        ]
        while self.pending and self.pending[0][0] <= height:
            _, _, inference_id, executor = heapq.heappop(self.pending)
            msgs.append(MsgFinishInference(inference_id=inference_id, executed_by=executor))
        same_block: list[Message] = []
        for inference_id, model, requested_by in requests:
            try:
                selection = chain.get_random_executor(model, inference_id)
            except KeepersimError as exc:
                self.unserved.add(
                    {"height": height, "inference_id": inference_id, "error": str(exc)}
                )
                continue
            executor = selection.address
            self.counts["inferences"] += 1
            self.counts["fallback_selections"] += selection.fallback
            self.counts["panic_selections"] += selection.panic
            per = self.by_participant.setdefault(executor, Counter())
            per["inferences"] += 1
            msgs.append(
                MsgStartInference(
                    creator=requested_by,
                    inference_id=inference_id,
                    model=model,
                    requested_by=requested_by,
                    assigned_to=executor,
                )
            )
            latency = _draw_outcome(
                self.estimator, self.seed, inference_id, executor, height, expiration
            )
            if self.on_request is not None:
                self.on_request(height, inference_id, executor, latency)
            if latency is None:
                self.counts["misses"] += 1
                per["misses"] += 1
                continue
            self.counts["successes"] += 1
            per["successes"] += 1
            if latency == 0:
                same_block.append(
                    MsgFinishInference(inference_id=inference_id, executed_by=executor)
                )
            else:
                heapq.heappush(self.pending, (height + latency, height, inference_id, executor))
                self.max_pending = max(self.max_pending, len(self.pending))
        msgs.extend(same_block)
        hook = None if self.fingerprint is None else self.get_checkpoint
        result = chain.deliver_block(msgs, height=height, meta=hook)
        if hook is not None:
            process_kill_point(height, f"post-{self.policy}")
        self.process_result(height, result)

    def process_result(self, height: int, result: BlockResult) -> None:
        """After block ``height`` committed: its rejections and events, the table's exclusions."""
        for tx in result.get_failed():
            self.tx_failures.add({"height": height, "kind": tx.kind, "error": tx.error})
        for event in result.events:
            if isinstance(event, InferenceExpired):
                self.counts["expired_events"] += 1
            elif isinstance(event, InferenceFinished):
                self.counts["finished_events"] += 1
            elif isinstance(event, HealthTransition):
                self.transitions[f"{event.from_state}->{event.to_state}"] += 1
        self.committed = height
        self.blocks += 1
        self.observe_table(height)
        self.progress.update(1)

    # -- resuming -----------------------------------------------------------------------------

    def get_checkpoint(self, result: BlockResult) -> dict[bytes, bytes | None]:
        """The replay's state just before ``result``'s block commits (its requests assigned),
        with the block's result to finish it on resume."""
        assert self.fingerprint is not None
        state = {
            "run": {name: getattr(self, name) for name in _RUN_STATE},
            "schedule": self.schedule,
            "tracker": self.tracker,
            "bad_lines": self.bad_lines,
            "height": result.height,
            "result": (result.events, result.tx_results),
            "current": self.current,
            "cursor": self.cursor,
        }
        meta = encode_checkpoint(self.fingerprint, state)
        process_kill_point(result.height, f"pre-{self.policy}")
        return meta

    def process_checkpoint(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state back and finish its block."""
        for name, value in state["run"].items():
            setattr(self, name, value)
        self.schedule = state["schedule"]
        self.tracker = state["tracker"]
        self.bad_lines = state["bad_lines"]
        events, tx_results = state["result"]
        height = state["height"]
        self.process_result(height, BlockResult(height, self.chain.app_hash, events, tx_results))

    def observe_table(self, height: int) -> None:
        """Exclusions of the committed table, for the requests of the next height."""
        excluded, fallback, panic = get_table_exclusions(self.chain)
        self.fallback_blocks += fallback
        self.panic_blocks += panic
        self.excluded = excluded
        if height >= self.last_height:
            return
        self.account_exclusions(height + 1, excluded, get_table_factors(self.chain))

    def account_exclusions(
        self, height: int, excluded: frozenset[str], factors: dict[str, float]
    ) -> None:
        """The shares of the requests of ``height``: ``excluded`` kept out, ``factors`` the
        admitted drawn below their candidate weight (:func:`get_table_factors`)."""
        self.intervals.observe(height, excluded)
        if not excluded and not factors:
            return
        try:
            with self.chain.read() as keeper:
                candidates = get_candidates(keeper, "", self.chain.height)
        except KeepersimError:
            return
        total = sum(c.weight for c in candidates)
        if total <= 0:
            return
        out = sum(c.weight for c in candidates if c.address in excluded)
        # Healthy: the estimated p <= FALSE_EXCLUSION_P (the one test of both shares below).
        healthy = [
            c
            for c in candidates
            if (c.address in excluded or c.address in factors)
            and self.estimator.get_miss_probability(c.address, height) <= FALSE_EXCLUSION_P
        ]
        false_out = sum(c.weight for c in healthy if c.address in excluded)
        reduced = sum(
            c.weight * (1.0 - factors[c.address])
            for c in healthy
            if c.address in factors and c.address not in excluded
        )
        self.excluded_share_sum += out / total
        self.false_exclusion_sum += false_out / total
        self.withheld_sum += (false_out + reduced) / total

    def get_bad_lines(self) -> BadLines:
        assert self.bad_lines is not None
        return self.bad_lines

    def finish(self) -> None:
        self.finish_blocks()
        self.intervals.finish(self.last_height)


def replay_what_if(
    trace_path: str | os.PathLike[str],
    policy: str,
    *,
    seed: int,
    method: str = DEFAULT_METHOD,
    window_blocks: int = 1000,
    prior: BetaPrior | tuple[float, float] = (1.0, 30.0),
    store: StoreKind = "memory",
    store_dir: str | os.PathLike[str] | None = None,
    governance: Governance | None = None,
    skip_bad: bool = False,
    progress: bool = False,
    estimator: BehaviourEstimator | None = None,
    max_listed: int = 50,
    on_request: RequestHook | None = None,
    resume: bool = False,
    resumable: bool = False,
    allow_partial: bool = False,
) -> dict[str, Any]:
    """Replay the recorded requests with ``policy`` choosing executors; see the module doc.

    Pass a fitted ``estimator`` (from :func:`~keepersim.replay.estimator.estimate_trace`) to
    compare several policies without estimating again. The result has the simulator's run keys
    where they mean the same (``inferences``, ``misses``, ``miss_rate``, ``fallback_selections``,
    ``false_exclusion_weight_share`` and ``withheld_weight_share`` - on estimated probabilities -,
    ``app_hash``).
    ``on_request(height, inference_id, executor, latency)`` sees every assignment (latency None
    for a miss). A ``resumable`` leveldb replay checkpoints (see ``replay_as_recorded``):
    ``resume`` goes on with the store ``store_dir/what-if-<policy>`` from its last committed
    block. ``allow_partial``: replay a trace without its closing record up to its last whole
    line (the result says ``partial`` and where the trace ends, ``trace_end``).
    """
    check_policies([policy])
    started = time.perf_counter()
    bad = BadLines(max_listed=max_listed)
    if estimator is None:
        _, estimator = estimate_trace(
            trace_path,
            method=method,
            window_blocks=window_blocks,
            prior=prior,
            skip_bad=skip_bad,
            bad_lines=BadLines(max_listed=max_listed),
            allow_partial=allow_partial,
        )
    cursor = TraceCursor()
    prologue, records = open_trace(
        trace_path, skip_bad=skip_bad, bad_lines=bad, cursor=cursor, allow_partial=allow_partial
    )
    header = prologue.header
    prologue = get_policy_prologue(prologue, policy)
    fingerprint = None
    if store == "leveldb" and (resumable or resume):
        fingerprint = compute_replay_fingerprint(
            trace_path,
            mode="what-if",
            policy=policy,
            seed=seed,
            estimator=estimator.get_settings(),
            governance=[[h, params_to_dict(p)] for h, p in governance or ()],
            skip_bad=skip_bad,
            max_listed=max_listed,
        )
    name = f"what-if-{policy}"
    (lane,) = open_lanes(
        prologue,
        [policy],
        shadow=False,
        store=store,
        store_dir=store_dir,
        names=[name],
        resume=resume,
    )
    chain = lane.chain
    try:
        state = None
        if resume and fingerprint is not None:
            state = read_lane_checkpoint(
                lane, fingerprint, prologue, shadow=False, where=f"store {name}"
            )
        schedule, tracker = start_schedule(prologue, governance, max_listed)
        with make_progress(header, progress, f"what-if {policy}") as bar:
            run = _WhatIfRun(
                chain,
                policy,
                estimator,
                schedule,
                tracker,
                seed=seed,
                first_height=header.first_height,
                last_height=header.last_height,
                progress=bar,
                max_listed=max_listed,
                on_request=on_request,
                fingerprint=fingerprint,
                cursor=cursor,
                bad_lines=bad,
            )
            if state is None:
                excluded, _, _ = get_table_exclusions(chain)
                run.account_exclusions(header.first_height, excluded, get_table_factors(chain))
            drive_records(
                run,
                trace_path,
                prologue,
                records,
                state,
                resume_height=0 if state is None else state["height"],
                skip_bad=skip_bad,
                allow_partial=allow_partial,
                bar=bar,
            )
        bad = run.get_bad_lines()
        schedule = run.schedule
        app_hash = format_app_hash(chain.app_hash)
    finally:
        close_lanes([lane])
    counts = run.counts
    blocks = max(run.blocks, 1)
    recorded_samples = run.recorded["misses"] + run.recorded["successes"]
    return {
        "mode": "what-if",
        "trace": os.fspath(trace_path),
        "scenario": header.get_scenario_name() or os.path.basename(os.fspath(trace_path)),
        "policy": policy,
        "seed": seed,
        "chain_id": header.chain_id,
        "first_height": header.first_height,
        "last_height": header.last_height,
        "partial": header.cut is not None,
        "trace_end": None if header.cut is None else header.cut.to_dict(),
        "blocks": run.blocks,
        "inferences": counts["inferences"],
        "misses": counts["misses"],
        "successes": counts["successes"],
        "miss_rate": counts["misses"] / counts["inferences"] if counts["inferences"] else 0.0,
        "unserved": run.unserved.to_dict(),
        "fallback_selections": counts["fallback_selections"],
        "panic_selections": counts["panic_selections"],
        "fallback_blocks": run.fallback_blocks,
        "false_exclusion_weight_share": run.false_exclusion_sum / blocks,
        "withheld_weight_share": run.withheld_sum / blocks,
        "excluded_weight_share": run.excluded_share_sum / blocks,
        "oracle_efficiency": None,
        "app_hash": app_hash,
        "recorded": {
            "inferences": run.recorded["inferences"],
            "misses": run.recorded["misses"],
            "successes": run.recorded["successes"],
            "miss_rate": run.recorded["misses"] / recorded_samples if recorded_samples else 0.0,
            "policy": header.policy,
        },
        "per_participant": {a: dict(c) for a, c in sorted(run.by_participant.items())},
        "exclusions": run.intervals.to_dict(),
        "transitions": dict(sorted(run.transitions.items())),
        "events": {
            "expired": counts["expired_events"],
            "finished": counts["finished_events"],
        },
        "tx_failures": run.tx_failures.to_dict(),
        "late_scheduled": schedule.late.to_dict(),
        "bad_lines": bad.to_dict(),
        "estimator": estimator.to_dict(),
        "calibration": compute_calibration_note(
            estimator.get_settings(), policy, header.scenario, estimator.declines
        ),
        "stats": {
            "max_pending": run.max_pending,
            "elapsed_seconds": round(time.perf_counter() - started, 3),
        },
    }
