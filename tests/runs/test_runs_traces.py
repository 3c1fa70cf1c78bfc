"""Trace runs on the runs engines (keepersim/runs/traces.py): a trace task ships as JSON, and
its record is what the replay gives when called directly, in this process or in a worker pool;
bad task data is refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from keepersim.replay.as_recorded import replay_as_recorded
from keepersim.replay.what_if import replay_what_if
from keepersim.runs import RunTask, execute_runs, run_task
from keepersim.runs.task import TaskError
from keepersim.runs.traces import make_trace_task
from keepersim.sim.generate import generate_scenario
from keepersim.sim.run_loop import run_scenario
from keepersim.types.params import get_default_params


def _without_timing(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: _without_timing(v)
            for k, v in data.items()
            if k not in ("elapsed_seconds", "blocks_per_second")
        }
    if isinstance(data, list):
        return [_without_timing(v) for v in data]
    return data


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = generate_scenario(
        "traces", 3, participants=8, blocks=150, epoch_length=50, degraded_share=0.3
    )
    path = tmp_path_factory.mktemp("traces") / "run.jsonl"
    run_scenario(scenario, "gonka", store="memory", trace_out=path)
    return path


def test_a_trace_task_ships_as_json(trace: Path) -> None:
    governance = [(40, get_default_params())]
    task = make_trace_task(trace, "what-if", ["windowed"], seed=4, governance=governance)
    shipped = json.loads(json.dumps(task.to_dict()))
    assert RunTask.from_dict(shipped) == task
    assert task.get_label() == "run.jsonl" and task.trace == str(trace)


def test_trace_tasks_give_what_the_replays_give(trace: Path) -> None:
    what_if = make_trace_task(trace, "what-if", ["windowed"], seed=4)
    direct = replay_what_if(trace, "windowed", seed=4)
    assert _without_timing(run_task(what_if)) == _without_timing(direct)
    as_recorded = make_trace_task(trace, "as-recorded", ["gonka", "none"], strict=True)
    report = replay_as_recorded(trace, policies=["gonka", "none"], strict=True).to_dict()
    record = run_task(as_recorded)
    assert _without_timing(record) == _without_timing(report)
    assert list(record["policies_shadow"]) == ["gonka", "none"]


def test_a_worker_pool_gives_the_records_of_this_process(trace: Path) -> None:
    tasks = [make_trace_task(trace, "what-if", [p], seed=2) for p in ("none", "windowed")]
    here = execute_runs(tasks, 1, False, retries=0)
    pool = execute_runs(tasks, 2, False, retries=0)
    assert [_without_timing(r) for r in pool] == [_without_timing(r) for r in here]
    assert [r["policy"] for r in pool] == ["none", "windowed"]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"replay": ["what-if"]}, "'replay'"),
        ({"trace": 3}, "'trace'"),
        ({"resume": "yes"}, "'resume'"),
        ({"store_dir": 5}, "'store_dir'"),
    ],
)
def test_bad_task_data_is_refused_naming_the_key(
    trace: Path, change: dict[str, Any], key: str
) -> None:
    data = make_trace_task(trace, "what-if", ["none"]).to_dict() | change
    with pytest.raises(TaskError, match=key):
        RunTask.from_dict(data)


def test_a_bad_replay_task_is_refused(trace: Path) -> None:
    with pytest.raises(TaskError, match="one policy"):
        make_trace_task(trace, "what-if", ["none", "gonka"])
    with pytest.raises(TaskError, match="replay mode"):
        make_trace_task(trace, "sideways", ["none"])
    with pytest.raises(TaskError, match="'colour'"):
        make_trace_task(trace, "as-recorded", ["none"], colour="red")
    task = make_trace_task(trace, "what-if", ["none"])
    bad = RunTask.from_dict(task.to_dict() | {"replay": {"mode": "what-if", "colour": 1}})
    with pytest.raises(TaskError, match="'colour'"):
        run_task(bad)
