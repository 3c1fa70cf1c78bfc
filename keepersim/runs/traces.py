"""Trace runs: a :class:`~keepersim.runs.task.RunTask` with ``trace`` set replays that trace
(:mod:`keepersim.replay`) instead of running a scenario, on the same engines and progress as
scenario runs (``keepersim replay``, the trace arms of ``keepersim proposal``).

A trace task's ``replay`` options say how: ``mode`` ``"as-recorded"`` (``policy``: the policies
watching in lockstep, comma-separated; the record is the report's JSON) or ``"what-if"``
(``policy`` chooses executors with outcomes drawn from the trace's estimates, paired by
``seed``; the record is the run's JSON), and the replay's other keyword arguments
(:data:`REPLAY_OPTIONS`). ``governance`` is the task's ``[height, params JSON]`` list.

A what-if run estimates the trace first (:func:`get_trace_estimate`); the estimate is kept per
process, so the policies of one replay run in one process estimate the trace once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from keepersim.runs.task import RunTask, TaskError
from keepersim.types.params import params_from_dict, params_to_dict
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

if TYPE_CHECKING:
    from keepersim.replay.estimator import BehaviourEstimator
    from keepersim.trace.records import Header

__all__ = [
    "REPLAY_MODES",
    "REPLAY_OPTIONS",
    "get_trace_estimate",
    "make_trace_task",
    "run_trace_task",
]

REPLAY_MODES: Final = ("as-recorded", "what-if")
#: The replay keyword arguments a trace task may carry (besides ``mode`` and ``estimator``).
REPLAY_OPTIONS: Final = (
    "store_dir",
    "skip_bad",
    "strict",
    "resume",
    "resumable",
    "allow_partial",
    "progress",
)
#: The estimator settings a what-if task may carry (``estimate_trace``'s arguments).
ESTIMATOR_OPTIONS: Final = ("method", "window_blocks", "prior")


def make_trace_task(
    trace: str | os.PathLike[str],
    mode: str,
    policies: Sequence[str],
    *,
    seed: int = 0,
    store: str = "memory",
    governance: Sequence[tuple[int, ModuleParams]] = (),
    estimator: dict[str, Any] | None = None,
    label: str = "",
    **options: Any,
) -> RunTask:
    """A trace task: ``mode`` over ``policies`` (what-if: exactly one), ``options`` from
    :data:`REPLAY_OPTIONS`, ``estimator`` from :data:`ESTIMATOR_OPTIONS` (what-if)."""
    if mode not in REPLAY_MODES:
        raise TaskError(f"task: replay mode must be one of {', '.join(REPLAY_MODES)}")
    if mode == "what-if" and len(policies) != 1:
        raise TaskError("task: a what-if replay runs one policy")
    unknown = sorted(set(options) - set(REPLAY_OPTIONS))
    if unknown:
        raise TaskError(f"task: unknown replay option(s) {', '.join(map(repr, unknown))}")
    replay: dict[str, Any] = {"mode": mode, **options}
    if estimator is not None:
        replay["estimator"] = dict(estimator)
    path = os.fspath(trace)
    return RunTask(
        path,
        ",".join(policies),
        seed,
        label=label or os.path.basename(path),
        store="leveldb" if store == "leveldb" else "memory",
        trace=path,
        governance=[[int(h), params_to_dict(p)] for h, p in governance],
        replay=replay,
    )


@functools.lru_cache(maxsize=2)
def _estimate(
    path: str,
    identity: tuple[int, int, int],
    method: str,
    window_blocks: int,
    prior: tuple[float, float],
    skip_bad: bool,
    allow_partial: bool,
) -> tuple[Header, BehaviourEstimator]:
    from keepersim.replay.estimator import estimate_trace

    return estimate_trace(
        path,
        method=method,
        window_blocks=window_blocks,
        prior=prior,
        skip_bad=skip_bad,
        allow_partial=allow_partial,
    )


def get_trace_estimate(
    trace: str | os.PathLike[str],
    *,
    method: str,
    window_blocks: int,
    prior: tuple[float, float],
    skip_bad: bool = False,
    allow_partial: bool = False,
) -> tuple[Header, BehaviourEstimator]:
    """The trace's header and fitted estimator (:func:`~keepersim.replay.estimator.
    estimate_trace`), kept for the file as it is now (its inode, size and mtime)."""
    path = os.fspath(trace)
    try:
        st = os.stat(path)
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        identity = (0, 0, 0)  # the reader says what is wrong with the path
    return _estimate(
        path,
        identity,
        method,
        window_blocks,
        (float(prior[0]), float(prior[1])),
        skip_bad,
        allow_partial,
    )


def run_trace_task(task: RunTask) -> dict[str, Any]:
    """Run a trace task in this process; its record (see the module doc)."""
    from keepersim.replay.as_recorded import replay_as_recorded
    from keepersim.replay.what_if import replay_what_if

    assert task.trace is not None
    replay = dict(task.replay or {})
    mode = replay.pop("mode", None)
    estimator_settings = replay.pop("estimator", None) or {}
    unknown = sorted(set(replay) - set(REPLAY_OPTIONS))
    if unknown:
        raise TaskError(f"task: unknown replay option(s) {', '.join(map(repr, unknown))}")
    governance = [(int(h), params_from_dict(p)) for h, p in task.governance] or None
    policies = task.policy.split(",")
    if mode == "as-recorded":
        report = replay_as_recorded(
            task.trace, policies=policies, store=task.store, governance=governance, **replay
        )
        return report.to_dict()
    if mode != "what-if":
        raise TaskError(f"task: replay mode must be one of {', '.join(REPLAY_MODES)}")
    unknown = sorted(set(estimator_settings) - set(ESTIMATOR_OPTIONS))
    if unknown:
        raise TaskError(f"task: unknown estimator option(s) {', '.join(map(repr, unknown))}")
    method = str(estimator_settings.get("method", "segments"))
    window_blocks = int(estimator_settings.get("window_blocks", 1000))
    a, b = estimator_settings.get("prior", (1.0, 30.0))
    _, estimator = get_trace_estimate(
        task.trace,
        method=method,
        window_blocks=window_blocks,
        prior=(a, b),
        skip_bad=bool(replay.get("skip_bad", False)),
        allow_partial=bool(replay.get("allow_partial", False)),
    )
    (policy,) = policies
    return replay_what_if(
        task.trace,
        policy,
        seed=task.seed,
        method=method,
        window_blocks=window_blocks,
        prior=(a, b),
        store=task.store,
        governance=governance,
        estimator=estimator,
        **replay,
    )
