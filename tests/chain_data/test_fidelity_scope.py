"""What the fidelity check compares, checked against the chain's JSON files read here (not
through keepersim's reader): the recorded totals are the fleet's (the epoch group's members),
what others counted is reported apart; the summaries' inferences beyond ``number_of_requests``
are the devshard hosts' (they also reach ``validated_inferences``, devshard_host_stats.go:114-124
at gonka d8b8e907); and the default traffic profile is the trend between the two recorded
totals, flat where the traffic is the summaries'."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from mainnet_data import get_epoch_dirs

from keepersim.chaindata import fidelity
from keepersim.chaindata.epoch_folder import load_epoch_folder
from keepersim.chaindata.fleet import build_epoch_scenario
from keepersim.sim.scenario import Scenario
from keepersim.types.epoch_layout import compute_model_file_name

ROOT = Path(__file__).resolve().parents[2]
EPOCH_DIRS = get_epoch_dirs()


def _json(folder: Path, name: str) -> Any:
    return json.loads((folder / name).read_text())


def _epoch(folder: Path) -> int:
    return int(folder.name.split("_")[1])


def _fleet(folder: Path) -> set[str]:
    """Members with a weight > 0 in any of the epoch's sub-groups, from the files."""
    epoch = _epoch(folder)
    group = _json(folder, f"epoch_group_data_{epoch}.json")["epoch_group_data"]
    out: set[str] = set()
    for model in group.get("sub_group_models") or []:
        name = compute_model_file_name(epoch, model)
        sub = _json(folder, name)["epoch_group_data"]
        out |= {
            v["member_address"]
            for v in sub.get("validation_weights") or []
            if int(v.get("weight", 0)) > 0
        }
    return out


def _summaries(folder: Path) -> list[dict[str, Any]]:
    name = f"epoch_performance_summary_{_epoch(folder)}.json"
    rows: list[dict[str, Any]] = _json(folder, name)["epochPerformanceSummary"]
    return rows


@pytest.mark.parametrize("folder", EPOCH_DIRS, ids=lambda p: p.name)
def test_recorded_totals_are_the_fleets(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No run needed: the simulated counts are stubbed to 0; the recorded side is what the
    check compares against."""

    def no_run(scenario: Scenario, policy: str, seed: int) -> dict[str, tuple[int, int]]:
        return {p.address: (0, 0) for p in scenario.participants}

    monkeypatch.setattr(fidelity, "run_epoch_counts", no_run)
    summary = fidelity.compute_epoch_fidelity(load_epoch_folder(folder), seeds=1)["summary"]
    fleet = _fleet(folder)
    rows = _summaries(folder)
    inside = [r for r in rows if r["participant_id"] in fleet]
    outside = [r for r in rows if r["participant_id"] not in fleet]
    assert summary["recorded_inferences"] == sum(int(r["inference_count"]) for r in inside)
    assert summary["recorded_misses"] == sum(int(r["missed_requests"]) for r in inside)
    assert summary["recorded_inferences_all"] == sum(int(r["inference_count"]) for r in rows)
    assert summary["recorded_misses_all"] == sum(int(r["missed_requests"]) for r in rows)
    assert summary["recorded_outside_fleet"] == sum(
        int(r["inference_count"]) + int(r["missed_requests"]) for r in outside
    )


@pytest.mark.parametrize("folder", EPOCH_DIRS, ids=lambda p: p.name)
def test_devshard_inferences_also_reach_validated(folder: Path) -> None:
    """The summaries' inferences that number_of_requests does not count are the devshard hosts':
    a settled escrow adds each slot's completed requests to inference_count and (less the
    invalid ones) to validated_inferences (devshard_host_stats.go:114-124 at d8b8e907), while
    the MsgStartInference path validates only a sample. So validated_inferences is at least the
    excess less the invalidated ones, in every epoch (a claim about the chain, checked on its
    record)."""
    epoch = _epoch(folder)
    rows = _summaries(folder)
    group = _json(folder, f"epoch_group_data_{epoch}.json")["epoch_group_data"]
    done = sum(int(r["inference_count"]) for r in rows)
    excess = max(0, done - int(group.get("number_of_requests", 0)))
    assert fidelity.get_devshard_inferences(load_epoch_folder(folder)) == excess
    validated = sum(int(r.get("validated_inferences", 0)) for r in rows)
    invalidated = sum(int(r.get("invalidated_inferences", 0)) for r in rows)
    assert validated >= excess - invalidated


@pytest.mark.parametrize("folder", EPOCH_DIRS, ids=lambda p: p.name)
def test_default_profile_is_the_trend_between_the_recorded_totals(folder: Path) -> None:
    """MsgStartInference traffic ramps geometrically from the previous epoch's requests toward
    this one's (last segment / first segment = (current / previous) ** (1 - 1/segments)); an
    epoch whose traffic is the summaries' total runs flat."""
    epoch = _epoch(folder)
    group = _json(folder, f"epoch_group_data_{epoch}.json")["epoch_group_data"]
    previous = int(group.get("previous_epoch_requests", 0))
    current = int(group.get("number_of_requests", 0))
    scenario = build_epoch_scenario(load_epoch_folder(folder))
    source = scenario.source or {}
    if source["selection_path"] != "MsgStartInference" or not previous or not current:
        assert not scenario.arrival_shape
        assert source["traffic"]["profile"] == "flat" or not previous or not current
        return
    assert source["traffic"]["profile"] == "trend"
    shape = scenario.arrival_shape
    assert shape
    segments = len(shape)
    ratio = shape[-1][1] / shape[0][1]
    expected = (current / previous) ** (1 - 1 / segments)
    assert math.isclose(ratio, expected, rel_tol=0.02)
