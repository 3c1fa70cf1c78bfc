"""One run as plain JSON-able data, and the function that runs it (inside a worker).

A :class:`RunTask` names everything a run depends on: the scenario (a built-in name, rebuilt
from the task's seed, or a scenario's JSON), the policy, the seed, a params override (``{dotted
path: value}``, the rules of a governance entry's ``"set"``), the store kind; and where a run
writes besides its record (``simulate``'s store folder, trace, resume). A task with ``trace``
set replays that trace instead (:mod:`keepersim.runs.traces`).
Engines ship ``task.to_dict()`` (JSON: no pickled objects cross a process or a Ray node) and the
worker builds its chain from it with :func:`run_task_data`, so every engine runs the same bytes
and gives the same app hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from keepersim.chain import STORE_KINDS, Chain, StoreKind
from keepersim.sim.governance import compute_params_with_changes
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, dump_scenario, parse_scenario
from keepersim.sim.suite import get_builtin_scenario
from keepersim.types.errors import KeepersimError
from keepersim.types.params import params_from_dict
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

__all__ = [
    "RunTask",
    "TaskError",
    "compute_task_params",
    "get_task_scenario",
    "make_task",
    "run_task",
    "run_task_data",
]

_KEYS = (
    "scenario",
    "label",
    "policy",
    "seed",
    "params",
    "store",
    "trace",
    "initial_params",
    "governance",
    "shadow",
    "reputation_weighting",
    "store_dir",
    "trace_out",
    "resume",
    "progress",
    "replay",
    "epoch_counts",
)
#: Keys :meth:`RunTask.to_dict` leaves out at their defaults (the JSON of earlier tasks).
_OPTIONAL: dict[str, Any] = {
    "initial_params": None,
    "governance": [],
    "shadow": False,
    "reputation_weighting": False,
    "store_dir": None,
    "trace_out": None,
    "resume": False,
    "progress": False,
    "replay": None,
    "epoch_counts": False,
}


class TaskError(KeepersimError):
    """Task data that is not a task (a key missing or unknown, a wrong type)."""


@dataclass(frozen=True)
class RunTask:
    """One run. ``scenario``: a built-in name (built with ``seed``) or a scenario's JSON
    (:func:`~keepersim.sim.scenario.dump_scenario`); ``label`` names it in records (default: the
    scenario's name); ``params``: ``{dotted path: value}`` set on the run's default params;
    ``trace``: a trace file to replay instead of the scenario (with ``replay``, its options:
    :mod:`keepersim.runs.traces`). ``initial_params``: whole params the run starts with
    (``params_to_dict`` JSON; None: the run's defaults); ``governance``: ``[height, params
    JSON]`` pairs sent as governance updates (``run_scenario``'s ``governance``).
    ``shadow``, ``reputation_weighting``, ``store_dir``, ``trace_out``, ``resume``,
    ``progress``: ``run_scenario``'s arguments (``keepersim simulate``). ``epoch_counts``: the
    record also holds each participant's ``[inference_count, missed_requests]`` of the chain's
    current epoch stats at the run's last block (what ``keepersim fidelity`` compares with an
    epoch's summaries). The optional keys are left out of :meth:`to_dict` when unset."""

    scenario: str | dict[str, Any]
    policy: str
    seed: int
    label: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    store: StoreKind = "memory"
    trace: str | None = None
    initial_params: dict[str, Any] | None = None
    governance: list[list[Any]] = field(default_factory=list)
    shadow: bool = False
    reputation_weighting: bool = False
    store_dir: str | None = None
    trace_out: str | None = None
    resume: bool = False
    progress: bool = False
    replay: dict[str, Any] | None = None
    epoch_counts: bool = False

    def get_label(self) -> str:
        if self.label:
            return self.label
        if isinstance(self.scenario, str):
            return self.scenario
        return str(self.scenario.get("name", "scenario"))

    def to_dict(self) -> dict[str, Any]:
        """The task as JSON-able data (what engines ship)."""
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "label": self.get_label(),
            "policy": self.policy,
            "seed": self.seed,
            "params": dict(self.params),
            "store": self.store,
            "trace": self.trace,
        }
        for key, default in _OPTIONAL.items():
            value = getattr(self, key)
            if value != default:
                out[key] = [list(e) for e in value] if key == "governance" else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunTask:
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise TaskError(f"task: unknown key(s) {', '.join(map(repr, unknown))}")
        scenario = data.get("scenario")
        if not isinstance(scenario, str | dict):
            raise TaskError("task: 'scenario' must be a built-in name or a scenario object")
        seed = data.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TaskError(f"task: 'seed' must be an integer, got {seed!r}")
        store = data.get("store", "memory")
        if store not in STORE_KINDS:
            raise TaskError(f"task: 'store' must be one of {', '.join(STORE_KINDS)}")
        params = data.get("params") or {}
        if not isinstance(params, dict):
            raise TaskError("task: 'params' must be an object {dotted path: value}")
        initial = data.get("initial_params")
        if initial is not None and not isinstance(initial, dict):
            raise TaskError("task: 'initial_params' must be a params object or null")
        governance = data.get("governance") or []
        if not isinstance(governance, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[1], dict) for e in governance
        ):
            raise TaskError("task: 'governance' must be a list of [height, params object]")
        for key in ("shadow", "reputation_weighting", "resume", "progress", "epoch_counts"):
            if not isinstance(data.get(key, False), bool):
                raise TaskError(f"task: {key!r} must be true or false")
        for key in ("store_dir", "trace_out"):
            if not isinstance(data.get(key), str | None):
                raise TaskError(f"task: {key!r} must be a path or null")
        replay = data.get("replay")
        if replay is not None and not isinstance(replay, dict):
            raise TaskError("task: 'replay' must be an object of replay options or null")
        trace = data.get("trace")
        if trace is not None and not isinstance(trace, str):
            raise TaskError("task: 'trace' must be a trace file's path or null")
        return cls(
            scenario=scenario,
            policy=str(data.get("policy")),
            seed=seed,
            label=str(data.get("label") or ""),
            params=dict(params),
            store=store,
            trace=trace,
            initial_params=initial,
            governance=[list(e) for e in governance],
            shadow=bool(data.get("shadow", False)),
            reputation_weighting=bool(data.get("reputation_weighting", False)),
            store_dir=data.get("store_dir"),
            trace_out=data.get("trace_out"),
            resume=bool(data.get("resume", False)),
            progress=bool(data.get("progress", False)),
            replay=None if replay is None else dict(replay),
            epoch_counts=bool(data.get("epoch_counts", False)),
        )


def make_task(
    scenario: Scenario | str,
    policy: str,
    seed: int,
    *,
    label: str = "",
    params: Mapping[str, Any] | None = None,
    store: StoreKind = "memory",
) -> RunTask:
    """A task from a built-in name or a :class:`Scenario` (shipped as its JSON)."""
    data: str | dict[str, Any] = scenario if isinstance(scenario, str) else dump_scenario(scenario)
    return RunTask(data, policy, seed, label=label, params=dict(params or {}), store=store)


def get_task_scenario(task: RunTask) -> Scenario:
    """The task's scenario: a built-in rebuilt from the task's seed, or its JSON parsed."""
    if isinstance(task.scenario, str):
        return get_builtin_scenario(task.scenario, task.seed)
    return parse_scenario(task.scenario, f"task {task.get_label()!r}")


def compute_task_params(task: RunTask, scenario: Scenario) -> ModuleParams | None:
    """The run's params: its default params with the task's override set (None without one:
    the run builds its defaults itself). Raises GovernanceError naming the path or rule."""
    if task.initial_params is not None:
        initial = params_from_dict(task.initial_params)
        if not task.params:
            return initial
    if not task.params:
        return None
    base = build_params(
        scenario, task.policy, params=None if task.initial_params is None else initial
    )
    where = f"{task.get_label()}/{task.policy}/seed {task.seed}: params"
    return compute_params_with_changes(base, task.params, where)


def run_task(task: RunTask, on_block: Callable[[Chain, int], None] | None = None) -> dict[str, Any]:
    """Run the task in this process (in memory by default); its run record: the run's
    ``to_dict()`` with ``scenario`` set to the task's label and ``scenario_name`` added (a
    trace task's: :func:`keepersim.runs.traces.run_trace_task`).
    ``on_block``: ``run_scenario``'s hook (in-process callers only: it does not ship)."""
    if task.trace is not None:
        from keepersim.runs.traces import run_trace_task

        return run_trace_task(task)
    scenario = get_task_scenario(task)
    params = compute_task_params(task, scenario)
    governance = [(int(h), params_from_dict(p)) for h, p in task.governance]
    counts: dict[str, list[int]] = {}
    if task.epoch_counts:
        on_block = _collect_epoch_counts(scenario.blocks, counts, on_block)
    result = run_scenario(
        scenario,
        task.policy,
        seed=task.seed,
        store=task.store,
        store_dir=task.store_dir,
        params=params,
        governance=governance,
        trace_out=task.trace_out,
        progress=task.progress,
        shadow=task.shadow,
        on_block=on_block,
        resume=task.resume,
        reputation_weighting=task.reputation_weighting,
    )
    record = result.to_dict()
    record["scenario"] = task.get_label()
    record["scenario_name"] = scenario.name
    if task.epoch_counts:
        record["epoch_counts"] = counts
    return record


def _collect_epoch_counts(
    last: int, counts: dict[str, list[int]], then: Callable[[Chain, int], None] | None
) -> Callable[[Chain, int], None]:
    """``run_scenario``'s hook that fills ``counts`` at block ``last`` (then calls ``then``)."""

    def on_block(chain: Chain, height: int) -> None:
        if height == last:
            with chain.read() as k:
                for p in k.iterate_participants():
                    stats = p.current_epoch_stats
                    counts[p.address] = [stats.inference_count, stats.missed_requests]
        if then is not None:
            then(chain, height)

    return on_block


def run_task_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_task` of a task's JSON-able data (what a worker is given)."""
    return run_task(RunTask.from_dict(data))
