"""``keepersim.testing``: a pytest plugin for governance tests (registered through the
``pytest11`` entry point; ``pytest -p keepersim.testing`` works too).

Fixtures (each a factory):

* ``keepersim_chain(params=None, genesis=None, scenario="steady_degraded")``: a fresh in-memory
  :class:`~keepersim.chain.Chain` (from ``genesis``, else the scenario's fleet under ``params``
  or the scenario's defaults), closed after the test;
* ``load_proposal(path, base=None)``: the proposal file checked as the chain checks it
  (:mod:`keepersim.proposal.load`), as the validated ``ModuleParams`` it puts in force on
  ``base`` (default params);
* ``run_under(proposal, scenario="mainnet_like", *, seeds=3, blocks=None, at_height=None,
  policy=None, traces=())``: current vs proposed on paired seeds (a proposal file, a
  :class:`~keepersim.proposal.Proposal` or ``ModuleParams``), watching every block of every
  scenario run: a :class:`GovernanceRun`.

Assertions: :func:`assert_no_regression` (the upper end of the paired CI of proposed - current
stays within ``max_increase``) and :func:`assert_chain_progresses` (every block committed, each
governance update in force from the next block: not rejected, the chain never stalled).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from keepersim.chain import Chain
from keepersim.proposal.compare import (
    ARMS,
    ProposalComparison,
    compare_proposal,
    compute_metric_comparisons,
    get_default_policy,
    scenario_tasks,
)
from keepersim.proposal.load import Proposal, check_proposed_params, load_proposal
from keepersim.runs.sources import resolve_scenarios
from keepersim.runs.task import RunTask, run_task
from keepersim.sim.run_genesis import build_genesis, build_params
from keepersim.sim.scenario import Scenario
from keepersim.sim.suite import get_builtin_scenario
from keepersim.types.params import get_default_params, params_from_dict
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

__all__ = [
    "GovernanceRun",
    "RunObservation",
    "assert_chain_progresses",
    "assert_no_regression",
    "keepersim_chain",
    "load_proposal_fixture",
    "load_proposal_params",
    "run_proposal",
    "run_under",
]

ProposalLike = str | os.PathLike[str] | Proposal | ModuleParams


@dataclass
class RunObservation:
    """What one scenario run's chain did: each committed height in order, and the params in
    force after each height where they changed (serialized ``ModuleParams``)."""

    scenario: str
    arm: str
    seed: int
    blocks: int
    governance: list[tuple[int, bytes]]
    heights: list[int] = field(default_factory=list)
    params_changes: list[tuple[int, bytes]] = field(default_factory=list)

    def process_block(self, chain: Chain, height: int) -> None:
        self.heights.append(height)
        current = chain.get_params().SerializeToString(deterministic=True)
        if not self.params_changes or self.params_changes[-1][1] != current:
            self.params_changes.append((height, current))

    def get_params_after(self, height: int) -> bytes | None:
        """The params in force once block ``height`` committed."""
        out = None
        for h, value in self.params_changes:
            if h > height:
                break
            out = value
        return out


@dataclass
class GovernanceRun:
    """:func:`run_proposal`'s result: the comparison (as ``keepersim proposal`` reports it) and
    every scenario run's observation."""

    comparison: ProposalComparison
    observations: list[RunObservation]

    def get(self, metric: str, scenario: str | None = None) -> Any:
        names = self.comparison.get_scenarios()
        return self.comparison.get(scenario or names[0], metric)


def _as_proposal(proposal: ProposalLike) -> Proposal:
    if isinstance(proposal, Proposal):
        return proposal
    if isinstance(proposal, ModuleParams):
        return Proposal(
            title="params",
            summary="",
            params=proposal.params,
            extension_params=proposal.extension_params,
            source="params",
        )
    return load_proposal(proposal)


def load_proposal_params(
    path: str | os.PathLike[str], base: ModuleParams | None = None
) -> ModuleParams:
    """The validated params the proposal file puts in force on ``base`` (default params)."""
    base = get_default_params() if base is None else base
    return check_proposed_params(base, load_proposal(path, base=base))


def run_proposal(
    proposal: ProposalLike,
    scenario: str | Scenario | os.PathLike[str] | Sequence[str | Scenario] = "mainnet_like",
    *,
    seeds: int = 3,
    blocks: int | None = None,
    at_height: int | None = None,
    policy: str | None = None,
    traces: Sequence[str | os.PathLike[str]] = (),
) -> GovernanceRun:
    """Current vs proposed on paired seeds, in this process, watching every block."""
    prop = _as_proposal(proposal)
    scenarios: list[Any] = (
        list(scenario) if isinstance(scenario, list | tuple) else [scenario] if scenario else []
    )
    policy = policy or get_default_policy()
    tasks: list[RunTask] = []
    changed: dict[str, list[str]] = {}
    for source in resolve_scenarios(scenarios):
        tasks.extend(scenario_tasks(source, prop, seeds, policy, at_height, blocks, changed))
    observations: list[RunObservation] = []
    pairs = []
    for i in range(0, len(tasks), 2):
        records = []
        for arm, task in zip(ARMS, tasks[i : i + 2], strict=True):
            governance = [
                (int(h), params_from_dict(p).SerializeToString(deterministic=True))
                for h, p in task.governance
            ]
            blocks_of = int(task.scenario["blocks"]) if isinstance(task.scenario, dict) else 0
            obs = RunObservation(task.get_label(), arm, task.seed, blocks_of, governance)
            record = run_task(task, on_block=obs.process_block)
            record["arm"] = arm
            obs.blocks = int(record["blocks"])
            observations.append(obs)
            records.append(record)
        pairs.append((str(records[0]["scenario"]), records[0], records[1]))
    comparison = compare_proposal(
        prop, scenarios=[], traces=traces, seeds=seeds, policy=policy, at_height=at_height
    )
    runs = [r for _, c, p in pairs for r in (c, p)] + comparison.runs
    all_pairs = pairs + [
        (str(c["scenario"]), c, p)
        for c, p in zip(comparison.runs[::2], comparison.runs[1::2], strict=True)
    ]
    comparison.metrics = compute_metric_comparisons(all_pairs)
    comparison.runs = runs
    comparison.changed_fields.update(changed)
    return GovernanceRun(comparison, observations)


def assert_no_regression(
    result: GovernanceRun | ProposalComparison,
    metric: str = "miss_rate",
    max_increase: float = 0.0,
    confidence: float = 0.95,
    scenario: str | None = None,
) -> None:
    """Fail unless, on every scenario (or ``scenario``), the paired CI of proposed - current
    for ``metric`` lies at or below ``max_increase`` (a rate's 0.2 points: 0.002). Only the 95%
    paired t interval is available (report/stats.py); it needs 2 seeds or more."""
    __tracebackhide__ = True
    if abs(confidence - 0.95) > 1e-9:
        raise ValueError(f"confidence {confidence}: only 0.95 (the paired 95% t interval)")
    comparison = result.comparison if isinstance(result, GovernanceRun) else result
    names = [scenario] if scenario else comparison.get_scenarios()
    if not names:
        pytest.fail("assert_no_regression: the result holds no scenario")
    for name in names:
        try:
            m = comparison.get(name, metric)
        except KeyError as exc:
            pytest.fail(f"assert_no_regression: {exc.args[0]}")
        if m.high is None:
            pytest.fail(
                f"{metric} on {name}: no 95% CI ({m.seeds} paired seed(s)); run 2 seeds or more"
            )
        if m.high > max_increase:
            pytest.fail(
                f"{metric} on {name}: proposed - current = {m.diff:+.6g} (95% CI "
                f"{m.low:+.6g}..{m.high:+.6g}); a rise above {max_increase:+.6g} is not ruled out"
            )


def assert_chain_progresses(result: GovernanceRun) -> None:
    """Fail unless every observed run committed each block ``1..blocks`` in order, and every
    governance update it sent was in force from the next block (not rejected)."""
    __tracebackhide__ = True
    if not result.observations:
        pytest.fail("assert_chain_progresses: no scenario run was observed")
    for obs in result.observations:
        who = f"{obs.scenario}/{obs.arm}/seed {obs.seed}"
        expected = list(range(1, obs.blocks + 1))
        if obs.heights != expected:
            missing = sorted(set(expected) - set(obs.heights))
            last = obs.heights[-1] if obs.heights else 0
            pytest.fail(
                f"{who}: the chain stalled: committed {len(obs.heights)} of {obs.blocks} blocks "
                f"(last {last}; first missing {missing[0] if missing else '-'})"
            )
        for height, params in obs.governance:
            if height < obs.blocks and obs.get_params_after(height + 1) != params:
                pytest.fail(
                    f"{who}: the governance update sent at height {height} is not in force "
                    f"at {height + 1} (ParamsRejected or a failed tx)"
                )


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture
def keepersim_chain() -> Iterator[Callable[..., Chain]]:
    """Factory of fresh in-memory chains (closed at teardown)."""
    opened: list[Chain] = []

    def make(
        params: ModuleParams | None = None,
        genesis: Genesis | None = None,
        scenario: str | Scenario = "steady_degraded",
        policy: str | None = None,
    ) -> Chain:
        if genesis is None:
            s = get_builtin_scenario(scenario) if isinstance(scenario, str) else scenario
            genesis = build_genesis(
                s, build_params(s, policy or get_default_policy(), params=params)
            )
        chain = Chain.open(memory=True, genesis=genesis)
        opened.append(chain)
        return chain

    yield make
    for chain in opened:
        chain.close()


@pytest.fixture(name="load_proposal")
def load_proposal_fixture() -> Callable[..., ModuleParams]:
    """Factory: ``load_proposal(path, base=None)`` -> the validated ModuleParams."""
    return load_proposal_params


@pytest.fixture
def run_under() -> Callable[..., GovernanceRun]:
    """Factory: ``run_under(proposal, scenario="mainnet_like", *, seeds=3, blocks=None,
    at_height=None, policy=None, traces=())`` -> :class:`GovernanceRun`."""
    return run_proposal
