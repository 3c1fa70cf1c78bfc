"""Compare health policies on scenarios over several seeds, paired on the same request streams.

:func:`run_compare` plans every (scenario, policy, seed), always including the baselines
``none`` (no health filter) and ``oracle`` (admits exactly the truly healthy), and runs them on
the engines the sweep uses (:func:`~keepersim.runs.engines.execute_runs`);
:func:`compare` then has :mod:`keepersim.report.compare` aggregate per scenario and policy,
print the table and write ``report.json``, ``runs.csv``, ``summary.csv`` and PNG plots.

Seeds: a built-in scenario name is rebuilt for each seed ``1..N``
(``get_builtin_scenario(name, seed)``) and run with that seed, so both the fleet and the request
stream vary; a scenario file (or a :class:`Scenario`) keeps its fleet and runs with seeds
``scenario.seed + 0 .. scenario.seed + N - 1``. Every policy of one (scenario, seed) sees the same
fleet and the same request stream, which is what makes ``oracle_efficiency`` a paired measure:
``(misses_none - misses_policy) / (misses_none - misses_oracle)`` on the same seed (NaN, written
as null, when the oracle avoids nothing).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from keepersim.chain import StoreKind
from keepersim.outputs import check_output_folder
from keepersim.report.compare import (
    REPORT_VERSION,
    SPEC_RUN_KEYS,
    ComparedRuns,
    compute_compare_report,
    format_compare_table,
    write_compare_report,
)
from keepersim.runs.engines import execute_runs, get_default_jobs
from keepersim.runs.sources import (
    CompareError,
    ScenarioSource,
    order_policies,
    resolve_scenarios,
)
from keepersim.runs.task import RunTask, make_task
from keepersim.sim.devshard_path import get_selection_path_words
from keepersim.sim.live_network import (
    LIVE_OVERRIDE,
    LIVE_WORDS,
    compute_live_params,
    get_live_preset,
)
from keepersim.sim.run_genesis import build_params, compute_run_mechanisms
from keepersim.sim.scenario import Scenario, ScenarioError
from keepersim.types.policies import is_baseline

__all__ = [
    "REPORT_VERSION",
    "SPEC_RUN_KEYS",
    "CompareError",
    "compare",
    "order_policies",
    "plan_compare",
    "resolve_scenarios",
    "run_compare",
]


def _check_counts(scenarios: Sequence[object], seeds: object, jobs: int | None) -> int:
    """The worker count (``jobs`` or the default), after checking seeds, jobs and scenarios."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise CompareError(f"seeds must be an integer >= 1, got {seeds!r}")
    jobs = get_default_jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise CompareError(f"jobs must be an integer >= 1, got {jobs!r}")
    if not scenarios:
        raise CompareError("no scenario given")
    return jobs


def plan_compare(
    sources: Sequence[ScenarioSource],
    policies: Sequence[str],
    seeds: int,
    *,
    store: StoreKind = "leveldb",
    reputation_weighting: bool = False,
) -> list[RunTask]:
    """One task per (scenario, seed, policy), in that order; ``policies`` as
    :func:`order_policies` returns them. A source of the ``mainnet`` preset runs with the
    chain's downtime SPRT on (:data:`~keepersim.sim.live_network.LIVE_OVERRIDE`)."""
    override: dict[str, object] = {}
    if reputation_weighting:
        override["extension_params.reputation_weighting"] = True
    tasks: list[RunTask] = []
    for src in sources:
        for i in range(seeds):
            scenario, seed = src.get(i)
            params = {**override, **LIVE_OVERRIDE} if src.live else override
            for policy in policies:
                tasks.append(
                    make_task(scenario, policy, seed, label=src.label, params=params, store=store)
                )
    return tasks


def _get_policy_params(src: ScenarioSource, policy: str, reputation_weighting: bool) -> Any:
    """The params ``policy`` runs ``src`` with (the report's per-policy params)."""
    params = build_params(src.get(0)[0], policy, reputation_weighting=reputation_weighting)
    return compute_live_params(params) if src.live else params


def run_compare(
    scenarios: Sequence[Scenario | str | os.PathLike[str]],
    policies: Sequence[str],
    seeds: int = 3,
    *,
    store: StoreKind = "leveldb",
    progress: bool = True,
    jobs: int | None = None,
    reputation_weighting: bool = False,
    selection_path: str = "scenario",
    slot_filter: bool = False,
    preset: str = "default",
) -> ComparedRuns:
    """Run every (scenario, policy, seed) of a comparison; the run records and what the report
    needs besides them (the params each policy ran with, the mechanisms every run has).

    Arguments as :func:`compare`'s. Raises :class:`CompareError` on bad input, before any run.
    """
    jobs = _check_counts(scenarios, seeds, jobs)
    ordered = order_policies(policies)
    try:
        sources = resolve_scenarios(
            scenarios,
            selection_path=selection_path,
            slot_filter=slot_filter,
            live=get_live_preset(preset),
        )
    except (ScenarioError, ValueError) as exc:
        raise CompareError(str(exc)) from exc
    tasks = plan_compare(
        sources, ordered, seeds, store=store, reputation_weighting=reputation_weighting
    )
    mechanisms = compute_run_mechanisms(
        sources[0].get(0)[0], reputation_weighting=reputation_weighting
    )
    if selection_path != "scenario" or slot_filter:
        mechanisms["selection_path"] = get_selection_path_words(selection_path, slot_filter)
    if sources[0].live:
        mechanisms["preset"] = LIVE_WORDS
    started = time.perf_counter()
    records = execute_runs(tasks, jobs, progress)
    wall = time.perf_counter() - started
    policy_params = {
        (src.label, policy): _get_policy_params(src, policy, reputation_weighting)
        for src in sources
        for policy in ordered
        if not is_baseline(policy)
    }
    return ComparedRuns(
        scenarios=[src.label for src in sources],
        policies=ordered,
        seeds=seeds,
        store=store,
        jobs=jobs,
        mechanisms=mechanisms,
        records=records,
        wall_seconds=wall,
        policy_params=policy_params,
    )


def compare(
    scenarios: Sequence[Scenario | str | os.PathLike[str]],
    policies: Sequence[str],
    seeds: int = 3,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    store: StoreKind = "leveldb",
    progress: bool = True,
    jobs: int | None = None,
    plots: bool = True,
    stream: IO[str] | None = None,
    reputation_weighting: bool = False,
    selection_path: str = "scenario",
    slot_filter: bool = False,
    preset: str = "default",
) -> dict[str, Any]:
    """Run and compare; return the report (the content of ``report.json``).

    ``scenarios``: built-in names, scenario files or :class:`Scenario` objects. ``policies``: the
    policies to compare (``none`` and ``oracle`` are always added). ``out_dir``: where the files
    go (None: nothing is written; checked before any run). ``jobs``: worker processes (default
    :func:`get_default_jobs`; 1 runs in this process). The table goes to ``stream`` (default
    stdout; pass ``io.StringIO()`` to silence it). ``reputation_weighting``: every run, baselines
    included, selects by weight x reputation (the fork's PR #8) instead of by weight alone; the
    report's ``config`` states the selection rule and SPRT's use
    (:func:`~keepersim.sim.run_genesis.compute_run_mechanisms`), the table's first line says it in words.
    ``selection_path``: :data:`~keepersim.sim.devshard_path.SELECTION_PATH_CHOICES` (``both``
    runs each scenario on both paths); ``slot_filter``: the chain's filter at slot sampling
    (``devshard.slot_filter``) in every devshard run. ``preset``: ``mainnet`` runs every
    scenario as the live network handles it (:mod:`keepersim.sim.live_network`: the devshard
    path, the chain's downtime SPRT on), before ``selection_path``.
    """
    _check_counts(scenarios, seeds, jobs)
    folder = None if out_dir is None else check_output_folder(out_dir, "out_dir")
    runs = run_compare(
        scenarios,
        policies,
        seeds,
        store=store,
        progress=progress,
        jobs=jobs,
        reputation_weighting=reputation_weighting,
        selection_path=selection_path,
        slot_filter=slot_filter,
        preset=preset,
    )
    report = compute_compare_report(runs)
    table = format_compare_table(report)
    out = sys.stdout if stream is None else stream
    out.write(table + "\n")
    if folder is not None:
        write_compare_report(report, table, folder, plots=plots)
    return report
