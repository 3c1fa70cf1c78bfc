"""Drive a chain through a scenario: arrivals, selection, outcomes, block by block.

:func:`run_scenario` opens a fresh chain (LevelDB in a temporary folder by default, or memory),
writes a genesis from the scenario, and delivers blocks ``1..scenario.blocks``, one
:meth:`ScenarioStepper.step` each (the stepper holds the rules below; the server's scenario runner
steps a chain through it too). Exactly:

ModuleParams
    Unless ``params`` is given: the chain's code defaults (:func:`get_default_params`: upstream
    ``DefaultParams()`` and keepersim's extension defaults) with
    ``validation_params.expiration_blocks`` and ``epoch_params.epoch_length`` from the scenario
    and the shortest PoC the chain accepts (stage 1, validation 1, the rest 0 blocks; every
    participant keeps serving during PoC, so it changes no selection).
    ``extension_params.health_params.policy`` is the run's policy (an ``oracle`` run's params name
    ``none``; its chain runs the oracle as a harness hook). SPRT: for every policy except
    ``sprt``, ``extension_params.sprt_enabled`` is False, as on mainnet (where the downtime
    thresholds make it "effectively disabled"), so that a policy is measured alone; for ``sprt``
    the chain's code defaults stay (``downtime_good_percentage`` 0.1, ``downtime_bad_percentage``
    0.2, ``downtime_h_threshold`` 4) and SPRT deactivation is the whole policy. Selection is by
    weight alone, as upstream; ``reputation_weighting`` selects by weight x reputation instead
    (the fork's PR #8; reputation is recomputed at every epoch's end). A given ``params`` is used
    as is, except for the policy (and ``shadow``, and ``reputation_weighting`` when true).
    :func:`compute_run_mechanisms` states these rules.

Genesis
    Every scenario participant with its weight (the chain's ``participant_list``), and its models
    (default ``["default"]``) and one ML node with ``timeslot_allocation [True, True]`` as its
    registered nodes (``keepersim.participant_nodes``); chain id ``keepersim-<scenario name>``.

Requests
    The number of requests arriving at height ``h`` is Poisson(``arrivals_per_block``, times
    the ``arrival_shape`` factor of ``h`` when the scenario has one), drawn
    for all heights at once from ``numpy.random.default_rng(seed)``: nothing else uses that
    generator, so every policy sees the same request stream. Request ``n`` (numbered from 0 in
    arrival order) has inference id ``req-<n, 8 digits>``; its model is the only model of the
    fleet, or (several models) one drawn uniformly, keyed by ``(seed, n)``.

Assignment (block ``h``)
    A request arriving at ``h`` is assigned by ``chain.get_random_executor(model, id)`` *before*
    block ``h`` is delivered: it reads the state committed at ``h - 1``, so an outcome applied in
    block ``h - 1`` (a finish, or an expiry in end block ``h - 1``) is visible to it, one applied
    in block ``h`` is not. Its ``MsgStartInference`` is in block ``h`` (start height ``h``).

Outcome of request ``n`` on executor ``a`` at ``h``
    ``d = blake2b("<seed>/<n>/<a>", 16 bytes)``; ``u = d[0:8] / 2**64``; latency
    ``L = latency_min + d[8:16] mod (latency_max - latency_min + 1)``. The same (request,
    executor) pair gets the same outcome under every policy. Capacity first: "in flight" are the
    requests ``a`` accepted at heights ``s`` with ``s + L_s > h`` (missed ones included); with
    ``capacity`` of them in flight the request is over capacity and occupies no slot, otherwise
    it takes a slot until ``h + L``. Then:

    * over capacity, scenario without ``pushback``: a miss;
    * over capacity with ``pushback``: the executor declines: ``MsgDeclineInference`` in block
      ``h + 1`` (its answer), and the requester re-selects before block ``h + 1`` (reading the
      state committed at ``h``) with id ``<id>/r1`` (then ``/r2`` ...), at most
      ``max_reselects`` times; each re-selection is a new assignment (a new on-chain inference,
      a new outcome draw keyed by the same ``n`` and the new executor). A request whose last
      attempt is declined is counted in ``unserved_requests``;
    * ``u < p_a(h)``: a miss;
    * ``L > expiration_blocks`` (in force at ``h``): a miss (the finish would come too late);
    * otherwise ``MsgFinishInference`` (executed by ``a``) in block ``h + L``.

    A miss produces no message: the chain expires the inference in end block
    ``h + expiration_blocks`` (the metrics count misses from those expiry events).

Block ``h`` holds, in order: the governance ``MsgUpdateParams`` scheduled at ``h`` (effective
from ``h + 1``), the finishes due at ``h``, the declines due at ``h``, then the starts (re-selected
requests first, then the new arrivals). Blocks are delivered with ``strict=True``: a message the
chain rejects is a driver bug and fails the run.

End of run
    After block ``scenario.blocks`` the run stops; inferences still in flight are not counted in
    ``inferences`` or ``misses`` (they are reported as ``in_flight_at_end``).
    Declined assignments (pushback) are counted in ``declines``, not in ``inferences``.

If no executor can be selected at all (``NoExecutorsError``: every candidate kept out and the
policy allows no fallback), the request is dropped and counted in ``unassigned_requests``.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal as PyDecimal
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from keepersim.chain import (
    STORE_KINDS,
    BlockResult,
    Chain,
    Selection,
    StoreKind,
    StoreNotEmptyError,
    open_chain,
)
from keepersim.gateway.signals import OutcomeClass
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies import BUILTIN_POLICIES, PolicyFactory
from keepersim.keeper.selection import (
    SelectionTable,
    compute_weight_factors,
    get_kept_out,
    get_selection_rule,
)
from keepersim.limits import MAX_GOVERNANCE_ENTRIES
from keepersim.module.genesis import compute_genesis
from keepersim.outputs import make_run_folder
from keepersim.sim.devshard_checkpoint import (
    get_devshard_checkpoint,
    process_devshard_checkpoint,
)
from keepersim.sim.devshard_path import (
    DEVSHARD_LIMITER_POLICY,
    DevshardDispatch,
    DevshardPath,
)
from keepersim.sim.metrics import (
    DECLINED,
    DEFAULT_BUCKET_BLOCKS,
    EXPIRED,
    FINISHED,
    MetricsCollector,
)
from keepersim.sim.oracle import (
    HEALTHY_MISS_THRESHOLD,
    ORACLE_POLICY_NAME,
    get_chain_policy_name,
    get_policy_override,
)
from keepersim.sim.scenario import Scenario, format_scenario_json, get_json_type
from keepersim.sim.scenario_extras import compute_arrival_factors, compute_params_patch
from keepersim.store.checkpoint import (
    DictJournal,
    ResumeError,
    compute_fingerprint,
    decode_state,
    encode_checkpoint,
    encode_state,
    process_kill_point,
    read_checkpoint,
)
from keepersim.store.committed import RUN_META_PREFIX
from keepersim.trace.format import DECLINE_REASON
from keepersim.trace.writer import TraceWriter, get_epoch_declines
from keepersim.types.chain_params import compute_chain_decimal
from keepersim.types.chain_params_json import compute_module_params_json, parse_module_params_json
from keepersim.types.errors import (
    ChainJsonError,
    InvalidParamsError,
    KeepersimError,
    NoExecutorsError,
)
from keepersim.types.events import (
    EpochSettled,
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    ParamsUpdated,
    ParticipantDeactivated,
)
from keepersim.types.messages import (
    STARTED,
    Inference,
    MLNodeInfo,
    Participant,
    ValidationWeight,
)
from keepersim.types.params import (
    GOV_AUTHORITY,
    get_decimal_value,
    get_default_params,
    params_from_dict,
    params_to_dict,
    validate_params,
)
from keepersim.types.pb.inference.inference.tx_pb2 import (
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgExcludeParticipant,
    MsgUpdateExtensionParams,
)

__all__ = [
    "REQUESTER",
    "GOVERNANCE_HELP",
    "GovernanceError",
    "RunResult",
    "ScenarioStepper",
    "STORE_KINDS",
    "SimulationError",
    "StoreKind",
    "build_genesis",
    "build_params",
    "build_scenario_params",
    "compute_params_with_changes",
    "compute_run_mechanisms",
    "draw_outcome",
    "get_known_policies",
    "get_request_id",
    "parse_governance",
    "run_scenario",
]

#: The account that sends every MsgStartInference (the simulated transfer agent).
REQUESTER = "keepersim-requester"


class SimulationError(KeepersimError):
    """The run cannot start (bad policy, store folder in use) or failed."""


class GovernanceError(SimulationError):
    """A scheduled params change is invalid (names the entry and the rule it breaks)."""


# Commits between two write-backs of a run's state cache (keepersim.store.cache): the backend
# sees one batch instead of one per block. A resumable run (a store folder) writes back every
# block, each with its checkpoint.
WRITE_EVERY = 64


def get_known_policies() -> list[str]:
    """Policies a run can use: every registered built-in plus the ``oracle`` baseline and
    ``devshard-limiter`` (the gateway's limiter on the devshard path; its chain runs ``none``,
    :mod:`keepersim.sim.devshard_path`)."""
    return sorted({*BUILTIN_POLICIES, ORACLE_POLICY_NAME, DEVSHARD_LIMITER_POLICY})


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


def get_request_id(request_index: int, attempt: int = 0) -> str:
    """Inference id of request ``n``'s ``attempt``-th assignment (0 = the first)."""
    base = f"req-{request_index:08d}"
    return base if attempt == 0 else f"{base}/r{attempt}"


def draw_outcome(
    seed: int, request_index: int, address: str, lat_min: int, lat_max: int
) -> tuple[float, int]:
    """``(u, latency)`` of request ``n`` on ``address``: uniform u in [0, 1) and a latency drawn
    uniformly from ``[lat_min, lat_max]``, both keyed by ``(seed, n, address)``."""
    digest = hashlib.blake2b(f"{seed}/{request_index}/{address}".encode(), digest_size=16).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    latency = lat_min + int.from_bytes(digest[8:], "big") % (lat_max - lat_min + 1)
    return u, latency


def _pick_model(
    seed: int,
    request_index: int,
    models: Sequence[str],
    traffic: Sequence[tuple[str, float]] = (),
) -> str:
    """Request ``n``'s model: uniform among ``models``, or by the shares of ``traffic``
    (a scenario's ``model_traffic``), keyed by ``(seed, n)``."""
    if not traffic and len(models) == 1:
        return models[0]
    digest = hashlib.blake2b(f"{seed}/{request_index}/model".encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    if not traffic:
        return models[value % len(models)]
    total = sum(share for _, share in traffic)
    point = value / 2**64 * total
    acc = 0.0
    chosen = traffic[-1][0]
    for model, share in traffic:
        acc += share
        if share > 0 and point < acc:
            chosen = model
            break
    else:
        chosen = next(m for m, s in reversed(traffic) if s > 0)
    return chosen


def build_scenario_params(scenario: Scenario, policy: str) -> ModuleParams:
    """The run's default params before the policy: the chain's code defaults with the
    scenario's expiry, epoch length and shortest PoC (the module docstring), then the scenario's
    own ``params`` patch, if any."""
    out = get_default_params()
    out.params.validation_params.expiration_blocks = scenario.expiration_blocks
    epoch = out.params.epoch_params
    epoch.epoch_length = scenario.epoch_length
    epoch.poc_stage_duration = 1
    epoch.poc_exchange_duration = 0
    epoch.poc_validation_delay = 0
    epoch.poc_validation_duration = 1
    epoch.set_new_validators_delay = 0
    out.extension_params.sprt_enabled = policy == "sprt"
    if scenario.params is not None:
        out = params_from_dict(compute_params_patch(params_to_dict(out), scenario.params))
    return out


def build_params(
    scenario: Scenario,
    policy: str,
    *,
    params: ModuleParams | None = None,
    shadow: bool = False,
    reputation_weighting: bool = False,
) -> ModuleParams:
    """The params a run starts with (see the module docstring); validated."""
    out = ModuleParams()
    if params is None:
        out.CopyFrom(build_scenario_params(scenario, policy))
    else:
        out.CopyFrom(params)
    health = out.extension_params.health_params
    health.policy = get_chain_policy_name(policy)
    if shadow:
        health.shadow = True
    if reputation_weighting:
        out.extension_params.reputation_weighting = True
    validate_params(out)
    return out


def compute_run_mechanisms(
    scenario: Scenario, *, reputation_weighting: bool = False
) -> dict[str, str]:
    """What every run of ``scenario`` has besides its health policy, read from
    :func:`build_params`: ``selection`` (the rule, see :func:`get_selection_rule`) and ``sprt``
    (the policies whose runs deactivate by SPRT, with its params)."""
    built = {
        policy: build_params(scenario, policy, reputation_weighting=reputation_weighting)
        for policy in get_known_policies()
    }
    sprt_on = [policy for policy, p in built.items() if p.extension_params.sprt_enabled]
    sprt = "off"
    if sprt_on:
        v = built[sprt_on[0]].params.validation_params
        values = ", ".join(
            f"{name} {get_decimal_value(getattr(v, name)).normalize():f}"
            for name in (
                "downtime_good_percentage",
                "downtime_bad_percentage",
                "downtime_h_threshold",
            )
        )
        sprt = f"off except in {', '.join(sprt_on)} runs ({values})"
    return {"selection": get_selection_rule(built["none"].extension_params), "sprt": sprt}


def compute_selection_history(
    initial: ModuleParams, schedule: Sequence[tuple[int, ModuleParams]]
) -> str:
    """The run's selection rule, and each change a governance update makes to it (effective from
    the block after the update's)."""
    current = get_selection_rule(initial.extension_params)
    out = current
    for height, params in schedule:
        rule = get_selection_rule(params.extension_params)
        if rule != current:
            out += f"; from height {height + 1}: {rule}"
            current = rule
    return out


def build_genesis(scenario: Scenario, params: ModuleParams) -> Genesis:
    return compute_genesis(
        f"keepersim-{scenario.name}",
        params,
        (
            (
                Participant(address=spec.address, index=spec.address, weight=spec.weight),
                ParticipantNodes(
                    address=spec.address,
                    models=list(spec.models),
                    model_weights=dict(spec.model_weights),
                    ml_nodes=[MLNodeInfo(node_id="node-0", timeslot_allocation=[True, True])],
                ),
            )
            for spec in scenario.participants
        ),
    )


@dataclass
class RunResult:
    """One run's identity, final app hash and metrics (see :mod:`keepersim.sim.metrics`)."""

    scenario: str
    policy: str
    seed: int
    blocks: int
    store: str
    shadow: bool
    chain_id: str
    selection: str
    app_hash: str
    metrics: dict[str, Any]
    wall_seconds: float
    governance_heights: list[int] = field(default_factory=list)
    trace_path: str | None = None

    @property
    def inferences(self) -> int:
        return int(self.metrics["inferences"])

    @property
    def misses(self) -> int:
        return int(self.metrics["misses"])

    @property
    def miss_rate(self) -> float:
        return float(self.metrics["miss_rate"])

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-able record: identity, every metric, timing."""
        inferences = self.inferences
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "seed": self.seed,
            "blocks": self.blocks,
            "store": self.store,
            "shadow": self.shadow,
            "selection": self.selection,
            "chain_id": self.chain_id,
            "app_hash": self.app_hash,
            **self.metrics,
            "governance_heights": list(self.governance_heights),
            "trace_path": self.trace_path,
            "wall_seconds": self.wall_seconds,
            "inferences_per_second": inferences / self.wall_seconds if self.wall_seconds else 0.0,
            "blocks_per_second": self.blocks / self.wall_seconds if self.wall_seconds else 0.0,
        }


@dataclass(slots=True)
class _InFlight:
    start: int
    address: str


# Attributes of the stepper and the metrics fixed by the run's inputs (not checkpointed): every
# other attribute is state and goes into the checkpoint, so a counter added later is kept too.
_STEPPER_INPUTS = frozenset(
    {
        "scenario",
        "chain",
        "seed",
        "blocks",
        "deliver",
        "on_selection",
        "on_start",
        "counts",
        "specs",
        "models",
        "governance",
        "devshard",
    }
)
_METRICS_INPUTS = frozenset({"scenario", "bucket_blocks", "_specs", "_weights", "_total_weight"})
# Dicts of the stepper checkpointed incrementally (DictJournal), and the meta keys of a run.
_STEPPER_JOURNALED = ("finishes", "declines", "reselects")
_CK_STEPPER = RUN_META_PREFIX + b"stepper/"
_CK_INTERVALS = RUN_META_PREFIX + b"intervals/"
_CK_FLIGHT = RUN_META_PREFIX + b"flight/"
_CK_TRACE = RUN_META_PREFIX + b"trace/"
_CK_ADDRESS = RUN_META_PREFIX + b"address/"
# Per-address counters of the metrics, checkpointed for the addresses a block touched.
_METRICS_PER_ADDRESS = ("assigned", "resolved", "missed", "declined")


def _get_fields(obj: object, inputs: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in vars(obj).items() if k not in inputs}


def _set_fields(obj: object, fields: Mapping[str, Any]) -> None:
    for key, value in fields.items():
        setattr(obj, key, value)


def _check_governance(
    governance: Sequence[tuple[int, ModuleParams]], blocks: int
) -> list[tuple[int, ModuleParams]]:
    out: list[tuple[int, ModuleParams]] = []
    for i, (height, params) in enumerate(governance):
        where = f"governance[{i}] (height {height})"
        if isinstance(height, bool) or not isinstance(height, int) or not 1 <= height <= blocks:
            raise GovernanceError(f"{where}: height must be an integer in [1, {blocks}]")
        try:
            validate_params(params)
        except InvalidParamsError as exc:
            raise GovernanceError(f"{where}: {exc}") from exc
        out.append((height, params))
    out.sort(key=lambda item: item[0])  # stable: same-height entries keep their order
    return out


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
    if policy not in get_known_policies():
        raise SimulationError(
            f"unknown policy {policy!r}; known: {', '.join(get_known_policies())}"
        )
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
    schedule = _check_governance(governance, scenario.blocks)
    devshard = None
    if scenario.devshard is not None:
        devshard = DevshardPath(
            scenario.devshard, run_seed, limiter=policy == DEVSHARD_LIMITER_POLICY
        )
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
        else _compute_run_fingerprint(
            scenario, policy, run_seed, initial, schedule, bucket_blocks, trace_out
        )
    )
    trace: TraceWriter | None = None
    started = time.perf_counter()
    try:
        try:
            chain = open_chain(
                store,
                folder if store == "leveldb" else None,
                genesis=genesis,
                policy_override=override,
                resume=resume,
                write_every=WRITE_EVERY if fingerprint is None else 1,
            )
        except StoreNotEmptyError as exc:
            raise SimulationError(f"{exc} (--resume goes on with the run in it)") from exc
        with chain:
            state = None
            if fingerprint is not None:
                state = _read_run_checkpoint(chain, fingerprint, genesis, override, folder)
            if trace_out is not None and state is not None:
                pending = [
                    (decode_state(k[len(_CK_TRACE) :]), v.decode())
                    for k, v in chain.iterate_meta(_CK_TRACE)
                ]
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


def _compute_run_fingerprint(
    scenario: Scenario,
    policy: str,
    seed: int,
    params: ModuleParams,
    schedule: Sequence[tuple[int, ModuleParams]],
    bucket_blocks: int,
    trace_out: str | os.PathLike[str] | None,
) -> bytes:
    """The inputs that decide a run's blocks, metrics and trace (``--resume`` checks them)."""
    return compute_fingerprint(
        {
            "command": "simulate",
            "scenario": format_scenario_json(scenario),
            "policy": policy,
            "seed": seed,
            "params": params_to_dict(params),
            "governance": [[h, params_to_dict(p)] for h, p in schedule],
            "bucket_blocks": bucket_blocks,
            "trace": trace_out is not None,
        }
    )


def _read_run_checkpoint(
    chain: Chain,
    fingerprint: bytes,
    genesis: Genesis,
    override: PolicyFactory | None,
    folder: Path,
) -> dict[str, Any] | None:
    """The checkpoint of the store's last block (None: the store holds the genesis only, which
    must be this run's)."""
    state: dict[str, Any] | None = read_checkpoint(chain.get_meta, fingerprint, f"store {folder}")
    if state is not None:
        return state
    with open_chain("memory", None, genesis=genesis, policy_override=override) as fresh:
        if chain.height != fresh.height or chain.app_hash != fresh.app_hash:
            raise ResumeError(
                f"store {folder} holds another chain (at height {chain.height}, without a "
                "checkpoint of this run): cannot resume it; use an empty --store-dir"
            )
    return None


SelectionHook = Callable[[int, Selection, float], None]
StartHook = Callable[[int, str, str], None]


class ScenarioStepper:
    """A scenario's block loop, one block per :meth:`step` (the rules of the module docstring).

    Arrivals, assignment, outcome draws, capacity and pushback, finishes, declines and governance
    messages live here and nowhere else: :func:`run_scenario` and the server's
    :class:`~keepersim.server.runner.ScenarioRunner` both step a chain through it.

    Each :meth:`step` builds block ``chain.height + 1`` from the state committed at
    ``chain.height``, delivers it with ``deliver(txs)`` (default ``chain.deliver_block(txs,
    strict=True)``) and returns the result; :meth:`is_done` once block ``blocks`` (default
    ``scenario.blocks``) is committed. ``seed`` overrides ``scenario.seed``; ``governance`` is a
    checked schedule (``(height, params)`` pairs sorted by height). The params of a block (its
    ``expiration_blocks``, the authority that signs governance) are those committed, or the
    pending ones when a ``MsgUpdateParams`` of the previous block takes effect with it.

    Callers record what they need through ``on_selection(height, selection, p_miss)`` (every
    assignment; ``p_miss`` is the executor's true miss probability at ``height``) and
    ``on_start(height, inference_id, executor)`` (every ``MsgStartInference``). Counts:
    ``requests`` (arrivals), ``unassigned`` (no executor), ``unserved`` (last attempt declined),
    ``planned_misses``.
    """

    def __init__(
        self,
        scenario: Scenario,
        chain: Chain,
        *,
        seed: int | None = None,
        blocks: int | None = None,
        governance: Sequence[tuple[int, ModuleParams]] = (),
        deliver: Callable[[list[Any]], BlockResult] | None = None,
        on_selection: SelectionHook | None = None,
        on_start: StartHook | None = None,
        devshard: DevshardPath | None = None,
    ) -> None:
        self.scenario = scenario
        self.devshard = devshard
        self.chain = chain
        self.seed = scenario.seed if seed is None else seed
        self.blocks = scenario.blocks if blocks is None else blocks
        self.deliver = deliver if deliver is not None else partial(chain.deliver_block, strict=True)
        self.on_selection = on_selection
        self.on_start = on_start
        rng = np.random.default_rng(self.seed)
        if scenario.arrival_shape:
            factors = compute_arrival_factors(scenario.arrival_shape, self.blocks)
            self.counts = rng.poisson(scenario.arrivals_per_block * np.asarray(factors))
        else:
            self.counts = rng.poisson(scenario.arrivals_per_block, size=self.blocks)
        self.specs = {p.address: p for p in scenario.participants}
        self.models = sorted({m for p in scenario.participants for m in p.models})
        self.governance: dict[int, list[ModuleParams]] = {}
        for height, p in governance:
            self.governance.setdefault(height, []).append(p)
        self.events: dict[int, list[tuple[str, str]]] = {}
        for event in scenario.events:
            self.events.setdefault(event.height, []).append((event.address, event.reason))
        self.finishes: dict[int, list[MsgFinishInference]] = {}
        self.declines: dict[int, list[MsgDeclineInference]] = {}
        self.reselects: dict[int, list[tuple[int, int, str]]] = {}
        self.slots: dict[str, list[int]] = {
            p.address: [] for p in scenario.participants if p.capacity is not None
        }
        self._expiration = 0
        self.next_request = 0
        self.requests = 0
        self.unassigned = 0
        self.unserved = 0
        self.planned_misses = 0

    def is_done(self) -> bool:
        return self.chain.height >= self.blocks

    def _read_params(self) -> tuple[int, str]:
        """(expiration_blocks in force in the next block, the governance authority)."""
        with self.chain.read() as k:
            params = k.get_pending_params()
            if params is None:
                params = k.get_params()
            return params.validation_params.expiration_blocks, GOV_AUTHORITY

    # one assignment ------------------------------------------------------------------------

    def assign(
        self, height: int, request: int, attempt: int, model: str, starts: list[MsgStartInference]
    ) -> None:
        rid = get_request_id(request, attempt)
        try:
            sel: Selection = self.chain.get_random_executor(model, rid)
        except NoExecutorsError:
            self.unassigned += 1
            return
        self.assign_to(height, request, attempt, model, starts, sel)

    def assign_to(
        self,
        height: int,
        request: int,
        attempt: int,
        model: str,
        starts: list[MsgStartInference],
        sel: Selection,
        deadline: int | None = None,
        retry: bool = True,
    ) -> tuple[OutcomeClass, int, bool]:
        """Assign request ``n``'s ``attempt`` to ``sel.address`` (the rules of the module
        docstring); its planned outcome, the height it resolves at, and whether a miss is one
        the host never answered (over capacity, or its miss draw). ``deadline``: the blocks an
        answer may take before it is a miss (default the chain's expiry; a devshard nonce's is
        its escrow's execution timeout: an answer after the chain's expiry but within it is
        recorded as a finish at the expiry). ``retry=False``: a decline is neither re-tried nor
        unserved (a devshard race attempt: the request's own attempt still runs)."""
        rid = sel.request_id
        address = sel.address
        spec = self.specs[address]
        p_miss = spec.get_miss_probability(height)
        if self.on_selection is not None:
            self.on_selection(height, sel, p_miss)
        u, latency = draw_outcome(self.seed, request, address, spec.latency_min, spec.latency_max)
        over = False
        planned: tuple[OutcomeClass, int, bool]
        if spec.capacity is not None:
            heap = self.slots[address]
            while heap and heap[0] <= height:
                heapq.heappop(heap)
            if len(heap) >= spec.capacity:
                over = True
            else:
                heapq.heappush(heap, height + latency)
        if over and self.scenario.pushback:
            self.declines.setdefault(height + 1, []).append(
                MsgDeclineInference(creator=address, inference_id=rid, reason=DECLINE_REASON)
            )
            if retry and attempt < self.scenario.max_reselects:
                self.reselects.setdefault(height + 1, []).append((request, attempt + 1, model))
            elif retry:
                self.unserved += 1
            planned = ("decline", height + 1, False)
        elif over or u < p_miss or latency > (deadline or self._expiration):
            self.planned_misses += 1
            planned = ("miss", height + (deadline or self._expiration), over or u < p_miss)
        else:
            planned = ("finish", height + latency, False)
            self.finishes.setdefault(height + min(latency, self._expiration), []).append(
                MsgFinishInference(
                    creator=address,
                    inference_id=rid,
                    executed_by=address,
                    model=model,
                    requested_by=REQUESTER,
                )
            )
        starts.append(
            MsgStartInference(
                creator=REQUESTER,
                inference_id=rid,
                model=model,
                requested_by=REQUESTER,
                assigned_to=address,
            )
        )
        if self.on_start is not None:
            self.on_start(height, rid, address)
        return planned

    def process_devshard(
        self, devshard: DevshardPath, height: int, starts: list[MsgStartInference]
    ) -> None:
        """Run the devshard path's pickers on the block's queued requests; each dispatch is an
        assignment to the slot's host (:mod:`keepersim.sim.devshard_path`)."""
        for event in devshard.process_block(height, self.chain):
            if not isinstance(event, DevshardDispatch):
                if event.attempt == 0:
                    self.unassigned += 1
                else:
                    self.unserved += 1
                continue
            rid = event.request_id
            sel = Selection(event.address, self.chain.height, event.model, rid, False, False)
            outcome, at, no_receipt = self.assign_to(
                height,
                event.request,
                event.attempt,
                event.model,
                starts,
                sel,
                event.execution_blocks,
                retry=event.race == 0,
            )
            devshard.process_result(
                height,
                event,
                outcome,
                at,
                no_receipt=no_receipt,
                retried=outcome == "decline" and event.attempt < self.scenario.max_reselects,
            )

    # one block -----------------------------------------------------------------------------

    def step(self) -> BlockResult:
        """Build and deliver the next block; its result."""
        h = self.chain.height + 1
        if h > self.blocks:
            raise SimulationError(f"the run ends at block {self.blocks}")
        self._expiration, authority = self._read_params()
        txs: list[Any] = []
        for p in self.governance.get(h, ()):
            txs.extend(compute_governance_txs(p, authority))
        txs.extend(
            MsgExcludeParticipant(authority=authority, address=address, reason=reason)
            for address, reason in self.events.get(h, ())
        )
        txs.extend(self.finishes.pop(h, ()))
        txs.extend(self.declines.pop(h, ()))
        starts: list[MsgStartInference] = []
        devshard = self.devshard
        for request, attempt, model in self.reselects.pop(h, ()):
            if devshard is not None and devshard.is_routed(request):
                devshard.process_submit(
                    h, request, attempt, model, get_request_id(request, attempt)
                )
            else:
                self.assign(h, request, attempt, model, starts)
        for _ in range(int(self.counts[h - 1])):
            n = self.next_request
            self.next_request += 1
            self.requests += 1
            model = _pick_model(self.seed, n, self.models, self.scenario.model_traffic)
            if devshard is not None and devshard.is_routed(n):
                devshard.process_submit(h, n, 0, model, get_request_id(n))
            else:
                self.assign(h, n, 0, model, starts)
        if devshard is not None:
            self.process_devshard(devshard, h, starts)
        txs.extend(starts)
        return self.deliver(txs)


class _Run:
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
        self.flight_delta: dict[str, _InFlight | None] = {}
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
        self.in_flight: dict[str, _InFlight] = {}
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
        flight = self.in_flight[inference_id] = _InFlight(height, address)
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

    # resuming ------------------------------------------------------------------------------

    def deliver_with_checkpoint(self, txs: list[Any]) -> BlockResult:
        """The stepper's delivery in a resumable run: the block commits with a checkpoint."""
        result = self.chain.deliver_block(txs, strict=True, meta=self.get_checkpoint)
        process_kill_point(result.height, "post")
        return result

    def get_checkpoint(self, result: BlockResult) -> dict[bytes, bytes | None]:
        """The run's state just before ``result``'s block commits (every assignment of the block
        made, none of its events seen yet), with the block's events to finish it on resume.

        The large parts go in incrementally (only what changed since the last block): the
        in-flight inferences, the stepper's pending messages, the kept-out intervals and the
        trace's pending lines; the rest is one small record."""
        assert self.fingerprint is not None and self.journal is not None
        journal = self.journal
        meta: dict[bytes, bytes | None] = {}
        for name in _STEPPER_JOURNALED:
            meta.update(journal.get_delta(_CK_STEPPER + name.encode(), getattr(self.stepper, name)))
        meta.update(journal.get_delta(_CK_INTERVALS, self.metrics._intervals))
        for rid, flight in self.flight_delta.items():
            meta[_CK_FLIGHT + rid.encode()] = (
                None if flight is None else f"{flight.start}/{flight.address}".encode()
            )
        self.flight_delta = {}
        trace = None
        if self.trace is not None:
            trace, pending = self.trace.get_state()
            for key, line in pending.items():
                meta[_CK_TRACE + encode_state(key)] = None if line is None else line.encode()
        counts = [getattr(self.metrics, name) for name in _METRICS_PER_ADDRESS]
        for address in self.touched_addresses:
            values = ",".join(str(c[address]) for c in counts)
            meta[_CK_ADDRESS + address.encode()] = values.encode()
        self.touched_addresses = set()
        metrics = _get_fields(
            self.metrics, _METRICS_INPUTS | {"_intervals", "_buckets", *_METRICS_PER_ADDRESS}
        )
        metrics["_buckets"] = [[getattr(b, f) for f in b.__slots__] for b in self.metrics._buckets]
        state = {
            "stepper": _get_fields(self.stepper, _STEPPER_INPUTS | set(_STEPPER_JOURNALED)),
            "metrics": metrics,
            "inactive": self.inactive,
            "recorded_out": self.recorded_out,
            "trace": trace,
            "events": result.events,
            "gas": dict(result.gas_by_step),
        }
        meta.update(encode_checkpoint(self.fingerprint, state))
        meta.update(get_devshard_checkpoint(self.devshard))
        process_kill_point(result.height, "pre")
        return meta

    def process_checkpoint(self, state: dict[str, Any]) -> None:
        """Take the state of :meth:`get_checkpoint` back and finish its block."""
        chain, journal = self.chain, self.journal
        assert journal is not None
        stepper = self.stepper
        _set_fields(stepper, state["stepper"])
        for name in _STEPPER_JOURNALED:
            prefix = _CK_STEPPER + name.encode()
            setattr(stepper, name, journal.load(prefix, chain.iterate_meta(prefix)))
        buckets = state["metrics"].pop("_buckets")
        _set_fields(self.metrics, state["metrics"])
        for bucket, values in zip(self.metrics._buckets, buckets, strict=True):
            for f, value in zip(bucket.__slots__, values, strict=True):
                setattr(bucket, f, value)
        self.metrics._intervals = journal.load(_CK_INTERVALS, chain.iterate_meta(_CK_INTERVALS))
        counts = [getattr(self.metrics, name) for name in _METRICS_PER_ADDRESS]
        for key, value in chain.iterate_meta(_CK_ADDRESS):
            address = key[len(_CK_ADDRESS) :].decode()
            for c, n in zip(counts, value.split(b","), strict=True):
                c[address] = int(n)
        self.in_flight = {}
        for key, value in chain.iterate_meta(_CK_FLIGHT):
            start, address = value.decode().split("/", 1)
            self.in_flight[key[len(_CK_FLIGHT) :].decode()] = _InFlight(int(start), address)
        self.inactive = state["inactive"]
        self.recorded_out = state["recorded_out"]
        process_devshard_checkpoint(self.devshard, chain.get_meta)
        self.process_block(self.chain.height, state["events"], state["gas"])

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

GOVERNANCE_HELP = """\
A governance schedule is a JSON list; each entry is sent from the governance authority in block
"height" (MsgUpdateParams for the chain's params, keepersim.v1.MsgUpdateExtensionParams for
keepersim's, whichever the entry changes) and takes effect from the next block. Entries apply in
height order (same height: file order), each to the params in force after the previous ones:
  {"height": 5000, "params": {...}, "extension_params": {...}}
                                       the chain's params JSON and/or
                                       keepersim's extension params, merged onto those in force:
                                       fields not given keep their values, null unsets a
                                       message (keepersim params' output reads back as is)
  {"height": 5000, "set": {"extension_params.cb_miss_threshold_pct": 10,
                           "extension_params.health_params.policy": "windowed",
                           "params.validation_params.downtime_good_percentage": "0.05"}}
                                       dotted field paths from {"params", "extension_params"}; a
                                       Decimal field takes a decimal string or number
Every resulting pair is validated before the run starts; an invalid entry fails with the rule it
breaks. The signer is the x/gov module account (not a param), and health_params.policy takes a
chain policy only (the oracle is the simulator's baseline, not a param). At most MAX_ENTRIES
entries (keepersim/limits.py).""".replace("MAX_ENTRIES", f"{MAX_GOVERNANCE_ENTRIES:,}")


def get_group_weights(keeper: Keeper, epoch_index: int) -> list[ValidationWeight]:
    """The epoch's group members (weight, reputation, ML nodes) for the trace."""
    group = keeper.get_epoch_group(epoch_index, "")
    return [] if group is None else list(group.validation_weights)


def compute_governance_txs(params: ModuleParams, authority: str) -> list[Any]:
    """The messages that put ``params`` in force: the chain's update and keepersim's, each with
    the whole of its part."""
    return [
        MsgUpdateParams(authority=authority, params=params.params),
        MsgUpdateExtensionParams(authority=authority, extension_params=params.extension_params),
    ]


def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def _set_dotted(data: dict[str, Any], path: str, value: Any, where: str) -> None:
    parts = path.split(".")
    descriptor = ModuleParams.DESCRIPTOR
    node = data
    for i, part in enumerate(parts):
        fd = descriptor.fields_by_name.get(part)
        if fd is None:
            prefix = ".".join(parts[:i]) or "ModuleParams"
            known = ", ".join(sorted(descriptor.fields_by_name))
            hint = _get_root_hint(path) if i == 0 else ""
            raise GovernanceError(
                f"{where}: {prefix} has no field {part!r} (fields: {known}){hint}"
            )
        last = i == len(parts) - 1
        message_type = None if _is_repeated(fd) else fd.message_type
        if last:
            if (
                message_type is not None
                and message_type.full_name.endswith(".Decimal")
                and isinstance(value, str | int | float)
                and not isinstance(value, bool)
            ):
                dec = _get_decimal_arg(value, f"{where}: {path}")
                value = {"value": str(dec.value), "exponent": dec.exponent}
            node[part] = value
            return
        if message_type is None:
            raise GovernanceError(f"{where}: {'.'.join(parts[: i + 1])} is not a message field")
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
        descriptor = message_type


def _get_root_hint(path: str) -> str:
    """A path written from the old, single Params root: the path it now has."""
    head = path.split(".")[0]
    for root in ("params", "extension_params"):
        message = ModuleParams.DESCRIPTOR.fields_by_name[root].message_type
        if message is not None and head in message.fields_by_name:
            return f"; did you mean {root}.{path}?"
    return ""


def _get_decimal_arg(value: str | int | float, where: str) -> Any:
    """A chain Decimal from a governance value, or a GovernanceError saying what was expected."""
    expected = 'expected a decimal string (e.g. "0.05")'
    text = str(value).strip()
    try:
        finite = PyDecimal(text).is_finite()
    except ArithmeticError:
        finite = False
    if not finite:
        raise GovernanceError(f"{where}: {expected}, got {value!r}")
    try:
        return compute_chain_decimal(text)
    except (ValueError, ArithmeticError) as exc:
        raise GovernanceError(f"{where}: {expected}, got {value!r} ({exc})") from exc


def _check_params_patch(
    patch: Mapping[str, Any], descriptor: Any, where: str, path: str = ""
) -> None:
    """Name the first unknown field or non-object message value of a ``params`` patch (the
    field's path after ``where``, as the reader's errors do). ``null`` for a message unsets it:
    the chain's ``MsgUpdateParams`` replaces the whole Params, and ``keepersim params`` prints
    an unset message as ``null``."""
    by_name = {fd.name: fd for fd in descriptor.fields}
    by_name.update({fd.json_name: fd for fd in descriptor.fields})
    for key, value in patch.items():
        at = f"{path}.{key}" if path else key
        fd = by_name.get(key)
        if fd is None:
            known = ", ".join(sorted(fd.name for fd in descriptor.fields))
            raise GovernanceError(f"{where}: {at}: unknown field {key!r} (fields: {known})")
        message_type = None if _is_repeated(fd) else fd.message_type
        if message_type is None or value is None:
            continue
        if not isinstance(value, Mapping):
            what = 'a Decimal object {"value", "exponent"}'
            if not message_type.full_name.endswith(".Decimal"):
                what = f"an object ({message_type.name})"
            raise GovernanceError(
                f"{where}: {at}: expected {what}, got {get_json_type(value)} {value!r}"
                + ('; use "set" for a decimal string' if "Decimal" in what else "")
            )
        _check_params_patch(value, message_type, where, at)


def _is_repeated(fd: Any) -> bool:
    return bool(getattr(fd, "is_repeated", False) or getattr(fd, "label", 0) == 3)


def parse_governance(
    data: object, base: ModuleParams, source: str = "governance"
) -> list[tuple[int, ModuleParams]]:
    """A decoded governance schedule (see :data:`GOVERNANCE_HELP`) -> ``(height, ModuleParams)``
    pairs, each entry applied to the params in force after the previous ones (starting from
    ``base``) and validated. Raises :class:`GovernanceError` naming the entry."""
    if not isinstance(data, list):
        raise GovernanceError(
            f"{source}: expected a JSON list of entries, got {get_json_type(data)}"
        )
    if len(data) > MAX_GOVERNANCE_ENTRIES:
        raise GovernanceError(
            f"{source}: {len(data):,} entries, above the limit of {MAX_GOVERNANCE_ENTRIES:,} "
            "for a governance schedule"
        )
    indexed: list[tuple[int, int, Mapping[str, Any]]] = []
    for i, entry in enumerate(data):
        where = f"{source}[{i}]"
        if not isinstance(entry, Mapping):
            raise GovernanceError(f"{where}: expected an object, got {get_json_type(entry)}")
        unknown = sorted(set(entry) - {"height", "params", "extension_params", "set"})
        if unknown:
            raise GovernanceError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
        height = entry.get("height")
        if isinstance(height, bool) or not isinstance(height, int) or height < 1:
            raise GovernanceError(f"{where}: 'height' must be an integer >= 1, got {height!r}")
        patches = "params" in entry or "extension_params" in entry
        if patches == ("set" in entry):
            raise GovernanceError(
                f"{where}: needs 'params' and/or 'extension_params', or 'set' (not both)"
            )
        indexed.append((height, i, entry))
    indexed.sort(key=lambda item: (item[0], item[1]))
    current = ModuleParams()
    current.CopyFrom(base)
    out: list[tuple[int, ModuleParams]] = []
    for height, i, entry in indexed:
        where = f"{source}[{i}] (height {height})"
        data_now = compute_module_params_json(current)
        if "set" not in entry:
            patch = {k: entry[k] for k in ("params", "extension_params") if k in entry}
            for key, part in patch.items():
                if not isinstance(part, Mapping):
                    raise GovernanceError(f"{where}: '{key}' must be an object")
            _check_params_patch(patch, ModuleParams.DESCRIPTOR, where)
            merged = _deep_merge(data_now, patch, "")
        else:
            changes = entry["set"]
            if not isinstance(changes, Mapping) or not changes:
                raise GovernanceError(f"{where}: 'set' must be a non-empty object")
            merged = data_now
            for path, value in changes.items():
                _set_dotted(merged, str(path), value, where)
        new = _read_params(merged, where)
        out.append((height, new))
        current = new
    return out


def compute_params_with_changes(
    base: ModuleParams, changes: Mapping[str, Any], where: str
) -> ModuleParams:
    """``base`` with each ``{dotted path: value}`` of ``changes`` set (the rules of a governance
    entry's ``"set"``, :data:`GOVERNANCE_HELP`), validated. Raises :class:`GovernanceError`
    starting with ``where`` and naming the path or the rule broken."""
    data = compute_module_params_json(base)
    for path, value in changes.items():
        _set_dotted(data, str(path), value, where)
    return _read_params(data, where)


def _read_params(data: dict[str, Any], where: str) -> ModuleParams:
    """The merged params JSON through the one chain-params reader, validated. A key the
    entry did not give kept its value in the merge, so nothing is absent to fill: a message a
    ``set`` creates where ``null`` was gets zeros for the fields it does not give."""
    try:
        new = parse_module_params_json(data, where=where, fill_absent=False)
        validate_params(new)
    except ChainJsonError as exc:
        raise GovernanceError(str(exc)) from exc
    except InvalidParamsError as exc:
        raise GovernanceError(f"{where}: {exc}") from exc
    return new
