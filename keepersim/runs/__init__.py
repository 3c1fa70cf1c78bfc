"""Run orchestration: the one place keepersim runs sets of tasks (compare, sweep, proposal,
simulate, replay, golden).

* :mod:`keepersim.runs.task`: :class:`RunTask` (plain JSON-able data: a scenario run, or a trace
  replay with ``trace`` set) and :func:`run_task`;
* :mod:`keepersim.runs.engines`: :func:`run_tasks` on the ``process`` or ``ray`` engine, one
  retry per failed task, streaming outcomes; :func:`execute_runs` for callers needing every run;
* :mod:`keepersim.runs.traces`: trace tasks (replay as recorded, what-if);
* :mod:`keepersim.runs.sources`: scenario sources and seeds, the policy order with baselines;
* :mod:`keepersim.runs.compare`: ``keepersim compare`` (:func:`run_compare` runs, the report
  comes from :mod:`keepersim.report.compare`);
* :mod:`keepersim.runs.spec`, :mod:`keepersim.runs.plan`, :mod:`keepersim.runs.results`,
  :mod:`keepersim.runs.sweep`: ``keepersim sweep`` (spec, tasks, streamed runs.csv, the sweep).

Every run opens its chain with :func:`keepersim.run_chain.open_run_chain`. Names are imported
lazily, so importing one module of the package does not load the simulator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keepersim.runs.engines import (
        ENGINES,
        EngineError,
        TaskOutcome,
        execute_runs,
        get_default_jobs,
        run_tasks,
    )
    from keepersim.runs.task import RunTask, make_task, run_task, run_task_data

_EXPORTS = {
    "ENGINES": "keepersim.runs.engines",
    "EngineError": "keepersim.runs.engines",
    "TaskOutcome": "keepersim.runs.engines",
    "execute_runs": "keepersim.runs.engines",
    "get_default_jobs": "keepersim.runs.engines",
    "run_tasks": "keepersim.runs.engines",
    "RunTask": "keepersim.runs.task",
    "make_task": "keepersim.runs.task",
    "run_task": "keepersim.runs.task",
    "run_task_data": "keepersim.runs.task",
}

__all__ = [
    "ENGINES",
    "EngineError",
    "RunTask",
    "TaskOutcome",
    "execute_runs",
    "get_default_jobs",
    "make_task",
    "run_task",
    "run_task_data",
    "run_tasks",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keepersim.runs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
