"""The comparison report made from run records alone (no run): pairing, aggregates, files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.report.compare import (
    ComparedRuns,
    compute_compare_report,
    format_compare_table,
    write_compare_report,
)
from keepersim.report.sweep_summary import compute_sweep_summary, format_sweep_table
from keepersim.sim.run_genesis import build_params, compute_run_mechanisms
from keepersim.sim.suite import get_builtin_scenario

SCENARIO = get_builtin_scenario("sparse", 1)
POLICIES = ["none", "gonka", "oracle"]


def make_record(policy: str, seed: int, misses: int, inferences: int) -> dict[str, Any]:
    """A run record with every key the report reads (values that do not matter kept plain)."""
    return {
        "scenario": "s",
        "policy": policy,
        "seed": seed,
        "inferences": inferences,
        "misses": misses,
        "miss_rate": misses / inferences,
        "degraded_periods": 1,
        "undetected_periods": 0,
        "never_readmitted": 0,
        "degraded_traffic_share": 0.0,
        "false_exclusion_weight_share": 0.0,
        "withheld_weight_share": 0.0,
        "excluded_weight_share": 0.0,
        "fallback_selections": 0,
        "panic_selections": 0,
        "declines": 0,
        "unserved_requests": 0,
        "unassigned_requests": 0,
        "transitions": 1,
        "traffic_weight_distance": 0.0,
        "wall_seconds": 0.5,
        "inferences_per_second": 2.0 * inferences,
        "participants": [
            {"address": "a", "assigned": inferences, "detection_delays": [3], "recovery_delays": []}
        ],
    }


def make_runs(misses: list[tuple[int, int, int]], inferences: int = 1000) -> ComparedRuns:
    """Seeds 1.. with (none, gonka, oracle) misses each."""
    records = [
        make_record(policy, seed, m, inferences)
        for seed, row in enumerate(misses, start=1)
        for policy, m in zip(POLICIES, row, strict=True)
    ]
    return ComparedRuns(
        scenarios=["s"],
        policies=POLICIES,
        seeds=len(misses),
        store="memory",
        jobs=1,
        mechanisms=compute_run_mechanisms(SCENARIO),
        records=records,
        wall_seconds=1.25,
        policy_params={("s", "gonka"): build_params(SCENARIO, "gonka")},
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000)),
        min_size=1,
        max_size=4,
    )
)
def test_runs_are_paired_on_their_seed(misses: list[tuple[int, int, int]]) -> None:
    report = compute_compare_report(make_runs(misses))
    by = {(r["policy"], r["seed"]): r for r in report["runs"]}
    for seed, (none, gonka, oracle) in enumerate(misses, start=1):
        run = by[("gonka", seed)]
        assert run["misses_avoided"] == none - gonka
        expected = (none - gonka) / (none - oracle) if none > oracle else None
        assert run["oracle_efficiency"] == expected
    rows = {row["policy"]: row for row in report["summary"]}
    assert list(rows) == POLICIES
    total = sum(gonka for _, gonka, _ in misses)
    assert rows["gonka"]["miss_rate_pooled"] == total / (1000 * len(misses))
    assert rows["gonka"]["runs"] == len(misses)
    assert rows["none"]["acted"] is False and rows["oracle"]["inaction"] is None


def test_config_and_table_come_from_the_runs() -> None:
    runs = make_runs([(10, 5, 1), (12, 9, 2)])
    report = compute_compare_report(runs)
    assert report["config"] == {
        "scenarios": ["s"],
        "policies": POLICIES,
        "seeds": 2,
        "store": "memory",
        "jobs": 1,
        **runs.mechanisms,
        "baselines": report["config"]["baselines"],
    }
    assert report["wall_seconds"] == 1.25
    table = format_compare_table(report)
    assert table.splitlines()[0] == report["config"]["baselines"]
    assert [line.split()[1] for line in table.splitlines()[4:7]] == POLICIES


def test_the_files_hold_the_report(tmp_path: Path) -> None:
    report = compute_compare_report(make_runs([(10, 5, 1), (12, 9, 2)]))
    table = format_compare_table(report)
    write_compare_report(report, table, tmp_path, plots=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "report.json",
        "runs.csv",
        "summary.csv",
        "table.txt",
    ]
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert (tmp_path / "table.txt").read_text() == table + "\n"
    with (tmp_path / "runs.csv").open(newline="") as f:
        runs = list(csv.DictReader(f))
    assert [(r["policy"], r["seed"], r["misses"]) for r in runs] == [
        (r["policy"], str(r["seed"]), str(r["misses"])) for r in report["runs"]
    ]
    assert "participants" not in runs[0]
    with (tmp_path / "summary.csv").open(newline="") as f:
        assert [r["policy"] for r in csv.DictReader(f)] == POLICIES


def test_withheld_weight_is_aggregated_and_shown_apart_from_false_exclusion() -> None:
    runs = make_runs([(10, 5, 1), (12, 9, 2)])
    for record in runs.records:
        if record["policy"] == "gonka":
            record["false_exclusion_weight_share"] = 0.01
            record["withheld_weight_share"] = 0.1 + 0.02 * record["seed"]  # 12% and 14%
    report = compute_compare_report(runs)
    rows = {row["policy"]: row for row in report["summary"]}
    assert rows["gonka"]["withheld_weight_share_mean"] == pytest.approx(0.13)
    assert rows["gonka"]["false_exclusion_weight_share_mean"] == pytest.approx(0.01)
    low, high = (rows["gonka"][f"withheld_weight_share_ci_{end}"] for end in ("low", "high"))
    assert low == pytest.approx(0.12) and high == pytest.approx(0.14)
    assert rows["none"]["withheld_weight_share_mean"] == 0.0
    lines = format_compare_table(report).splitlines()
    head = lines[2]
    assert "false excl." in head and "withheld" in head
    gonka = next(line for line in lines if line.split()[1:2] == ["gonka"])
    assert "13.00%" in gonka and "1.00%" in gonka


def test_the_sweep_table_shows_withheld_weight() -> None:
    header = ["scenario", "policy", "seed", "status", "misses", "withheld_weight_share"]
    rows = [
        {"scenario": "s", "policy": "trin", "seed": str(seed), "status": "ok", "misses": "3"}
        | {"withheld_weight_share": str(value)}
        for seed, value in ((1, 0.02), (2, 0.04))
    ]
    summary = compute_sweep_summary(header, rows, [])
    assert summary[0]["withheld_weight_share_mean"] == pytest.approx(0.03)
    table = format_sweep_table(summary, []).splitlines()
    assert "withheld" in table[0]
    assert "3.00%" in table[2]
