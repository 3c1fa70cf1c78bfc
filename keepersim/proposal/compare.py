"""Paired runs of a proposal: every scenario (or trace) and seed under the current params and
under the proposed ones, with the same seed for both, and the paired differences.

Every run goes through :mod:`keepersim.runs`, all in one batch on ``jobs`` workers: one
:class:`~keepersim.runs.RunTask` per arm and seed, the whole params shipped as JSON. On a
scenario the proposal takes effect from genesis, or with ``at_height`` is sent as governance in
block ``H`` of an otherwise current run (effective from ``H + 1``). Traces replay what-if (trace
tasks, :mod:`keepersim.runs.traces`): the current arm replays the trace's own params with the
current policy, the proposed arm the same with the proposal sent as governance in the trace's
first block (or ``H``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from keepersim.proposal.load import Proposal, ProposalError, check_proposed_params
from keepersim.report.stats import compute_t_interval, mean_or_none
from keepersim.runs import RunTask, execute_runs
from keepersim.runs.sources import ScenarioSource, resolve_scenarios
from keepersim.sim.run_genesis import build_params
from keepersim.sim.scenario import Scenario, dump_scenario
from keepersim.types.params import get_default_params, params_to_dict
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

__all__ = [
    "ARMS",
    "DEFAULT_SCENARIOS",
    "DEFAULT_SEEDS",
    "MetricComparison",
    "ProposalComparison",
    "compare_proposal",
    "compute_changed_fields",
    "compute_metric_comparisons",
    "get_default_policy",
]

ARMS = ("current", "proposed")
DEFAULT_SCENARIOS = ("mainnet_like",)
DEFAULT_SEEDS = 3
# Metrics where a rise is worse / better (the verdict's words); others rise or fall.
LOWER_IS_BETTER = frozenset(
    {
        "misses",
        "miss_rate",
        "declines",
        "unassigned_requests",
        "unserved_requests",
        "fallback_selections",
        "panic_selections",
        "false_exclusion_weight_share",
        "withheld_weight_share",
        "detection_delay",
        "undetected_periods",
        "undetected_share",
        "recovery_delay",
        "never_readmitted",
        "traffic_weight_distance",
        "degraded_traffic_share",
        # the chain's cost (docs/metrics.md, "Gas")
        "gas_total",
        "gas_per_inference",
    }
)
HIGHER_IS_BETTER = frozenset({"finished"})
_NOT_METRICS = frozenset(
    {
        "seed",
        "blocks",
        "bucket_blocks",
        "wall_seconds",
        "inferences_per_second",
        "blocks_per_second",
        "first_height",
        "last_height",
    }
)


def get_default_policy() -> str:
    """The current params' health policy when none is given: the default params'."""
    return get_default_params().extension_params.health_params.policy


@dataclass(frozen=True)
class MetricComparison:
    """One metric on one scenario: the arms' means over seeds and the paired difference
    (proposed - current) with its 95% paired t interval (None with fewer than 2 seeds)."""

    scenario: str
    metric: str
    current: float | None
    proposed: float | None
    diff: float | None
    low: float | None
    high: float | None
    seeds: int

    def is_significant(self) -> bool:
        """True iff the CI excludes 0 (with one seed or no CI: never)."""
        if self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"significant": self.is_significant()}


@dataclass
class ProposalComparison:
    """Everything a proposal report shows."""

    title: str
    message_types: list[str]
    at_height: int | None
    policy: str
    seeds: int
    metrics: list[MetricComparison]
    runs: list[dict[str, Any]] = field(default_factory=list)
    changed_fields: dict[str, list[str]] = field(default_factory=dict)

    def get(self, scenario: str, metric: str) -> MetricComparison:
        for m in self.metrics:
            if m.scenario == scenario and m.metric == metric:
                return m
        raise KeyError(f"no metric {metric!r} on scenario {scenario!r}")

    def get_scenarios(self) -> list[str]:
        return list(dict.fromkeys(m.scenario for m in self.metrics))


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def compute_changed_fields(current: ModuleParams, proposed: ModuleParams) -> list[str]:
    """The dotted paths whose values differ, ``path: old -> new``, in field order."""
    a, b = _flatten(params_to_dict(current)), _flatten(params_to_dict(proposed))
    return [
        f"{path}: {a.get(path)!r} -> {b.get(path)!r}"
        for path in dict.fromkeys([*a, *b])
        if a.get(path) != b.get(path)
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def compute_metric_comparisons(
    pairs: Sequence[tuple[str, dict[str, Any], dict[str, Any]]],
) -> list[MetricComparison]:
    """``(scenario, current run, proposed run)`` per seed -> one comparison per scenario and
    numeric metric (metrics in the runs' key order)."""
    by_scenario: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for label, cur_run, prop_run in pairs:
        by_scenario.setdefault(label, []).append((cur_run, prop_run))
    out: list[MetricComparison] = []
    for label, runs in by_scenario.items():
        names = [
            k
            for k in runs[0][0]
            if k not in _NOT_METRICS
            and any(_is_number(c.get(k)) or _is_number(p.get(k)) for c, p in runs)
        ]
        for name in names:
            cur = [float(c[name]) if _is_number(c.get(name)) else None for c, _ in runs]
            prop = [float(p[name]) if _is_number(p.get(name)) else None for _, p in runs]
            diffs = [
                None if x is None or y is None or not math.isfinite(x - y) else y - x
                for x, y in zip(cur, prop, strict=True)
            ]
            mean, low, high = compute_t_interval(diffs)
            n = sum(d is not None for d in diffs)
            out.append(
                MetricComparison(
                    label, name, mean_or_none(cur), mean_or_none(prop), mean, low, high, n
                )
            )
    return out


def scenario_tasks(
    source: ScenarioSource,
    proposal: Proposal,
    seeds: int,
    policy: str,
    at_height: int | None,
    blocks: int | None,
    changed: dict[str, list[str]],
) -> list[RunTask]:
    tasks: list[RunTask] = []
    for index in range(seeds):
        scenario, seed = source.get(index)
        scenario = _cut(scenario, blocks)
        if at_height is not None and not 1 <= at_height <= scenario.blocks:
            raise ProposalError(
                f"--at-height {at_height}: scenario {source.label!r} has blocks "
                f"1..{scenario.blocks}; expected a height in that range"
            )
        current = build_params(scenario, policy)
        where = f"{proposal.source}: on scenario {source.label!r}"
        proposed = check_proposed_params(current, proposal, where)
        changed.setdefault(source.label, compute_changed_fields(current, proposed))
        data = dump_scenario(scenario)
        cur_json = params_to_dict(current)
        tasks.append(RunTask(data, policy, seed, label=source.label, initial_params=cur_json))
        if at_height is None:
            proposed_policy = proposed.extension_params.health_params.policy
            tasks.append(
                RunTask(
                    data,
                    proposed_policy,
                    seed,
                    label=source.label,
                    initial_params=params_to_dict(proposed),
                )
            )
        else:
            governance = [[at_height, params_to_dict(proposed)]]
            tasks.append(
                RunTask(
                    data,
                    policy,
                    seed,
                    label=source.label,
                    initial_params=cur_json,
                    governance=governance,
                )
            )
    return tasks


def _cut(scenario: Scenario, blocks: int | None) -> Scenario:
    if blocks is None or blocks >= scenario.blocks:
        return scenario
    return dataclasses.replace(scenario, blocks=blocks)


def trace_tasks(
    trace: str | os.PathLike[str],
    proposal: Proposal,
    seeds: int,
    policy: str,
    at_height: int | None,
    changed: dict[str, list[str]],
) -> list[RunTask]:
    """The trace's what-if tasks: per seed ``1..seeds``, the current arm then the proposed."""
    from keepersim.replay.common import apply_policy, open_trace
    from keepersim.runs.traces import make_trace_task
    from keepersim.trace.reader import TraceCursor
    from keepersim.trace.records import BadLines

    label = os.path.basename(os.fspath(trace))
    prologue, records = open_trace(
        trace, skip_bad=False, bad_lines=BadLines(), cursor=TraceCursor()
    )
    close = getattr(records, "close", None)
    if close is not None:
        close()
    header = prologue.header
    height = header.first_height if at_height is None else at_height
    if not header.first_height <= height <= header.last_height:
        raise ProposalError(
            f"--at-height {height}: trace {label!r} has blocks "
            f"{header.first_height}..{header.last_height}; expected a height in that range"
        )
    current = apply_policy(prologue.params.params, policy, False)
    where = f"{proposal.source}: on trace {label!r}"
    proposed = check_proposed_params(current, proposal, where)
    changed.setdefault(label, compute_changed_fields(current, proposed))
    return [
        make_trace_task(trace, "what-if", [policy], seed=seed, governance=gov, label=label)
        for seed in range(1, seeds + 1)
        for gov in ((), [(height, proposed)])
    ]


def compare_proposal(
    proposal: Proposal,
    *,
    scenarios: Sequence[Scenario | str | os.PathLike[str]] = DEFAULT_SCENARIOS,
    traces: Sequence[str | os.PathLike[str]] = (),
    seeds: int = DEFAULT_SEEDS,
    at_height: int | None = None,
    policy: str | None = None,
    blocks: int | None = None,
    jobs: int | None = None,
    progress: bool = False,
) -> ProposalComparison:
    """Run every scenario and trace under both arms on seeds ``1..seeds`` (built-ins; a file's
    own seed onwards) and compare. ``policy``: the current health policy (default
    :func:`get_default_policy`); ``blocks`` cuts each scenario to its first ``blocks`` blocks."""
    if seeds < 1:
        raise ProposalError(f"--seeds {seeds}: expected at least 1")
    policy = policy or get_default_policy()
    changed: dict[str, list[str]] = {}
    tasks: list[RunTask] = []
    for source in resolve_scenarios(scenarios):
        tasks.extend(scenario_tasks(source, proposal, seeds, policy, at_height, blocks, changed))
    for trace in traces:
        tasks.extend(trace_tasks(trace, proposal, seeds, policy, at_height, changed))
    records = execute_runs(tasks, jobs, progress, desc="proposal") if tasks else []
    pairs: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    for i in range(0, len(records), 2):
        cur, prop = records[i], records[i + 1]
        if tasks[i].trace is not None:  # a what-if run names the trace's scenario
            for run in (cur, prop):
                run.update(scenario=tasks[i].get_label(), seed=tasks[i].seed)
        cur["arm"], prop["arm"] = ARMS
        pairs.append((str(cur["scenario"]), cur, prop))
    runs = [run for _, cur, prop in pairs for run in (cur, prop)]
    return ProposalComparison(
        title=proposal.title,
        message_types=proposal.get_message_types(),
        at_height=at_height,
        policy=policy,
        seeds=seeds,
        metrics=compute_metric_comparisons(pairs),
        runs=runs,
        changed_fields=changed,
    )
