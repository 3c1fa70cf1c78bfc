"""A sweep's tasks: scenario x policy x grid point x seed, baselines shared where they can be.

Each task gets the grid point's paths its policy reads (:func:`~keepersim.runs.spec.
is_path_for_policy`): a policy's own params (``health_params.windowed.*``) reach that policy
alone, so with a grid over windowed's params every other policy runs once per (scenario, seed)
and every grid point reuses it. The baselines ``none`` and ``oracle`` get only the
baseline-affecting paths (:func:`~keepersim.runs.spec.is_baseline_neutral`); a path under
``params.`` (the chain's, e.g. expiration) reaches everyone, so they run per value of it. A row
leaves the cells of the paths its policy ignores empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from keepersim.chain import StoreKind
from keepersim.runs.spec import SweepSpec, is_path_for_policy
from keepersim.runs.task import RunTask

__all__ = ["PlannedTask", "TaskKey", "format_cell", "get_task_key", "plan_tasks"]

#: ``(scenario, policy, seed, grid cell per path)``: what identifies a row of runs.csv.
TaskKey = tuple[str, str, str, tuple[str, ...]]


@dataclass(frozen=True)
class PlannedTask:
    key: TaskKey
    task: RunTask
    cells: dict[str, str]


def format_cell(value: Any) -> str:
    """A grid value as its runs.csv cell (JSON for numbers and booleans, strings as is)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def get_task_key(scenario: str, policy: str, seed: str, cells: tuple[str, ...]) -> TaskKey:
    return (scenario, policy, seed, cells)


def plan_tasks(spec: SweepSpec, store: StoreKind = "memory") -> list[PlannedTask]:
    """Every task of the sweep, once each, ordered by scenario, seed, grid point, policy."""
    paths = spec.grid_paths
    out: list[PlannedTask] = []
    seen: set[TaskKey] = set()
    for scenario in spec.scenarios:
        for seed in scenario.get_run_seeds(spec.seeds):
            for point in spec.get_points():
                for policy in spec.policies:
                    used = {p: v for p, v in point.items() if is_path_for_policy(p, policy)}
                    cells = {p: format_cell(used[p]) if p in used else "" for p in paths}
                    key = get_task_key(
                        scenario.label, policy, str(seed), tuple(cells[p] for p in paths)
                    )
                    if key in seen:
                        continue
                    seen.add(key)
                    task = RunTask(
                        scenario.source,
                        policy,
                        seed,
                        label=scenario.label,
                        params=dict(used),
                        store=store,
                    )
                    out.append(PlannedTask(key, task, cells))
    return out
