"""One run as plain JSON-able data, and the function that runs it (inside a worker).

A :class:`RunTask` names everything a run depends on and nothing else: the scenario (a built-in
name, rebuilt from the task's seed, or a scenario's JSON), the policy, the seed, a params
override (``{dotted path: value}``, the rules of a governance entry's ``"set"``), the store kind.
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
)


class TaskError(KeepersimError):
    """Task data that is not a task (a key missing or unknown, a wrong type)."""


@dataclass(frozen=True)
class RunTask:
    """One run. ``scenario``: a built-in name (built with ``seed``) or a scenario's JSON
    (:func:`~keepersim.sim.scenario.dump_scenario`); ``label`` names it in records (default: the
    scenario's name); ``params``: ``{dotted path: value}`` set on the run's default params;
    ``trace``: reserved for what-if runs on a trace (not wired yet: must be None).
    ``initial_params``: whole params the run starts with (``params_to_dict`` JSON; None: the
    run's defaults); ``governance``: ``[height, params JSON]`` pairs sent as governance updates
    (``run_scenario``'s ``governance``). Both are left out of :meth:`to_dict` when unset."""

    scenario: str | dict[str, Any]
    policy: str
    seed: int
    label: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    store: StoreKind = "memory"
    trace: str | None = None
    initial_params: dict[str, Any] | None = None
    governance: list[list[Any]] = field(default_factory=list)

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
        if self.initial_params is not None:
            out["initial_params"] = self.initial_params
        if self.governance:
            out["governance"] = [list(entry) for entry in self.governance]
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
        return cls(
            scenario=scenario,
            policy=str(data.get("policy")),
            seed=seed,
            label=str(data.get("label") or ""),
            params=dict(params),
            store=store,
            trace=data.get("trace"),
            initial_params=initial,
            governance=[list(e) for e in governance],
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
    ``to_dict()`` with ``scenario`` set to the task's label and ``scenario_name`` added.
    ``on_block``: ``run_scenario``'s hook (in-process callers only: it does not ship)."""
    if task.trace is not None:
        raise TaskError("task: what-if runs on a trace are not wired yet ('trace' must be null)")
    scenario = get_task_scenario(task)
    params = compute_task_params(task, scenario)
    governance = [(int(h), params_from_dict(p)) for h, p in task.governance]
    result = run_scenario(
        scenario,
        task.policy,
        seed=task.seed,
        store=task.store,
        params=params,
        governance=governance,
        on_block=on_block,
    )
    record = result.to_dict()
    record["scenario"] = task.get_label()
    record["scenario_name"] = scenario.name
    return record


def run_task_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_task` of a task's JSON-able data (what a worker is given)."""
    return run_task(RunTask.from_dict(data))
