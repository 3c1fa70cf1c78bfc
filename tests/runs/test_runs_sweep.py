"""keepersim sweep on the process engine: every task a row, baselines shared, resume, retries,
the same app hashes as serial runs."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

import pytest
from sweep_paths import EXPIRY_PATH, WINDOW_PATH

import keepersim.runs.engines as engines
from keepersim.cli import main
from keepersim.runs import RunTask, run_tasks
from keepersim.runs.sweep import SweepError, run_sweep
from keepersim.sim.governance import compute_params_with_changes
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import load_scenario


def _rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "runs.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The task data each in-process run is given (jobs=1 runs in this process)."""
    calls: list[dict[str, Any]] = []
    real = engines.run_task_data

    def counting(data: dict[str, Any]) -> dict[str, Any]:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(engines, "run_task_data", counting)
    return calls


def _sweep(spec: Path, out: Path, **kw: Any) -> Any:
    kw.setdefault("jobs", 1)
    return run_sweep(spec, out, progress=False, stream=io.StringIO(), **kw)


def test_every_task_has_a_row_and_baselines_are_shared(
    write_spec: Any, tmp_path: Path, counted: list[dict[str, Any]]
) -> None:
    spec = write_spec()
    result = _sweep(spec, tmp_path / "out")
    rows = _rows(tmp_path / "out")
    # windowed: 2 values x 2 seeds; none and oracle: once per seed, not per value
    assert len(counted) == result.executed == len(rows) == 4 + 2 + 2
    keys = {(r["policy"], r["seed"], r[WINDOW_PATH]) for r in rows}
    assert keys == {
        *(("windowed", s, v) for s in ("5", "6") for v in ("100", "400")),
        *((b, s, "") for b in ("none", "oracle") for s in ("5", "6")),
    }
    assert all(r["status"] == "ok" and len(r["app_hash"]) == 64 for r in rows)
    assert list(rows[0])[:4] == ["scenario", "policy", "seed", WINDOW_PATH]
    assert list(rows[0])[-1] == "app_hash"
    summary = list(csv.DictReader((tmp_path / "out" / "summary.csv").open()))
    windowed = [r for r in summary if r["policy"] == "windowed"]
    assert sorted(r[WINDOW_PATH] for r in windowed) == ["100", "400"]
    assert all(r["runs"] == "2" and r["oracle_efficiency_mean"] != "" for r in windowed)
    assert any(p.startswith("miss_rate_by_") for p in result.plots)


def test_a_chain_params_path_runs_the_baselines_per_value(
    write_spec: Any, tmp_path: Path, counted: list[dict[str, Any]]
) -> None:
    spec = write_spec(grid={EXPIRY_PATH: [10, 20], WINDOW_PATH: [100, 400]}, seeds=[1])
    _sweep(spec, tmp_path / "out")
    rows = _rows(tmp_path / "out")
    baselines = [
        (r["policy"], r[EXPIRY_PATH], r[WINDOW_PATH]) for r in rows if r["policy"] != "windowed"
    ]
    assert sorted(baselines) == [
        ("none", "10", ""),
        ("none", "20", ""),
        ("oracle", "10", ""),
        ("oracle", "20", ""),
    ]
    assert len(counted) == 4 + 4
    hashes = {(r["policy"], r[EXPIRY_PATH]): r["app_hash"] for r in rows if r["policy"] == "none"}
    assert hashes[("none", "10")] != hashes[("none", "20")]  # the expiry reaches the baseline
    names = [f.name for f in (tmp_path / "out").iterdir()]
    assert any(n.startswith("heatmap_miss_rate_tiny_sweep_windowed_") for n in names)


def test_app_hashes_equal_serial_runs(write_spec: Any, tmp_path: Path, tiny_file: Path) -> None:
    _sweep(write_spec(), tmp_path / "out", jobs=2)
    scenario = load_scenario(tiny_file)
    for row in _rows(tmp_path / "out"):
        changes = {WINDOW_PATH: int(row[WINDOW_PATH])} if row[WINDOW_PATH] else {}
        params = None
        if changes:
            base = build_params(scenario, row["policy"])
            params = compute_params_with_changes(base, changes, "test")
        direct = run_scenario(
            scenario, row["policy"], seed=int(row["seed"]), store="memory", params=params
        )
        assert row["app_hash"] == direct.app_hash, row
        assert int(row["misses"]) == direct.misses


def test_resume_runs_only_the_missing_rows(
    write_spec: Any, tmp_path: Path, counted: list[dict[str, Any]]
) -> None:
    spec = write_spec()
    out = tmp_path / "out"
    _sweep(spec, out)
    first = {(r["policy"], r["seed"], r[WINDOW_PATH]): r["app_hash"] for r in _rows(out)}
    whole = _stable(_rows(out))
    lines = (out / "runs.csv").read_text().splitlines(keepends=True)
    # the last two rows gone and a torn third: what a killed sweep can leave
    (out / "runs.csv").write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
    counted.clear()
    result = _sweep(spec, out, resume=True)
    assert result.executed == len(counted) == 3 and result.skipped == len(first) - 3
    again = {(r["policy"], r["seed"], r[WINDOW_PATH]): r["app_hash"] for r in _rows(out)}
    assert again == first
    assert len(_rows(out)) == len(first)
    assert _stable(_rows(out)) == whole  # every cell but the wall time, as the first sweep


def _stable(rows: list[dict[str, str]]) -> list[tuple[tuple[str, str], ...]]:
    return sorted(tuple(sorted((k, v) for k, v in r.items() if k != "wall_seconds")) for r in rows)


def test_resume_refuses_another_spec_and_a_fresh_run_refuses_a_used_folder(
    write_spec: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    _sweep(write_spec(), out)
    with pytest.raises(SweepError, match="already holds a sweep"):
        _sweep(write_spec(), out)
    with pytest.raises(SweepError, match="another spec"):
        _sweep(write_spec(seeds=[9]), out, resume=True)


def test_a_failed_task_is_retried_once_then_reported(
    write_spec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = engines.run_task_data
    tries: dict[tuple[str, int], int] = {}

    def flaky(data: dict[str, Any]) -> dict[str, Any]:
        key = (data["policy"], data["seed"])
        tries[key] = tries.get(key, 0) + 1
        if data["policy"] == "oracle" and data["seed"] == 5:
            raise RuntimeError("worker lost\nsecond line")
        if data["policy"] == "none" and tries[key] == 1:
            raise RuntimeError("transient")
        return real(data)

    monkeypatch.setattr(engines, "run_task_data", flaky)
    result = _sweep(write_spec(), tmp_path / "out")
    rows = _rows(tmp_path / "out")
    assert result.failed == 1 and len(rows) == result.executed
    failed = [r for r in rows if r["status"] == "failed"]
    assert [(r["policy"], r["seed"], r["attempts"]) for r in failed] == [("oracle", "5", "2")]
    assert failed[0]["error"] == "RuntimeError: worker lost second line"
    nones = [r for r in rows if r["policy"] == "none"]
    assert all(r["status"] == "ok" and r["attempts"] == "2" for r in nones)
    assert tries[("oracle", 5)] == 2


def test_cli_sweep_exit_status_and_files(write_spec: Any, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    status = main(["sweep", str(write_spec()), "--out", str(out), "--jobs", "1", "--no-progress"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "miss rate [95% CI]" in captured.out and "8 runs in" in captured.out
    assert {"runs.csv", "summary.csv", "sweep.json", "table.txt"} <= {p.name for p in out.iterdir()}
    assert main(["sweep", str(write_spec()), "--out", str(out), "--address", "x:1"]) == 2


def test_engines_agree_in_process_and_in_a_pool(tiny_file: Path) -> None:
    scenario = load_scenario(tiny_file)
    from keepersim.runs import make_task

    tasks = [make_task(scenario, p, s) for p in ("none", "gonka") for s in (1, 2)]
    one = run_tasks(tasks, jobs=1, progress=False)
    two = run_tasks(tasks, jobs=2, progress=False)
    assert [o.record["app_hash"] for o in one if o.record] == [
        o.record["app_hash"] for o in two if o.record
    ]
    assert RunTask.from_dict(tasks[0].to_dict()).to_dict() == tasks[0].to_dict()


def test_the_ray_engine_without_ray_is_one_line(
    write_spec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    out = tmp_path / "out"
    assert main(["sweep", str(write_spec()), "--out", str(out), "--engine", "ray"]) == 2
    err = capsys.readouterr().err
    assert err == "keepersim: error: the ray engine needs Ray: pip install 'keepersim[ray]'\n"


def test_short_names_are_unique_suffixes() -> None:
    from keepersim.report.sweep_summary import compute_short_names

    paths = [WINDOW_PATH, "extension_params.health_params.consecutive.timeout_blocks", EXPIRY_PATH]
    assert compute_short_names(paths) == {
        WINDOW_PATH: "max_cooldown_blocks",
        paths[1]: "timeout_blocks",
        EXPIRY_PATH: "expiration_blocks",
    }
    a, b = "extension_params.health_params.windowed.window", "extension_params.x.windowed.window"
    assert compute_short_names([a, b]) == {
        a: "health_params.windowed.window",
        b: "x.windowed.window",
    }


def test_runs_log_failed_rows_wait_for_the_columns_and_torn_lines_are_dropped(
    tmp_path: Path,
) -> None:
    from keepersim.runs.engines import TaskOutcome
    from keepersim.runs.plan import PlannedTask
    from keepersim.runs.results import RunsLog, read_runs

    def planned(policy: str) -> PlannedTask:
        task = RunTask("sparse", policy, 1)
        return PlannedTask(("sparse", policy, "1", ("7",)), task, {WINDOW_PATH: "7"})

    path = tmp_path / "runs.csv"
    log = RunsLog(path, [WINDOW_PATH])
    log.write(planned("gonka"), TaskOutcome(0, planned("gonka").task, None, "E: x", 2))
    assert not path.exists()  # no columns yet: the failed row waits
    record = {"misses": 3, "inferences": 9, "detection_delay": {"median": 4}, "app_hash": "ab"}
    log.write(planned("none"), TaskOutcome(1, planned("none").task, record, None, 1))
    log.close()
    header, rows = read_runs(path)
    assert header[:4] == ["scenario", "policy", "seed", WINDOW_PATH] and header[-1] == "app_hash"
    assert [(r["policy"], r["status"], r["misses"]) for r in rows] == [
        ("gonka", "failed", ""),
        ("none", "ok", "3"),
    ]
    assert rows[1]["detection_delay_median"] == "4"
    with path.open("a") as f:
        f.write("sparse,windowed,1,7,ok")  # torn: no line end
    assert len(read_runs(path)[1]) == 2
    only_failed = RunsLog(tmp_path / "failed.csv", [WINDOW_PATH])
    only_failed.write(planned("gonka"), TaskOutcome(0, planned("gonka").task, None, "E: x", 2))
    only_failed.close()
    assert read_runs(tmp_path / "failed.csv")[0] == [
        "scenario",
        "policy",
        "seed",
        WINDOW_PATH,
        "status",
        "attempts",
        "error",
    ]
