"""Fleets built from the chain's recorded epochs (keepersim scenarios from-chain), checked against
the chain's own files: every shipped epoch loads and builds, weights are the sub-groups' (read
from the JSON here, not from keepersim), no per-participant count reaches a weight or the
traffic, the source's sha256 are the files', and bad folders are one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from mainnet_data import EXAMPLES, get_epoch_dirs
from mainnet_data import MAINNET_DATA as DATA

from keepersim import cli
from keepersim.chaindata.devshard_fleet import DEVSHARD_PATH
from keepersim.chaindata.epoch_folder import (
    ChainDataError,
    load_epoch_folder,
    load_epoch_source,
)
from keepersim.chaindata.fleet import (
    NOT_MODELLED,
    build_epoch_scenario,
    compute_miss_schedule,
    compute_trend_shape,
)
from keepersim.runs.sources import resolve_scenarios
from keepersim.sim.scenario import load_scenario
from keepersim.types.epoch_layout import compute_model_file_name

ROOT = Path(__file__).resolve().parents[2]
EPOCH_DIRS = get_epoch_dirs()


def _epoch(folder: Path) -> int:
    return int(folder.name.split("_")[1])


def _read(folder: Path, name: str) -> Any:
    return json.loads((folder / name).read_text())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("folder", EPOCH_DIRS, ids=lambda p: p.name)
def test_every_shipped_epoch_loads_and_builds(folder: Path) -> None:
    epoch = _epoch(folder)
    record = load_epoch_folder(folder)
    scenario = build_epoch_scenario(record)
    group = _read(folder, f"epoch_group_data_{epoch}.json")["epoch_group_data"]
    assert (
        scenario.blocks
        == int(group["last_block_height"]) - int(group["effective_block_height"]) + 1
    )
    assert scenario.epoch_length > scenario.blocks  # one epoch, no boundary inside the run
    # Weights: the sub-groups' own, read from the files here.
    expected: dict[str, dict[str, int]] = {}
    for model in group["sub_group_models"]:
        sub = _read(folder, compute_model_file_name(epoch, model))["epoch_group_data"]
        for member in sub.get("validation_weights") or []:
            if int(member["weight"]) > 0:
                expected.setdefault(member["member_address"], {})[model] = int(member["weight"])
    got = {
        p.address: {m: p.weight for m in p.models} | dict(p.model_weights)
        for p in scenario.participants
    }
    assert got == expected
    # The source names every file of the folder (but metadata.json) with its sha256.
    source = scenario.source or {}
    files = {p.name for p in folder.iterdir() if p.name != "metadata.json"}
    assert set(source["files"]) == files
    for name, digest in source["files"].items():
        assert digest == hashlib.sha256((folder / name).read_bytes()).hexdigest()
    # Exclusions: each recorded one of a fleet member, at its height relative to the epoch.
    excluded = _read(folder, f"excluded_participants_{epoch}.json")["items"]
    offset = int(group["effective_block_height"]) - 1
    assert sorted((e.height, e.address, e.reason) for e in scenario.events) == sorted(
        (max(1, int(x["exclusion_block_height"]) - offset), x["address"], x["reason"])
        for x in excluded
        if x["address"] in expected
    )
    # Miss probabilities: missed / (inference_count + missed), from the summary file.
    rows = _read(folder, f"epoch_performance_summary_{epoch}.json")["epochPerformanceSummary"]
    for row in rows:
        done, missed = int(row["inference_count"]), int(row["missed_requests"])
        spec = next((p for p in scenario.participants if p.address == row["participant_id"]), None)
        if spec is not None and done + missed:
            assert spec.miss == ((0, missed / (done + missed)),)


def test_examples_are_the_recorded_files_unchanged() -> None:
    """The copies under examples/mainnet/ are byte for byte the fetched files (their sha256
    as metadata.json recorded them at fetch time)."""
    for folder in sorted(EXAMPLES.glob("epoch_*")):
        meta = _read(folder, "metadata.json")["files"]
        for path in folder.iterdir():
            if path.name == "metadata.json":
                continue
            assert hashlib.sha256(path.read_bytes()).hexdigest() == meta[path.name]["sha256"]


def _copy_epoch(tmp_path: Path, epoch: int | None = None) -> Path:
    source = EPOCH_DIRS[0] if epoch is None else DATA / f"epoch_{epoch}"
    target = tmp_path / source.name
    shutil.copytree(source, target)
    for p in target.iterdir():
        p.chmod(0o644)
    return target


def test_counts_never_reach_weights_or_traffic(tmp_path: Path) -> None:
    """Permuting inference_count and missed_requests among participants (totals unchanged)
    changes neither a weight nor the arrival rate, nor the model split."""
    folder = _copy_epoch(tmp_path)
    epoch = _epoch(folder)
    before = build_epoch_scenario(load_epoch_folder(folder))
    name = f"epoch_performance_summary_{epoch}.json"
    data = _read(folder, name)
    rows = data["epochPerformanceSummary"]
    counts = [(r["inference_count"], r["missed_requests"]) for r in rows]
    random.Random(7).shuffle(counts)
    for row, (done, missed) in zip(rows, counts, strict=True):
        row["inference_count"], row["missed_requests"] = done, missed
    (folder / name).write_text(json.dumps(data))
    after = build_epoch_scenario(load_epoch_folder(folder))
    assert [(p.address, p.weight, p.model_weights) for p in after.participants] == [
        (p.address, p.weight, p.model_weights) for p in before.participants
    ]
    assert after.arrivals_per_block == before.arrivals_per_block
    assert after.model_traffic == before.model_traffic


@pytest.mark.parametrize(
    "breakage",
    ["missing", "truncated", "other_epoch", "subgroup_missing", "empty_fleet", "fifo", "device"],
)
def test_a_broken_folder_is_one_line_naming_the_file(
    breakage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy_epoch(tmp_path / "in")
    epoch = _epoch(folder)
    summary = folder / f"epoch_performance_summary_{epoch}.json"
    broken = summary
    if breakage == "missing":
        summary.unlink()
    elif breakage == "truncated":
        summary.write_bytes(summary.read_bytes()[: summary.stat().st_size // 2])
    elif breakage == "fifo":  # refused by what it is, never opened (it would hang)
        summary.unlink()
        os.mkfifo(summary)
    elif breakage == "device":  # /dev/zero: refused, never read
        summary.unlink()
        summary.symlink_to("/dev/zero")
    elif breakage == "other_epoch":
        broken = folder / f"excluded_participants_{epoch}.json"
        data = _read(folder, broken.name)
        data["items"].append(
            {
                "address": "gonka1x",
                "epoch_index": str(epoch + 1),
                "exclusion_block_height": "1",
                "reason": "failed_confirmation_poc",
            }
        )
        broken.write_text(json.dumps(data))
    else:
        group = _read(folder, f"epoch_group_data_{epoch}.json")["epoch_group_data"]
        for model in group["sub_group_models"]:
            broken = folder / compute_model_file_name(epoch, model)
            if breakage == "subgroup_missing":
                broken.unlink()
                break
            data = _read(folder, broken.name)
            data["epoch_group_data"]["validation_weights"] = []
            broken.write_text(json.dumps(data))
    out = tmp_path / "out"
    status, _, err = run(capsys, "scenarios", "from-chain", str(folder), "--out", str(out))
    assert status == 2
    assert err.startswith("keepersim: error: ") and err.count("\n") == 1
    assert broken.name in err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written


def test_from_chain_writes_scenarios_that_load(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    epochs = [_epoch(f) for f in EPOCH_DIRS]
    status, text, _ = run(
        capsys, "scenarios", "from-chain", str(DATA), "--out", str(out), "--miss-timing", "bursts"
    )
    assert status == 0, text
    written = sorted(out.iterdir())
    assert [p.name for p in written] == [f"mainnet-epoch-{e}.json" for e in epochs]
    for path in written:
        scenario = load_scenario(path)
        assert scenario.source is not None and scenario.source["miss_timing"] == "bursts"
    # The folder itself is a scenario source: one per epoch, as compare and sweep resolve it.
    assert [s.label for s in resolve_scenarios([str(DATA)])] == [
        f"mainnet-epoch-{e}" for e in epochs
    ]
    status, _, err = run(capsys, "scenarios", "from-chain", str(DATA), "--epochs", "1-2")
    assert status == 2 and "no folder for epoch(s) 1, 2" in err


def test_devshard_epochs_take_their_traffic_from_the_summaries() -> None:
    """Where the summaries count far more inferences than the group's number_of_requests, the
    traffic is the summaries' total; at 2x or more (devshard's epochs) its non-classic share
    runs on the devshard path, below that the scenario says its selection path is not
    modelled; otherwise the group's completed requests plus the misses."""
    for record in load_epoch_source(DATA):
        scenario = build_epoch_scenario(record)
        done = sum(s.inference_count for s in record.summaries)
        requests = scenario.arrivals_per_block * scenario.blocks
        source = scenario.source or {}
        if done >= 2 * record.number_of_requests:
            assert source["selection_path"] == DEVSHARD_PATH
            assert requests == pytest.approx(record.get_recorded_requests())
            assert scenario.devshard is not None
            recorded = record.get_recorded_requests()
            classic = record.number_of_requests * recorded / done
            assert scenario.devshard.share == pytest.approx(1 - classic / recorded, abs=1e-6)
            classic_fleet = build_epoch_scenario(record, selection_path="classic")
            assert classic_fleet.devshard is None
            assert (classic_fleet.source or {})["selection_path"] == NOT_MODELLED
        elif done > 1.1 * record.number_of_requests:
            assert source["selection_path"] == NOT_MODELLED
            assert scenario.devshard is None
            assert requests == pytest.approx(record.get_recorded_requests())
            assert "not modelled" in scenario.description
        else:
            assert source["selection_path"] == "MsgStartInference"
            assert requests == pytest.approx(
                record.number_of_requests * record.get_recorded_requests() / done
            )


@pytest.mark.parametrize("p", [0.0, 0.013, 0.4, 1.0])
def test_bursts_keep_the_expected_misses(p: float) -> None:
    blocks = 15391
    schedule = compute_miss_schedule(p, blocks, "bursts", 3, "gonka1abc")
    assert schedule[0][0] == 0
    assert all(b1 > b0 for (b0, _), (b1, _) in zip(schedule, schedule[1:], strict=False))
    per_block = [[v for b, v in schedule if b <= h][-1] for h in range(1, blocks + 1)]
    assert sum(per_block) / blocks == pytest.approx(p, rel=1e-3, abs=1e-9)
    assert compute_miss_schedule(p, blocks, "bursts", 3, "gonka1abc") == schedule


def test_trend_shape_has_mean_one() -> None:
    shape = compute_trend_shape(39339, 17269, 15391)
    ends = [b for b, _ in shape[1:]] + [15392]
    starts = [1] + [b for b, _ in shape[1:]]
    mean = sum(f * (e - s) for (_, f), s, e in zip(shape, starts, ends, strict=True)) / 15391
    assert mean == pytest.approx(1.0)
    assert shape[0][1] > shape[-1][1]  # traffic falling toward the smaller epoch
    assert compute_trend_shape(0, 10, 100) == [[0, 1.0]]


def test_find_folders_error_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ChainDataError, match="no epoch_N/ folder"):
        load_epoch_source(tmp_path)
