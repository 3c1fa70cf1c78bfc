"""compare(): paired runs over seeds, aggregates, files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from keepersim.keeper.selection import SELECTION_BY_REPUTATION, SELECTION_BY_WEIGHT
from keepersim.report.tables import METRICS_DOC_LINE
from keepersim.runs.compare import SPEC_RUN_KEYS, CompareError, compare, order_policies
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import format_scenario_json, load_scenario, parse_scenario

SCENARIO: dict[str, Any] = {
    "name": "tiny_cmp",
    "seed": 5,
    "blocks": 160,
    "epoch_length": 80,
    "expiration_blocks": 15,
    "arrivals_per_block": 2.0,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 600, "miss": [[0, 0.0], [40, 0.9], [120, 0.0]]},
        {"address": "c", "weight": 800, "miss": [[0, 0.3]]},
    ],
}


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(format_scenario_json(parse_scenario(SCENARIO, "test")))
    return path


def test_compare_writes_report_csv_and_plots(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    stream = io.StringIO()
    report = compare(
        [scenario_file], ["gonka"], seeds=2, out_dir=out, jobs=1, progress=False, stream=stream
    )
    assert report["config"]["policies"] == ["none", "gonka", "oracle"]
    assert len(report["runs"]) == 6
    for run in report["runs"]:
        for key in SPEC_RUN_KEYS:
            assert key in run, key
        assert run["scenario"] == "tiny_cmp"
    by = {(r["policy"], r["seed"]): r for r in report["runs"]}
    assert {seed for _, seed in by} == {5, 6}
    for seed in (5, 6):
        assert by[("none", seed)]["requests"] == by[("oracle", seed)]["requests"]
        assert by[("none", seed)]["oracle_efficiency"] == 0.0
        assert by[("oracle", seed)]["oracle_efficiency"] == 1.0
        none, gonka, oracle = (by[(p, seed)]["misses"] for p in ("none", "gonka", "oracle"))
        assert by[("gonka", seed)]["oracle_efficiency"] == pytest.approx(
            (none - gonka) / (none - oracle)
        )
        assert by[("gonka", seed)]["misses_avoided"] == none - gonka
    rows = {r["policy"]: r for r in report["summary"]}
    assert set(rows) == {"none", "gonka", "oracle"}
    gonka_row = rows["gonka"]
    assert gonka_row["runs"] == 2
    assert (
        gonka_row["miss_rate_ci_low"]
        <= gonka_row["miss_rate_mean"]
        <= gonka_row["miss_rate_ci_high"]
    )
    assert gonka_row["oracle_efficiency_mean"] == pytest.approx(
        sum(by[("gonka", s)]["oracle_efficiency"] for s in (5, 6)) / 2
    )
    assert rows["oracle"]["false_exclusion_weight_share_mean"] == 0.0

    table = stream.getvalue()
    assert "miss rate [95% CI]" in table and "gonka" in table

    saved = json.loads((out / "report.json").read_text())
    assert saved["summary"] == report["summary"]
    assert all(key in run for run in saved["runs"] for key in SPEC_RUN_KEYS)
    with (out / "runs.csv").open() as f:
        runs_csv = list(csv.DictReader(f))
    assert len(runs_csv) == 6
    assert {"scenario", "policy", "seed", "miss_rate", "oracle_efficiency", "app_hash"} <= set(
        runs_csv[0]
    )
    with (out / "summary.csv").open() as f:
        summary_csv = list(csv.DictReader(f))
    assert [r["policy"] for r in summary_csv] == ["none", "gonka", "oracle"]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(
        [
            "miss_rate_tiny_cmp.png",
            "oracle_efficiency.png",
            "excluded_timeline_tiny_cmp.png",
            "miss_timeline_tiny_cmp.png",
            "traffic_share_tiny_cmp.png",
        ]
    )
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(report["plots"]) == pngs


def test_compare_in_worker_processes_matches_in_process(scenario_file: Path) -> None:
    kw: dict[str, Any] = {"seeds": 1, "progress": False, "stream": io.StringIO(), "store": "memory"}
    serial = compare([scenario_file], ["gonka"], jobs=1, **kw)
    parallel = compare([scenario_file], ["gonka"], jobs=2, **kw)
    key = [(r["policy"], r["seed"], r["app_hash"], r["misses"]) for r in serial["runs"]]
    assert key == [(r["policy"], r["seed"], r["app_hash"], r["misses"]) for r in parallel["runs"]]


def test_builtin_scenarios_are_rebuilt_per_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    import keepersim.runs.sources as cmp

    built: list[tuple[str, int]] = []

    def fake_builtin(name: str, seed: int = 1) -> Any:
        built.append((name, seed))
        return parse_scenario({**SCENARIO, "name": name, "seed": seed, "blocks": 40}, "fake")

    monkeypatch.setattr(cmp, "get_builtin_scenario", fake_builtin)
    report = compare(
        ["sparse"], ["none"], seeds=2, jobs=1, progress=False, stream=io.StringIO(), store="memory"
    )
    assert sorted(set(built)) == [("sparse", 1), ("sparse", 2)]
    assert report["config"]["policies"] == ["none", "oracle"]
    assert sorted({r["seed"] for r in report["runs"]}) == [1, 2]


def test_compare_rejects_bad_input(scenario_file: Path, tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="unknown policy 'bogus'"):
        compare([scenario_file], ["bogus"], seeds=1, jobs=1, progress=False)
    with pytest.raises(CompareError, match="seeds must be"):
        compare([scenario_file], ["none"], seeds=0)
    with pytest.raises(CompareError, match="neither a built-in"):
        compare([tmp_path / "missing.json"], ["none"], seeds=1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(CompareError, match="missing required key"):
        compare([bad], ["none"], seeds=1)
    assert order_policies(["oracle", "gonka", "none", "gonka"]) == ["none", "gonka", "oracle"]


#: Rates (share columns) of a summary row, each with a ``_ci_low``/``_ci_high`` pair.
RATE_INTERVALS = (
    ("miss_rate_mean", "miss_rate"),
    ("miss_rate_pooled", "miss_rate_pooled"),
    ("degraded_traffic_share_mean", "degraded_traffic_share"),
    ("false_exclusion_weight_share_mean", "false_exclusion_weight_share"),
    ("withheld_weight_share_mean", "withheld_weight_share"),
    ("excluded_weight_share_mean", "excluded_weight_share"),
    ("undetected_share", "undetected_share"),
)


def test_rate_intervals_stay_within_0_1_and_hold_the_estimate(scenario_file: Path) -> None:
    report = compare(
        [scenario_file],
        ["gonka", "consecutive"],
        seeds=2,
        jobs=1,
        progress=False,
        stream=io.StringIO(),
        store="memory",
    )
    for row in report["summary"]:
        for value_key, prefix in RATE_INTERVALS:
            value, low, high = row[value_key], row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"]
            if value is None:
                continue
            assert low is not None and high is not None, (row["policy"], prefix)
            assert 0.0 <= low <= value <= high <= 1.0, (row["policy"], prefix, low, value, high)
    for run in report["runs"]:
        assert 0.0 <= run["miss_rate_ci_low"] <= run["miss_rate"] <= run["miss_rate_ci_high"] <= 1


def test_a_policy_that_never_acted_is_said_so(tmp_path: Path) -> None:
    healthy = {
        **SCENARIO,
        "name": "all_healthy",
        "participants": [
            {"address": "a", "weight": 1000, "miss": [[0, 0.0]]},
            {"address": "b", "weight": 600, "miss": [[0, 0.0]]},
        ],
    }
    path = tmp_path / "healthy.json"
    path.write_text(format_scenario_json(parse_scenario(healthy, "test")))
    stream = io.StringIO()
    out = tmp_path / "r"
    report = compare(
        [path],
        ["consecutive", "gonka"],
        seeds=2,
        jobs=1,
        progress=False,
        stream=stream,
        store="memory",
        out_dir=out,
        plots=False,
    )
    rows = {r["policy"]: r for r in report["summary"]}
    assert rows["consecutive"]["acted"] is False
    assert rows["consecutive"]["inaction"] == (
        "consecutive never opened a breaker: no participant reached 5 consecutive misses "
        "(0 transitions in 2 runs; every number equals none's)"
    )
    assert rows["gonka"]["acted"] is False and "25%" in rows["gonka"]["inaction"]
    assert rows["none"]["acted"] is False and rows["none"]["inaction"] is None
    assert rows["oracle"]["inaction"] is None
    table = (out / "table.txt").read_text()
    assert table == stream.getvalue()
    assert "note: all_healthy: consecutive never opened a breaker" in table
    assert table.rstrip().endswith(METRICS_DOC_LINE) and "docs/metrics.md" in METRICS_DOC_LINE
    # the tiny scenario's gonka acts: no note there
    acted = compare(
        [_tiny(tmp_path)],
        ["gonka"],
        seeds=1,
        jobs=1,
        progress=False,
        stream=io.StringIO(),
        store="memory",
    )
    gonka = next(r for r in acted["summary"] if r["policy"] == "gonka")
    assert gonka["acted"] is True and gonka["inaction"] is None


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_acting.json"
    path.write_text(format_scenario_json(parse_scenario(SCENARIO, "test")))
    return path


def test_reputation_weighting_reaches_every_run_in_workers(scenario_file: Path) -> None:
    """Worker processes get the option (RunTask): each run equals run_scenario with it."""
    kw: dict[str, Any] = {"seeds": 1, "progress": False, "stream": io.StringIO(), "store": "memory"}
    weighted = compare([scenario_file], ["gonka"], jobs=2, reputation_weighting=True, **kw)
    plain = compare([scenario_file], ["gonka"], jobs=2, **kw)
    scenario = load_scenario(scenario_file)
    for run in weighted["runs"]:
        assert run["selection"] == SELECTION_BY_REPUTATION
        direct = run_scenario(
            scenario, run["policy"], seed=run["seed"], store="memory", reputation_weighting=True
        )
        assert run["app_hash"] == direct.app_hash
    assert {r["selection"] for r in plain["runs"]} == {SELECTION_BY_WEIGHT}
    by_policy = {r["policy"]: r["app_hash"] for r in plain["runs"]}
    assert (
        by_policy["none"] != next(r for r in weighted["runs"] if r["policy"] == "none")["app_hash"]
    )  # this fleet's reputations differ, so the rule changes the draws


@pytest.mark.parametrize(
    ("weighting", "rule", "words"),
    [
        (False, SELECTION_BY_WEIGHT, "by weight alone, as upstream"),
        (True, SELECTION_BY_REPUTATION, "by weight x reputation (the fork's PR #8"),
    ],
)
def test_report_states_what_every_run_includes(
    scenario_file: Path, tmp_path: Path, weighting: bool, rule: str, words: str
) -> None:
    out = tmp_path / "rep"
    stream = io.StringIO()
    report = compare(
        [scenario_file],
        ["none"],
        seeds=1,
        out_dir=out,
        jobs=1,
        progress=False,
        stream=stream,
        store="memory",
        plots=False,
        reputation_weighting=weighting,
    )
    config = report["config"]
    assert config["selection"] == rule
    assert config["sprt"].startswith("off except in sprt runs (")
    assert config == json.loads((out / "report.json").read_text())["config"]
    first = (out / "table.txt").read_text().splitlines()[0]
    assert first == config["baselines"] == stream.getvalue().splitlines()[0]
    assert words in first and "SPRT deactivation off except in sprt runs" in first
