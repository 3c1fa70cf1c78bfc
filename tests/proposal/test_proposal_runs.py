"""A valid proposal: the current-vs-proposed report, --at-height, the tasks behind it."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from keepersim.cli import main
from keepersim.proposal import load_proposal
from keepersim.proposal.compare import (
    ARMS,
    MetricComparison,
    ProposalComparison,
    compare_proposal,
    compute_metric_comparisons,
)
from keepersim.proposal.report import CSV_COLUMNS, format_verdicts
from keepersim.runs import RunTask
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.suite import get_builtin_scenario
from keepersim.testing import run_proposal
from keepersim.types.params import params_from_dict, params_to_dict


def test_a_valid_proposal_writes_the_report(example_proposal, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["proposal", str(example_proposal), "--scenarios", "steady_degraded", "--seeds", "2"]
    status = main([*argv, "--blocks", "150", "--out", str(out), "--no-progress", "--jobs", "1"])
    stdout = capsys.readouterr().out
    assert status == 0
    header = next(line for line in stdout.splitlines() if line.strip().startswith("metric"))
    assert header.split()[:5] == ["metric", "current", "proposed", "diff", "95%"]
    assert "miss_rate (pts)" in stdout
    data = json.loads((out / "proposal.json").read_text())
    miss = next(m for m in data["metrics"] if m["metric"] == "miss_rate")
    assert (
        miss["seeds"] == 2
        and miss["low"] is not None
        and miss["low"] <= miss["diff"] <= miss["high"]
    )
    assert data["verdicts"] and data["verdicts"][-1] in stdout
    assert data["changed_fields"]["steady_degraded"] == [
        "extension_params.cb_miss_threshold_pct: '25' -> '10'"
    ]
    assert [r["arm"] for r in data["runs"]] == list(ARMS) * 2
    rows = list(csv.DictReader((out / "proposal.csv").open()))
    assert tuple(rows[0]) == CSV_COLUMNS and {r["metric"] for r in rows} >= {"miss_rate", "misses"}
    assert (out / "miss_rate.png").stat().st_size > 0


def test_paired_runs_match_direct_runs(example_proposal):
    """Each arm is the run_scenario run of its params on the same seed (same app hash)."""
    proposal = load_proposal(example_proposal)
    report = compare_proposal(proposal, scenarios=["steady_degraded"], seeds=1, blocks=80, jobs=1)
    scenario = get_builtin_scenario("steady_degraded", 1)
    scenario = dataclasses.replace(scenario, blocks=80)
    current = build_params(scenario, "gonka")
    proposed = params_from_dict(params_to_dict(current))
    proposed.extension_params.cb_miss_threshold_pct = 10
    direct = [
        run_scenario(scenario, "gonka", seed=1, store="memory", params=p)
        for p in (current, proposed)
    ]
    assert [r["app_hash"] for r in report.runs] == [d.app_hash for d in direct]
    assert direct[0].app_hash != direct[1].app_hash


def test_task_with_params_and_governance_round_trips():
    scenario = get_builtin_scenario("steady_degraded", 2)
    data = params_to_dict(build_params(scenario, "gonka"))
    task = RunTask(
        "steady_degraded", "gonka", 2, label="s", initial_params=data, governance=[[5, data]]
    )
    assert RunTask.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    plain = RunTask("steady_degraded", "gonka", 2)
    assert set(plain.to_dict()) == {
        "scenario",
        "label",
        "policy",
        "seed",
        "params",
        "store",
        "trace",
    }


def test_at_height_sends_the_update_at_h(example_proposal):
    """Before H + 1 the current params are in force, from H + 1 the proposed ones."""
    result = run_proposal(example_proposal, "steady_degraded", seeds=1, blocks=60, at_height=30)
    current, proposed = result.observations
    assert current.arm == "current" and proposed.arm == "proposed"
    assert [h for h, _ in current.params_changes] == [1]
    assert [h for h, _ in proposed.params_changes] == [1, 31]
    assert proposed.get_params_after(30) == current.get_params_after(60)
    assert proposed.get_params_after(31) == proposed.governance[0][1]
    runs = result.comparison.runs
    assert runs[1]["governance_heights"] == [30] and runs[0]["governance_heights"] == []


def test_at_height_outside_the_run_is_an_error(example_proposal, tmp_path, capsys):
    argv = ["proposal", str(example_proposal), "--scenarios", "steady_degraded", "--blocks", "50"]
    assert main([*argv, "--at-height", "51", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--at-height 51: scenario 'steady_degraded' has blocks 1..50" in capsys.readouterr().err


def _comparison(diffs_by_seed):
    pairs = [("s", {"miss_rate": 0.02}, {"miss_rate": 0.02 + d}) for d in diffs_by_seed]
    return ProposalComparison(
        "t", [], None, "gonka", len(diffs_by_seed), compute_metric_comparisons(pairs)
    )


@pytest.mark.parametrize(
    ("diffs", "verdict"),
    [
        ([0.003, 0.004, 0.0035], "miss_rate: proposed is worse by 0.35 points (95% CI"),
        ([-0.003, -0.004, -0.0035], "miss_rate: proposed is better by 0.35 points"),
        ([0.003, -0.003, 0.0], "s: no significant change at 95%"),
        ([0.003], "s: no significant change at 95% (one seed"),
    ],
)
def test_verdicts(diffs, verdict):
    lines = format_verdicts(_comparison(diffs))
    assert lines[0].startswith(verdict)


def test_paired_difference_and_interval():
    m = _comparison([0.001, 0.002, 0.003]).get("s", "miss_rate")
    assert isinstance(m, MetricComparison)
    assert m.diff == pytest.approx(0.002) and m.current == pytest.approx(0.02)
    # t(0.975, 2) = 4.302653, sd = 0.001
    assert m.high - m.diff == pytest.approx(4.302653 * 0.001 / 3**0.5, rel=1e-5)


def test_a_trace_runs_what_if_under_both_arms(example_proposal, tmp_path, capsys):
    scenario = dataclasses.replace(get_builtin_scenario("steady_degraded", 1), blocks=60)
    trace = tmp_path / "t.jsonl"
    run_scenario(scenario, "gonka", store="memory", trace_out=trace)
    out = tmp_path / "o"
    argv = ["proposal", str(example_proposal), "--trace", str(trace), "--seeds", "2"]
    assert main([*argv, "--at-height", "30", "--out", str(out), "--no-progress"]) == 0
    data = json.loads((out / "proposal.json").read_text())
    assert [(r["scenario"], r["arm"], r["seed"]) for r in data["runs"]] == [
        ("t.jsonl", arm, seed) for seed in (1, 2) for arm in ARMS
    ]
    assert "first_height" not in {m["metric"] for m in data["metrics"]}
    assert "t.jsonl (2 paired seeds)" in capsys.readouterr().out
    assert main([*argv, "--at-height", "61", "--out", str(out), "--no-progress"]) == 2
    assert "--at-height 61: trace 't.jsonl' has blocks 1..60" in capsys.readouterr().err
