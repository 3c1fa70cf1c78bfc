"""Run orchestration: the one place keepersim runs sets of tasks (compare, sweep, golden).

* :mod:`keepersim.runs.task`: :class:`RunTask` (plain JSON-able data) and :func:`run_task`;
* :mod:`keepersim.runs.engines`: :func:`run_tasks` on the ``process`` or ``ray`` engine, one
  retry per failed task, streaming outcomes; :func:`execute_runs` for callers needing every run;
* :mod:`keepersim.runs.sources`: scenario sources and seeds, the policy order with baselines;
* :mod:`keepersim.runs.compare`: ``keepersim compare`` (:func:`run_compare` runs, the report
  comes from :mod:`keepersim.report.compare`);
* :mod:`keepersim.runs.spec`, :mod:`keepersim.runs.plan`, :mod:`keepersim.runs.results`,
  :mod:`keepersim.runs.sweep`: ``keepersim sweep`` (spec, tasks, streamed runs.csv, the sweep).
"""

from keepersim.runs.engines import (
    ENGINES,
    EngineError,
    TaskOutcome,
    execute_runs,
    get_default_jobs,
    run_tasks,
)
from keepersim.runs.task import RunTask, make_task, run_task, run_task_data

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
