"""Sweep spec validation: every bad spec is one line naming the file, the key and the rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sweep_paths import EXPIRY_PATH, WINDOW_PATH

from keepersim.cli import main
from keepersim.runs.spec import SpecError, is_baseline_neutral, is_path_for_policy, load_spec


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        ({"bogus": 1}, "bogus", "unknown key"),
        ({"scenarios": []}, "scenarios", "non-empty list"),
        ({"scenarios": ["no_such_thing"]}, "scenarios", "neither a built-in scenario"),
        ({"policies": ["nope"]}, "policies", "unknown policy 'nope'"),
        ({"seeds": 0}, "seeds", "integer >= 1"),
        ({"seeds": [1, 1]}, "seeds", "listed twice"),
        ({"seeds": [1, "x"]}, "seeds[1]", "integer >= 0"),
        ({"grid": []}, "grid", "expected an object"),
        (
            {"grid": {"extension_params.nope": [1]}},
            "grid['extension_params.nope']",
            "no field 'nope'",
        ),
        ({"grid": {"health_params.window": [1]}}, "grid['health_params.window']", "has no field"),
        (
            {"grid": {"extension_params.health_params": [1]}},
            "grid['extension_params.health_params']",
            "is a message (HealthParams)",
        ),
        (
            {"grid": {"extension_params.health_params.policy": ["gonka"]}},
            "grid['extension_params.health_params.policy']",
            "'policies' axis",
        ),
        ({"grid": {WINDOW_PATH: []}}, f"grid[{WINDOW_PATH!r}]", "non-empty list"),
        ({"grid": {WINDOW_PATH: [100, 100]}}, f"grid[{WINDOW_PATH!r}]", "listed twice"),
        ({"grid": {WINDOW_PATH: [{"a": 1}]}}, f"grid[{WINDOW_PATH!r}][0]", "number, string"),
        ({"grid": {WINDOW_PATH: [100, -3]}}, f"grid[{WINDOW_PATH!r}][1]", "breaks rule"),
        ({"grid": {EXPIRY_PATH: ["soon"]}}, f"grid[{EXPIRY_PATH!r}][0]", "expiration_blocks"),
        ({"traces": ["t.jsonl"]}, "traces", "not wired into sweeps yet"),
        ({"traces": "t.jsonl"}, "traces", "list of trace files"),
    ],
)
def test_bad_spec_names_the_key_and_rule(
    write_spec: Any, overrides: dict[str, Any], key: str, rule: str
) -> None:
    path = write_spec(**overrides)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}") or f"{path}: {key}" in message, message
    assert rule in message
    assert "\n" not in message


def test_bad_spec_exits_2_with_one_line_before_any_work(
    write_spec: Any, tmp_path: Path, capsys: Any
) -> None:
    path = write_spec(grid={WINDOW_PATH: [100, -3]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("keepersim: error: ") and "grid[" in err
    assert not (out / "runs.csv").exists()


def test_invalid_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text('{"scenarios": [\n')
    with pytest.raises(SpecError, match=r"spec.json: invalid JSON at line 2"):
        load_spec(path)


def test_a_grid_point_is_checked_as_a_whole(write_spec: Any) -> None:
    """Each value alone is valid; together initial > max breaks the rule."""
    initial = "extension_params.health_params.windowed.initial_cooldown_blocks"
    path = write_spec(grid={initial: [10, 300], WINDOW_PATH: [100, 400]})
    with pytest.raises(SpecError, match=r"grid point .*initial_cooldown_blocks=300.*breaks rule"):
        load_spec(path)


def test_baseline_neutral_paths() -> None:
    assert is_baseline_neutral(WINDOW_PATH)
    assert is_baseline_neutral("extension_params.cb_miss_threshold_pct")
    assert not is_baseline_neutral(EXPIRY_PATH)
    assert not is_baseline_neutral("extension_params.health_params.shadow")
    assert not is_baseline_neutral("extension_params.reputation_weighting")


def test_seeds_list_and_scenario_next_to_spec(write_spec: Any, tmp_path: Path) -> None:
    spec = load_spec(write_spec(seeds=[7, 3], scenarios=["tiny.json", "sparse"]))
    assert [s.label for s in spec.scenarios] == ["tiny_sweep", "sparse"]
    assert spec.scenarios[0].get_run_seeds(spec.seeds) == [7, 3]
    counted = load_spec(write_spec(seeds=2, scenarios=["tiny.json", "sparse"]))
    assert counted.scenarios[0].get_run_seeds(counted.seeds) == [5, 6]  # the file's seed + i
    assert counted.scenarios[1].get_run_seeds(counted.seeds) == [1, 2]  # a built-in's 1..N
    assert json.loads((tmp_path / "spec.json").read_text())["seeds"] == 2


def test_a_policys_own_params_reach_that_policy_alone() -> None:
    trin = "extension_params.health_params.trin_additive.window_blocks"
    assert is_path_for_policy(WINDOW_PATH, "windowed")
    assert not is_path_for_policy(WINDOW_PATH, "gonka")
    assert not is_path_for_policy(WINDOW_PATH, "trin-additive")
    assert is_path_for_policy(trin, "trin-additive") and not is_path_for_policy(trin, "windowed")
    for policy in ("gonka", "windowed", "sprt", "none", "oracle"):  # the chain's reach everyone
        assert is_path_for_policy(EXPIRY_PATH, policy)
    assert is_path_for_policy("extension_params.health_params.shadow", "gonka")
    assert not is_path_for_policy(WINDOW_PATH, "none")
    assert is_path_for_policy("extension_params.cb_miss_threshold_pct", "gonka")


def test_other_policies_run_once_across_a_windowed_grid(write_spec: Any) -> None:
    from keepersim.runs.plan import plan_tasks

    spec = load_spec(
        write_spec(policies=["gonka", "windowed"], seeds=[1], grid={WINDOW_PATH: [800, 1600, 3200]})
    )
    by_policy: dict[str, list[dict[str, str]]] = {}
    for planned in plan_tasks(spec):
        by_policy.setdefault(planned.task.policy, []).append(planned.cells)
    assert [c[WINDOW_PATH] for c in by_policy["windowed"]] == ["800", "1600", "3200"]
    for policy in ("gonka", "none", "oracle"):
        assert by_policy[policy] == [{WINDOW_PATH: ""}]
