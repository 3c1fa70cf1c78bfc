"""Engines that run :class:`~keepersim.runs.task.RunTask` lists: the one place runs are
dispatched (compare, sweep, scripts/golden.py).

* ``process``: this process for one job, else a pool of ``jobs`` spawned worker processes
  (default: every core this process may use);
* ``ray``: an existing Ray cluster (``address``) or a local one started for the call (``jobs``
  CPUs) and shut down after it. Ray is the optional extra ``keepersim[ray]``, imported only here.

Workers get each task as JSON-able data and build its chain themselves
(:func:`~keepersim.runs.task.run_task_data`), so engines agree on every app hash. A task that
raises is retried once (``retries``), then reported as a failed :class:`TaskOutcome`; the rest
go on. ``on_outcome`` sees each outcome as it finishes (streaming); progress lines go to stderr
(:mod:`keepersim.progress`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from keepersim.progress import ProgressBar, make_progress
from keepersim.runs.task import RunTask, run_task_data
from keepersim.types.errors import KeepersimError

__all__ = [
    "ENGINES",
    "DEFAULT_RETRIES",
    "EngineError",
    "EngineName",
    "TaskOutcome",
    "execute_runs",
    "get_default_jobs",
    "import_ray",
    "run_tasks",
]

EngineName = Literal["process", "ray"]
ENGINES: tuple[EngineName, ...] = ("process", "ray")
DEFAULT_RETRIES = 1
RAY_MISSING = "the ray engine needs Ray: pip install 'keepersim[ray]'"


class EngineError(KeepersimError):
    """Bad engine input (unknown engine, bad jobs, Ray missing or unreachable)."""


@dataclass
class TaskOutcome:
    """One task's end: its run record, or the error of its last attempt."""

    index: int
    task: RunTask
    record: dict[str, Any] | None
    error: str | None
    attempts: int
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.record is not None


OutcomeCallback = Callable[[TaskOutcome], None]


def get_default_jobs() -> int:
    """Worker processes by default: every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def import_ray() -> Any:
    """The ``ray`` module, or an :class:`EngineError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise EngineError(RAY_MISSING) from exc
    return ray


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


class _Tracker:
    """Attempts per task; decides retry or report, calls back, moves the progress."""

    def __init__(
        self,
        tasks: Sequence[RunTask],
        retries: int,
        bar: ProgressBar,
        on_outcome: OutcomeCallback | None,
    ) -> None:
        self.tasks = tasks
        self.retries = retries
        self.bar = bar
        self.on_outcome = on_outcome
        self.attempts = [0] * len(tasks)
        self.outcomes: list[TaskOutcome | None] = [None] * len(tasks)

    def process_success(self, index: int, record: dict[str, Any]) -> None:
        self.attempts[index] += 1
        self._finish(TaskOutcome(index, self.tasks[index], record, None, self.attempts[index]))

    def process_failure(self, index: int, exc: BaseException) -> bool:
        """Count the failed attempt; True when the task is to be tried again."""
        self.attempts[index] += 1
        if self.attempts[index] <= self.retries:
            return True
        task = self.tasks[index]
        outcome = TaskOutcome(index, task, None, _describe(exc), self.attempts[index], exc)
        self._finish(outcome)
        return False

    def _finish(self, outcome: TaskOutcome) -> None:
        self.outcomes[outcome.index] = outcome
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        task = outcome.task
        self.bar.set_postfix_str(f"{task.get_label()}/{task.policy}/{task.seed}", refresh=False)
        self.bar.update(1)

    def get_outcomes(self) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o is not None]


def _run_in_process(tracker: _Tracker, order: list[int]) -> None:
    for index in order:
        while True:
            try:
                record = run_task_data(tracker.tasks[index].to_dict())
            except Exception as exc:
                if tracker.process_failure(index, exc):
                    continue
            else:
                tracker.process_success(index, record)
            break


def _run_in_pool(tracker: _Tracker, order: list[int], jobs: int) -> None:
    """Rounds of a spawned pool: a round's failures (a worker that died breaks the pool for the
    tasks in it) are tried again in a fresh pool."""
    context = multiprocessing.get_context("spawn")
    queue = order
    while queue:
        again: list[int] = []
        workers = min(jobs, len(queue))
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=context
        ) as pool:
            futures = {pool.submit(run_task_data, tracker.tasks[i].to_dict()): i for i in queue}
            try:
                for future in concurrent.futures.as_completed(futures):
                    index = futures[future]
                    try:
                        record = future.result()
                    except Exception as exc:
                        if tracker.process_failure(index, exc):
                            again.append(index)
                    else:
                        tracker.process_success(index, record)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        queue = sorted(again)


def _run_on_ray(tracker: _Tracker, order: list[int], jobs: int, address: str | None) -> None:
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        }
        if address is None:
            options["num_cpus"] = jobs
        try:
            ray.init(address=address, **options)
        except Exception as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray"
            raise EngineError(f"--address: cannot connect to {where}: {_describe(exc)}") from exc
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task_data)
        pending = {remote.remote(tracker.tasks[i].to_dict()): i for i in order}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    index = pending.pop(ref)
                    try:
                        record = ray.get(ref)
                    except Exception as exc:
                        cause = getattr(exc, "cause", None)
                        error = cause if isinstance(cause, BaseException) else exc
                        if tracker.process_failure(index, error):
                            pending[remote.remote(tracker.tasks[index].to_dict())] = index
                    else:
                        tracker.process_success(index, record)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


def run_tasks(
    tasks: Sequence[RunTask],
    *,
    engine: EngineName = "process",
    jobs: int | None = None,
    address: str | None = None,
    retries: int = DEFAULT_RETRIES,
    progress: bool = True,
    desc: str = "runs",
    on_outcome: OutcomeCallback | None = None,
) -> list[TaskOutcome]:
    """Run every task on ``engine``; the outcomes in task order.

    ``jobs``: workers (default :func:`get_default_jobs`; ``process`` with 1 runs in this
    process). ``address``: the Ray cluster (``ray`` only; None starts a local one). A task that
    raises is tried ``retries`` more times, then its outcome carries the error (nothing is
    raised for it). ``on_outcome`` is called in this process as each task ends.
    """
    if engine not in ENGINES:
        raise EngineError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    jobs = get_default_jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise EngineError(f"jobs must be an integer >= 1, got {jobs!r}")
    if address is not None and engine != "ray":
        raise EngineError("--address is for the ray engine only")
    if engine == "ray":
        import_ray()  # the one-line error before any progress output
    bar = make_progress(len(tasks), desc=desc, unit="runs", enabled=progress)
    tracker = _Tracker(tasks, retries, bar, on_outcome)
    order = list(range(len(tasks)))
    try:
        if engine == "ray":
            _run_on_ray(tracker, order, jobs, address)
        elif jobs <= 1 or len(tasks) <= 1:
            _run_in_process(tracker, order)
        else:
            _run_in_pool(tracker, order, jobs)
    finally:
        bar.close()
    return tracker.get_outcomes()


def execute_runs(
    tasks: Sequence[RunTask],
    jobs: int | None,
    progress: bool,
    *,
    desc: str = "compare",
    retries: int = DEFAULT_RETRIES,
) -> list[dict[str, Any]]:
    """Every task's run record in task order (process engine); a task that still fails after
    its ``retries`` raises its error (a comparison needs every run). Runs that write into a
    store folder or fail on their input (replays) pass ``retries=0``: a second attempt would
    only find the folder the first one left."""
    outcomes = run_tasks(tasks, jobs=jobs, progress=progress, desc=desc, retries=retries)
    for outcome in outcomes:
        if outcome.record is None:
            if outcome.exception is not None:
                raise outcome.exception
            raise RuntimeError(outcome.error)  # pragma: no cover - every failure keeps its error
    return [o.record for o in outcomes if o.record is not None]
