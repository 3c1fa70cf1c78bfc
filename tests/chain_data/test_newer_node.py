"""An epoch folder as a newer node serves it (later epochs of the same source): fields
keepersim's vendored v0.2.14 protos lack, in ``params.json`` and in the route answers, and
pagination objects beside the lists. Built from a shipped epoch with only those fields added, so
the fleet must come out as from the unchanged copy; a known field's bad value stays one error
line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mainnet_data import get_epoch_dirs

from keepersim import cli

ROOT = Path(__file__).resolve().parents[2]
BASE = min(
    get_epoch_dirs(),
    key=lambda p: sum(f.stat().st_size for f in p.iterdir()),
)
EPOCH = int(BASE.name.split("_")[1])


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / BASE.name
    shutil.copytree(BASE, target)
    for p in target.iterdir():
        p.chmod(0o644)
    return target


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _build(
    capsys: pytest.CaptureFixture[str], folder: Path, out: Path
) -> tuple[int, str, dict[str, Any]]:
    status = cli.main(["scenarios", "from-chain", str(folder), "--out", str(out)])
    _, err = capsys.readouterr()
    written = out / f"mainnet-epoch-{EPOCH}.json"
    scenario = json.loads(written.read_text()) if status == 0 else {}
    scenario.get("source", {}).pop("files", None)  # the sha256 of the changed files differ
    return status, err, scenario


def test_params_fields_of_a_newer_node_are_left_out_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, expected = _build(capsys, _copy(tmp_path / "plain"), tmp_path / "plain-out")
    folder = _copy(tmp_path / "newer")

    def add(data: dict[str, Any]) -> None:
        params = data["params"]
        params["future_params"] = {"threshold": "3"}
        params["validation_params"]["future_field"] = "7"
        params["poc_params"]["models"][0]["future_flag"] = True

    _edit(folder / "params.json", add)
    status, err, got = _build(capsys, folder, tmp_path / "newer-out")
    assert status == 0, err
    (line,) = [w for w in err.splitlines() if "unknown to keepersim" in w]
    assert line.startswith(f"keepersim: warning: {folder / 'params.json'}: params: 3 field(s)")
    for path in (
        "future_params",
        "validation_params.future_field",
        "poc_params.models[0].future_flag",
    ):
        assert path in line
    assert got == expected


def test_route_answers_with_pagination_and_new_fields_build_the_same_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, expected = _build(capsys, _copy(tmp_path / "plain"), tmp_path / "plain-out")
    folder = _copy(tmp_path / "newer")
    page = {"next_key": None, "total": "0"}
    for name, key in (
        (f"epoch_performance_summary_{EPOCH}.json", "epochPerformanceSummary"),
        (f"excluded_participants_{EPOCH}.json", "items"),
        (f"confirmation_poc_events_{EPOCH}.json", "events"),
    ):

        def add_rows(data: dict[str, Any], key: str = key) -> None:
            data["pagination"] = page
            for row in data.get(key) or []:
                row["future_field"] = "1"

        _edit(folder / name, add_rows)
    for path in folder.glob(f"epoch_group_data_{EPOCH}*.json"):

        def add_group(data: dict[str, Any]) -> None:
            group = data["epoch_group_data"]
            group["future_field"] = {"a": 1}
            for member in group.get("validation_weights") or []:
                member["future_field"] = "2"

        _edit(path, add_group)
    status, err, got = _build(capsys, folder, tmp_path / "newer-out")
    assert status == 0, err
    assert "unknown to keepersim" not in err  # no params field was added
    assert got == expected


def test_a_known_params_field_with_a_bad_value_is_still_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(tmp_path)

    def spoil(data: dict[str, Any]) -> None:
        data["params"]["future_params"] = {}
        data["params"]["validation_params"]["expiration_blocks"] = "soon"

    _edit(folder / "params.json", spoil)
    status = cli.main(["scenarios", "from-chain", str(folder), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert status == 2
    lines = err.splitlines()
    assert all(w.startswith("keepersim: warning:") for w in lines[:-1])
    assert lines[-1].startswith(f"keepersim: error: {folder / 'params.json'}")
    assert "validation_params.expiration_blocks" in lines[-1]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
