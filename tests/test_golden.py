"""Golden outputs (scripts/golden.py): a few cheap built-in runs still equal their committed
golden records, and the comparison that ``golden.py check`` reports with is right."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from file_modules import load_file_module
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_FILE = ROOT / "tests" / "golden" / "builtin-seed1.json"
# The cheapest built-ins (sparse: 0.3 requests per block), under three policy families.
CHEAP_RUNS = [("sparse", "none"), ("sparse", "gonka"), ("sparse", "sprt"), ("sparse", "windowed")]


golden = load_file_module(ROOT / "scripts" / "golden.py", "golden_script")


@pytest.fixture(scope="module")
def golden_runs() -> dict[str, Any]:
    runs: dict[str, Any] = golden.load_golden(GOLDEN_FILE)["runs"]
    return runs


def test_golden_file_covers_every_builtin_scenario_and_policy(golden_runs: dict[str, Any]) -> None:
    expected = {golden.get_run_key(s, p) for s, p in golden.get_pairs(None, None)}
    assert set(golden_runs) == expected


def test_every_golden_record_pins_gas(golden_runs: dict[str, Any]) -> None:
    """Gas (docs/metrics.md, "Gas") is part of every record, so a cheap run below pins it."""
    for key, record in golden_runs.items():
        assert record["gas_total"] == sum(
            v for f, v in record.items() if f.startswith("gas_by_step.")
        ), key


@pytest.mark.parametrize(("scenario", "policy"), CHEAP_RUNS)
def test_cheap_builtin_run_equals_its_golden_record(
    scenario: str, policy: str, golden_runs: dict[str, Any]
) -> None:
    key = golden.get_run_key(scenario, policy)
    record = golden.compute_run(scenario, policy)
    diffs = golden.compute_differences({key: golden_runs[key]}, {key: record})
    assert diffs == {}, "behaviour changed (re-record with `make golden` if intended):\n" + (
        golden.compute_report(diffs)
    )


def _record(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"app_hash": "ab" * 32, "misses": 140, "miss_rate": 0.0387}
    return {**base, **changes}


def test_an_unchanged_run_passes() -> None:
    assert golden.compute_differences({"s/p": _record()}, {"s/p": _record()}) == {}
    assert golden.compute_report({}) == ""


def test_a_changed_metric_is_reported_old_to_new() -> None:
    diffs = golden.compute_differences({"s/p": _record()}, {"s/p": _record(misses=141)})
    assert diffs == {"s/p": [("misses", 140, 141)]}
    report = golden.compute_report(diffs)
    assert "s/p" in report and "misses" in report and "140 -> 141" in report


def test_floats_are_compared_exactly() -> None:
    diffs = golden.compute_differences(
        {"s/p": _record()}, {"s/p": _record(miss_rate=0.0387 + 1e-15)}
    )
    assert [f for f, _, _ in diffs["s/p"]] == ["miss_rate"]


def test_an_ignored_field_is_not_reported_and_others_still_are() -> None:
    old = {"s/p": _record(**{"detection_delay.median": 5.0})}
    new = {"s/p": _record(app_hash="cd" * 32, **{"detection_delay.median": 6.0})}
    assert golden.compute_differences(old, new, ignore=["app_hash", "detection_delay"]) == {}
    diffs = golden.compute_differences(old, new, ignore=["app_hash"])
    assert diffs == {"s/p": [("detection_delay.median", 5.0, 6.0)]}


def test_missing_runs_and_fields_are_reported() -> None:
    diffs = golden.compute_differences(
        {"a/p": _record(), "b/p": _record()}, {"b/p": _record(extra=1), "c/p": _record()}
    )
    assert diffs == {
        "a/p": [("<run>", "present", None)],
        "b/p": [("extra", None, 1)],
        "c/p": [("<run>", None, "present")],
    }
    assert "(absent) -> 1" in golden.compute_report(diffs)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
records = st.dictionaries(st.text(min_size=1, max_size=8), scalars, max_size=8)


@given(records, st.data())
def test_exactly_the_changed_field_is_reported(record: dict[str, Any], data: st.DataObject) -> None:
    assert golden.compute_differences({"r": record}, {"r": json.loads(json.dumps(record))}) == {}
    if not record:
        return
    field = data.draw(st.sampled_from(sorted(record)))
    value = data.draw(scalars.filter(lambda v: json.dumps(v) != json.dumps(record[field])))
    diffs = golden.compute_differences({"r": record}, {"r": {**record, field: value}})
    assert diffs == {"r": [(field, record[field], value)]}
    assert golden.compute_differences({"r": record}, {"r": {**record, field: value}}, [field]) == {}


def test_the_record_flattens_digests_lists_and_drops_wall_clock_fields() -> None:
    run = {
        "app_hash": "ab",
        "wall_seconds": 1.5,
        "inferences_per_second": 9.0,
        "blocks_per_second": 3.0,
        "detection_delay": {"count": 2, "median": 4.0},
        "timeline": [{"start": 1, "misses": 0}],
    }
    record = golden.compute_golden_record(run)
    assert record == {
        "app_hash": "ab",
        "detection_delay.count": 2,
        "detection_delay.median": 4.0,
        "timeline.len": 1,
        "timeline.sha256": golden.compute_digest([{"misses": 0, "start": 1}]),
    }
    changed = golden.compute_golden_record({**run, "timeline": [{"start": 1, "misses": 1}]})
    assert changed["timeline.sha256"] != record["timeline.sha256"]


def test_check_exits_1_and_names_the_changed_fields(
    tmp_path: Path, golden_runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    data = golden.load_golden(GOLDEN_FILE)
    key = golden.get_run_key("sparse", "none")
    tampered = {**golden_runs[key], "misses": golden_runs[key]["misses"] + 1}
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({**data, "runs": {key: tampered}}), encoding="utf-8")
    argv = ["check", "--golden", str(path), "--jobs", "1", "--scenarios", "sparse"]
    assert golden.main([*argv, "--policies", "none"]) == 1
    out = capsys.readouterr().out
    assert key in out and "misses" in out and "app_hash" not in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["check", "--golden", "/nonexistent/g.json"], "--golden: cannot read"),
        (["check", "--scenarios", "nope"], "--scenarios: unknown built-in scenario 'nope'"),
        (["check", "--policies", "nope"], "--policies: unknown policy 'nope'"),
        (["check", "--ignore", "no_such_field"], "--ignore: 'no_such_field' names no field"),
        (["record", "--out", "/proc/x/y.json"], "--out: cannot write"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert golden.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_a_file_that_is_not_golden_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "g.json"
    bad.write_text('{"runs": {}}', encoding="utf-8")
    assert golden.main(["check", "--golden", str(bad)]) == 2
    assert "not a golden file" in capsys.readouterr().err
    bad.write_text("{", encoding="utf-8")
    assert golden.main(["check", "--golden", str(bad)]) == 2
    assert "invalid JSON at line 1" in capsys.readouterr().err
