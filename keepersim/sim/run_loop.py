"""Run a scenario on a fresh chain, block by block, and record what it gives.

:func:`run_scenario` opens a fresh chain (LevelDB in a temporary folder by default, or memory),
writes a genesis from the scenario (:mod:`keepersim.sim.run_genesis`), and delivers blocks
``1..scenario.blocks``, one :meth:`~keepersim.sim.stepper.ScenarioStepper.step` each (the
stepper holds the rules); it records the metrics, the in-flight inferences, the trace and,
with a store folder, a checkpoint per block (:mod:`keepersim.sim.run_checkpoint`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from keepersim.chain import STORE_KINDS, Chain, Selection, StoreKind
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.selection import SelectionTable, compute_weight_factors, get_kept_out
from keepersim.outputs import make_run_folder
from keepersim.run_chain import open_run_chain
from keepersim.sim.devshard_path import DevshardPath
from keepersim.sim.governance import check_governance_schedule
from keepersim.sim.metrics import (
    DECLINED,
    DEFAULT_BUCKET_BLOCKS,
    EXPIRED,
    FINISHED,
    MetricsCollector,
)
from keepersim.sim.oracle import HEALTHY_MISS_THRESHOLD, get_policy_override
from keepersim.sim.run_checkpoint import (
    InFlight,
    RunCheckpoint,
    compute_run_fingerprint,
    get_trace_pending,
    read_run_checkpoint,
)
from keepersim.sim.run_errors import SimulationError
from keepersim.sim.run_genesis import build_genesis, build_params, compute_selection_history
from keepersim.sim.run_result import RunResult
from keepersim.sim.scenario import Scenario
from keepersim.sim.stepper import ScenarioStepper
from keepersim.store.checkpoint import DictJournal, ResumeError
from keepersim.trace.writer import TraceWriter, get_epoch_declines
from keepersim.types.errors import InvalidParamsError, NoExecutorsError
from keepersim.types.events import (
    EpochSettled,
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    ParamsUpdated,
    ParticipantDeactivated,
)
from keepersim.types.messages import STARTED, Inference, ValidationWeight
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import DEVSHARD_LIMITER, get_unknown_policy_problem

__all__ = [
    "WRITE_EVERY",
    "compute_selection_view",
    "get_group_weights",
    "get_model_tables",
    "run_scenario",
]

# Commits between two write-backs of a run's state cache (keepersim.store.cache): the backend
# sees one batch instead of one per block. A resumable run (a store folder) writes back every
# block, each with its checkpoint.
WRITE_EVERY = 64


def get_model_tables(
    chain: Chain, models: Sequence[str]
) -> tuple[tuple[SelectionTable | str, ...], tuple[Mapping[str, int], ...]]:
    """Each model's selection table of the committed height and its candidate weights; the
    model's name (and no weights) where nobody is selectable."""
    tables: list[SelectionTable | str] = []
    weights: list[Mapping[str, int]] = []
    for model in models:
        try:
            table, candidate_weights = chain.get_table_weights(model)
        except NoExecutorsError:
            tables.append(model)
            weights.append({})
        else:
            tables.append(table)
            weights.append(candidate_weights)
    return tuple(tables), tuple(weights)


def compute_selection_view(
    models: Sequence[str],
    tables: Sequence[SelectionTable | str],
    weights: Sequence[Mapping[str, int]],
    model_members: Mapping[str, frozenset[str]],
    inactive: frozenset[str] = frozenset(),
) -> tuple[frozenset[str], dict[str, float]]:
    """What the metrics read of a block's selection (:func:`get_model_tables`): who is kept
    out (``inactive``, every member of a model nobody is selectable for, and each table's
    kept-out), and the admitted participants drawn at less than their candidate weight, each
    with the fraction it gives (the smallest over its models; see
    :func:`~keepersim.keeper.selection.compute_weight_factors`)."""
    kept: set[str] = set(inactive)
    factors: dict[str, float] = {}
    for model, entry, candidate_weights in zip(models, tables, weights, strict=True):
        if isinstance(entry, str):
            kept.update(model_members[model])
            continue
        kept.update(get_kept_out(entry))
        for address, f in compute_weight_factors(entry, candidate_weights).items():
            if f < factors.get(address, 1.0):
                factors[address] = f
    return frozenset(kept), {a: f for a, f in factors.items() if a not in kept}


def run_scenario(
    scenario: Scenario,
    policy: str,
    *,
    seed: int | None = None,
    store: StoreKind = "leveldb",
    store_dir: str | os.PathLike[str] | None = None,
    params: ModuleParams | None = None,
    governance: Sequence[tuple[int, ModuleParams]] = (),
    trace_out: str | os.PathLike[str] | None = None,
    progress: bool = False,
    shadow: bool = False,
    bucket_blocks: int = DEFAULT_BUCKET_BLOCKS,
    on_block: Callable[[Chain, int], None] | None = None,
    resume: bool = False,
    reputation_weighting: bool = False,
) -> RunResult:
    """Run ``scenario`` under ``policy``; see the module docstring for the exact semantics.

    With ``store_dir`` the run is resumable: every block's commit carries a checkpoint of the
    run's state (:mod:`keepersim.store.checkpoint`). ``resume`` accepts a ``store_dir`` that
    already holds this run (same inputs; else :class:`ResumeError`) and goes on from its last
    committed block: the app hash, the metrics and the trace (cut back to that block and
    continued) end as an uninterrupted run's. An empty or missing ``store_dir`` starts afresh.

    ``seed`` overrides ``scenario.seed``. ``store_dir`` (LevelDB only) keeps the chain in that
    folder (it must not hold a chain yet); by default a temporary folder is used and removed.
    ``governance``: ``(height, params)`` pairs, each sent as ``MsgUpdateParams`` from the
    governance authority in block ``height`` (effective from ``height + 1``); every entry is
    validated before the run starts (:class:`GovernanceError`). ``on_block(chain, height)`` is
    called after each block (tests, live inspection). ``reputation_weighting``: see
    :func:`build_params`; the result's ``selection`` names the rule (and any governance change).
    """
    unknown = get_unknown_policy_problem([policy])
    if unknown:
        raise SimulationError(unknown)
    if store not in STORE_KINDS:
        raise SimulationError(f"unknown store {store!r}; one of {', '.join(STORE_KINDS)}")
    if store == "memory" and store_dir is not None:
        raise SimulationError("store_dir is for the leveldb store only")
    run_seed = scenario.seed if seed is None else seed
    try:
        initial = build_params(
            scenario,
            policy,
            params=params,
            shadow=shadow,
            reputation_weighting=reputation_weighting,
        )
    except InvalidParamsError as exc:
        raise SimulationError(f"run params: {exc}") from exc
    schedule = check_governance_schedule(governance, scenario.blocks)
    devshard = None
    if scenario.devshard is not None:
        devshard = DevshardPath(scenario.devshard, run_seed, limiter=policy == DEVSHARD_LIMITER)
    genesis = build_genesis(scenario, initial)
    override = get_policy_override(policy, scenario)

    tmp: str | None = None
    if store == "leveldb":
        if store_dir is None:
            tmp = os.fspath(make_run_folder())
            folder = Path(tmp) / "chain"
        else:
            folder = Path(store_dir)
    if resume and store_dir is None:
        raise SimulationError("resume needs a store_dir (--store-dir) with the run to go on with")
    fingerprint = (
        None
        if store_dir is None
        else compute_run_fingerprint(
            scenario, policy, run_seed, initial, schedule, bucket_blocks, trace_out
        )
    )
    trace: TraceWriter | None = None
    started = time.perf_counter()
    try:
        chain = open_run_chain(
            store,
            folder if store == "leveldb" else None,
            genesis=genesis,
            error=SimulationError,
            needs="--resume goes on with the run in it",
            policy_override=override,
            resume=resume,
            write_every=WRITE_EVERY if fingerprint is None else 1,
        )
        with chain:
            state = None
            if fingerprint is not None:
                state = read_run_checkpoint(chain, fingerprint, genesis, override, folder)
            if trace_out is not None and state is not None:
                pending = get_trace_pending(chain)
                try:
                    trace = TraceWriter.reopen(trace_out, state["trace"], pending)
                except (OSError, ValueError) as exc:
                    raise ResumeError(f"--trace-out: cannot resume {trace_out}: {exc}") from exc
            elif trace_out is not None:
                trace = TraceWriter(
                    trace_out,
                    chain_id=chain.chain_id,
                    first_height=1,
                    last_height=scenario.blocks,
                    scenario=scenario.name,
                    seed=run_seed,
                    policy=policy,
                )
                if fingerprint is not None:
                    trace.track_pending()
            collector = _Run(
                scenario,
                chain,
                run_seed,
                initial,
                schedule,
                trace,
                bucket_blocks,
                on_block,
                fingerprint,
                devshard,
            ).run(progress, state)
            app_hash = chain.app_hash.hex()
            chain_id = chain.chain_id
    except BaseException:
        if trace is not None:
            trace.abort()
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - started
    metrics = collector.compute()
    if devshard is not None:
        metrics.update(devshard.get_metrics())
    return RunResult(
        scenario=scenario.name,
        policy=policy,
        seed=run_seed,
        blocks=scenario.blocks,
        store=store,
        shadow=shadow,
        chain_id=chain_id,
        selection=compute_selection_history(initial, schedule),
        app_hash=app_hash,
        metrics=metrics,
        wall_seconds=wall,
        governance_heights=[h for h, _ in schedule],
        trace_path=None if trace_out is None else os.fspath(trace_out),
    )


class _Run(RunCheckpoint):
    """One :func:`run_scenario`: a :class:`ScenarioStepper` plus what the run records (metrics,
    in-flight inferences, the trace, the progress bar)."""

    def __init__(
        self,
        scenario: Scenario,
        chain: Chain,
        seed: int,
        params: ModuleParams,
        schedule: list[tuple[int, ModuleParams]],
        trace: TraceWriter | None,
        bucket_blocks: int,
        on_block: Callable[[Chain, int], None] | None,
        fingerprint: bytes | None = None,
        devshard: DevshardPath | None = None,
    ) -> None:
        self.s = scenario
        self.devshard = devshard
        self.chain = chain
        self.params = params
        self.trace = trace
        self.on_block = on_block
        self.fingerprint = fingerprint
        # A resumable run's bookkeeping of what changed since the last checkpoint.
        self.journal = None if fingerprint is None else DictJournal()
        self.flight_delta: dict[str, InFlight | None] = {}
        self.touched_addresses: set[str] = set()  # their per-address counts changed
        self.metrics = MetricsCollector(
            scenario,
            bucket_blocks=bucket_blocks,
            expiration_blocks=max(
                [
                    params.params.validation_params.expiration_blocks,
                    *(p.params.validation_params.expiration_blocks for _, p in schedule),
                ]
            ),
        )
        self.stepper = ScenarioStepper(
            scenario,
            chain,
            seed=seed,
            governance=schedule,
            deliver=None if fingerprint is None else self.deliver_with_checkpoint,
            on_selection=self.record_selection,
            on_start=self.record_start,
            devshard=devshard,
        )
        self.models = self.stepper.models
        self.model_members = {
            m: frozenset(p.address for p in scenario.participants if m in p.models)
            for m in self.models
        }
        self.in_flight: dict[str, InFlight] = {}
        self.inactive: set[str] = set()
        #: Participants a recorded exclusion (the scenario's ``events``) keeps out this epoch: the
        #: chain's decision in every run, ``none`` included, so the metrics charge no policy.
        self.recorded_out: set[str] = set()
        self._last_tables: tuple[SelectionTable | str, ...] = ()
        self._last_inactive: frozenset[str] = frozenset()
        self._kept: frozenset[str] = frozenset()
        self._factors: dict[str, float] = {}

    def record_selection(self, height: int, sel: Selection, p_miss: float) -> None:
        if self.journal is not None:
            self.touched_addresses.add(sel.address)
        self.metrics.record_selection(
            sel.address,
            fallback=sel.fallback,
            panic=sel.panic,
            degraded=p_miss > HEALTHY_MISS_THRESHOLD,
        )

    def record_start(self, height: int, inference_id: str, address: str) -> None:
        flight = self.in_flight[inference_id] = InFlight(height, address)
        if self.journal is not None:
            self.flight_delta[inference_id] = flight
        if self.trace is not None:
            self.trace.add_started(height)

    # per block -----------------------------------------------------------------------------

    def get_selection_view(self) -> tuple[frozenset[str], Mapping[str, float]]:
        """What the selection of the next block gives (:func:`compute_selection_view`), with the
        participants SPRT deactivated this epoch kept out too; recomputed only when a table or
        the deactivated set moved."""
        tables, weights = get_model_tables(self.chain, self.models)
        inactive = frozenset(self.inactive)
        if (
            len(tables) == len(self._last_tables)
            and all(a is b for a, b in zip(tables, self._last_tables, strict=True))
            and inactive == self._last_inactive
        ):
            return self._kept, self._factors
        self._kept, self._factors = compute_selection_view(
            self.models, tables, weights, self.model_members, inactive
        )
        self._last_tables = tables
        self._last_inactive = inactive
        return self._kept, self._factors

    def process_block(
        self, height: int, events: Sequence[object], gas_by_step: Mapping[str, int]
    ) -> None:
        """After block ``height`` committed: its events and gas, the trace, the caller's hook."""
        self.metrics.record_gas(gas_by_step)
        self.recorded_out.update(a for a, _ in self.stepper.events.get(height, ()))
        self.process_events(height, events)
        if self.trace is not None:
            self.trace.flush(height)
        if self.on_block is not None:
            self.on_block(self.chain, height)

    def run(self, progress: bool, resume: dict[str, Any] | None = None) -> MetricsCollector:
        from keepersim.progress import make_progress

        s, chain, metrics, trace = self.s, self.chain, self.metrics, self.trace
        if resume is not None:
            self.process_checkpoint(resume)
        elif trace is not None:
            trace.add_params(0, self.params)
            with chain.read() as k:
                trace.add_participants(
                    0,
                    0,
                    list(k.iterate_participants()),
                    list(k.iterate_participant_nodes()),
                    get_group_weights(k, 0),
                )
            trace.flush(0)
        bar = make_progress(
            s.blocks,
            enabled=progress,
            unit="blocks",
            desc=f"{s.name}/{chain.get_policy_name()}",
            mininterval=0.5,
            leave=False,
        )
        if chain.height:  # a resumed run: the blocks already committed
            bar.update(chain.height)
        pending_bar = 0
        stepper = self.stepper
        try:
            while not stepper.is_done():
                h = chain.height + 1
                kept_out, factors = self.get_selection_view()
                if self.recorded_out:
                    kept_out = kept_out - self.recorded_out
                metrics.record_block(h, kept_out, factors)
                result = stepper.step()
                self.process_block(h, result.events, result.gas_by_step)
                pending_bar += 1
                if pending_bar >= 100:
                    bar.update(pending_bar)
                    pending_bar = 0
            bar.update(pending_bar)
        finally:
            bar.close()
        metrics.requests = stepper.requests
        metrics.unassigned_requests = stepper.unassigned
        metrics.unserved_requests = stepper.unserved
        metrics.planned_misses = stepper.planned_misses
        metrics.record_pending(f.start for f in self.in_flight.values())
        if trace is not None:
            with chain.read() as k:
                left: list[Inference] = []
                for rid in sorted(self.in_flight, key=lambda r: (self.in_flight[r].start, r)):
                    inference = k.get_inference(rid)
                    if inference is not None and inference.status == STARTED:
                        left.append(inference)
            trace.close(left)
        return metrics

    def process_events(self, height: int, events: Sequence[object]) -> None:
        metrics, trace = self.metrics, self.trace
        resolved: list[str] = []
        for e in events:
            kind: str | None = None
            if isinstance(e, InferenceFinished):
                rid, kind = e.inference_id, FINISHED
            elif isinstance(e, InferenceExpired):
                rid, kind = e.inference_id, EXPIRED
            elif isinstance(e, InferenceDeclined):
                rid, kind = e.inference_id, DECLINED
            elif isinstance(e, HealthTransition):
                metrics.transitions += 1
            elif isinstance(e, ParticipantDeactivated):
                self.inactive.add(e.address)
            elif isinstance(e, EpochSettled):
                self.inactive.clear()
                self.recorded_out.clear()
                if trace is not None:
                    with self.chain.read() as k:
                        summaries = k.get_summaries_for_epoch(e.settled_epoch)
                        trace.add_epoch_summary(
                            e.settled_epoch,
                            height,
                            summaries,
                            get_epoch_declines(k, e.settled_epoch, summaries),
                        )
                        trace.add_participants(
                            e.new_epoch,
                            height,
                            list(k.iterate_participants()),
                            list(k.iterate_participant_nodes()),
                            get_group_weights(k, e.new_epoch),
                        )
            elif isinstance(e, ParamsUpdated) and trace is not None:
                with self.chain.read() as k:
                    chain_pending = k.get_pending_params()
                    extension_pending = k.get_pending_extension_params()
                    pending = ModuleParams(
                        params=chain_pending or k.get_params(),
                        extension_params=extension_pending or k.get_extension_params(),
                    )
                changed = chain_pending is not None or extension_pending is not None
                if changed and height + 1 <= self.s.blocks:
                    trace.add_params(height + 1, pending)
            if kind is not None:
                flight = self.in_flight.pop(rid)
                if self.journal is not None:
                    self.touched_addresses.add(flight.address)
                    if self.flight_delta.pop(rid, None) is None:
                        self.flight_delta[rid] = None  # stored by an earlier checkpoint
                metrics.record_outcome(flight.address, flight.start, kind)
                resolved.append(rid)
        if trace is not None and resolved:
            with self.chain.read() as k:
                for rid in resolved:
                    inference = k.get_inference(rid)
                    if inference is None:  # pragma: no cover - the chain just wrote it
                        raise SimulationError(f"resolved inference {rid!r} is not in the store")
                    trace.add_resolved(inference)


# --------------------------------------------------------------------------------------------
# Governance schedules
# --------------------------------------------------------------------------------------------


def get_group_weights(keeper: Keeper, epoch_index: int) -> list[ValidationWeight]:
    """The epoch's group members (weight, reputation, ML nodes) for the trace."""
    group = keeper.get_epoch_group(epoch_index, "")
    return [] if group is None else list(group.validation_weights)
