"""``keepersim compare`` on both selection paths (issue 33 item 5): every policy on every
built-in scenario and every shipped mainnet epoch with the devshard path (few blocks, one seed
each, for speed); ``--selection-path both`` labels; the CLI's flags; from-chain fleets of
devshard epochs build with the devshard path."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from mainnet_data import MAINNET_DATA, get_mainnet_data_dir

from keepersim.chaindata.devshard_fleet import DEVSHARD_PATH
from keepersim.chaindata.fleet import load_epoch_scenarios
from keepersim.runs.compare import compare, run_compare
from keepersim.runs.sources import CompareError, resolve_scenarios
from keepersim.sim.devshard_path import compute_path_scenario
from keepersim.sim.scenario import Scenario
from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios
from keepersim.types.policies import DEVSHARD_LIMITER, RUN_POLICIES

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = 120


def _short(s: Scenario, blocks: int = BLOCKS) -> Scenario:
    """``s`` cut to its first ``blocks`` blocks (events and governance beyond dropped)."""
    return dataclasses.replace(
        s,
        blocks=min(blocks, s.blocks),
        events=tuple(e for e in s.events if e.height <= blocks),
        arrival_shape=tuple((b, f) for b, f in s.arrival_shape if b <= blocks),
    )


def _mainnet_epochs() -> list[Scenario]:
    folder = MAINNET_DATA
    return load_epoch_scenarios(folder)


def test_every_policy_runs_on_every_builtin_and_epoch_on_the_devshard_path() -> None:
    scenarios = [_short(get_builtin_scenario(n)) for n in list_builtin_scenarios()]
    scenarios += [_short(s, 60) for s in _mainnet_epochs()]
    runs = run_compare(
        scenarios,
        list(RUN_POLICIES),
        1,
        store="memory",
        progress=False,
        jobs=1,
        selection_path="devshard",
    )
    assert len(runs.records) == len(scenarios) * len(list(RUN_POLICIES))
    for record in runs.records:
        assert record["devshard_requests"] == record["requests"], record["scenario"]


def test_both_paths_label_each_scenario_twice_and_classic_has_no_devshard_metrics() -> None:
    scenario = _short(get_builtin_scenario("overload_pushback"), 200)
    report = compare(
        [scenario],
        ["gonka", DEVSHARD_LIMITER],
        1,
        store="memory",
        progress=False,
        jobs=1,
        plots=False,
        stream=io.StringIO(),
        selection_path="both",
        slot_filter=True,
    )
    labels = {r["scenario"] for r in report["runs"]}
    assert labels == {"overload_pushback@classic", "overload_pushback@devshard"}
    for r in report["runs"]:
        devshard = r["scenario"].endswith("@devshard")
        assert ("devshard_requests" in r) == devshard


def test_compute_path_scenario() -> None:
    s = get_builtin_scenario("sparse")
    assert compute_path_scenario(s, "scenario") is s
    assert compute_path_scenario(s, "classic") is s
    devshard = compute_path_scenario(s, "devshard", slot_filter=True)
    assert devshard.devshard is not None and devshard.devshard.share == 1.0
    assert devshard.devshard.slot_filter
    mixed = compute_path_scenario(devshard, "mixed")
    assert mixed.devshard is not None and mixed.devshard.share == 0.5
    assert mixed.devshard.slot_filter  # the other keys are kept
    assert compute_path_scenario(mixed, "classic").devshard is None
    with pytest.raises(CompareError, match="selection path"):
        resolve_scenarios(["sparse"], selection_path="sideways")


def test_devshard_epochs_build_on_the_devshard_path() -> None:
    folder = get_mainnet_data_dir()
    if folder is None:
        pytest.skip("shared/data/gonka-mainnet not found beside the checkout")
    by_epoch = {int(str((s.source or {})["epoch"])): s for s in load_epoch_scenarios(folder)}
    for epoch in (251, 252):
        s = by_epoch[epoch]
        assert (s.source or {})["selection_path"] == DEVSHARD_PATH
        assert s.devshard is not None and 0.5 < s.devshard.share <= 1.0
    for epoch in (247, 249, 250):
        assert by_epoch[epoch].devshard is None
    classic = load_epoch_scenarios(folder, [252], selection_path="classic")[0]
    assert classic.devshard is None


def test_from_chain_writes_the_devshard_key_unless_classic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from keepersim import cli

    folder = get_mainnet_data_dir()
    if folder is None:
        pytest.skip("shared/data/gonka-mainnet not found beside the checkout")
    for path, expected in (("auto", True), ("classic", False)):
        out = tmp_path / path
        argv = ["scenarios", "from-chain", str(folder), "--epochs", "252", "--out", str(out)]
        assert cli.main([*argv, "--selection-path", path]) == 0
        data = json.loads((out / "mainnet-epoch-252.json").read_text())
        assert ("devshard" in data) == expected
    capsys.readouterr()
