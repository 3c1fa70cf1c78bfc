"""``keepersim export --aggregate`` against the stand-in mainnet node (tests/standin/mainnet.py:
the shared epochs 247-252 as its state, their inferences pruned): the folder it writes is the
shared data's, file for file; a plain export of a pruned epoch points to ``--aggregate``; an
epoch the node keeps nothing of stops in one line naming the route and the epoch; a stopped or
killed export resumes at the same pinned height."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from export_kill import run_export_until_killed
from standin.chain_node import ChainHistory, StandinNode
from standin.conftest import chain_history, mainnet_history  # noqa: F401
from standin.mainnet import MAINNET_DATA

from keepersim.cli import main
from keepersim.export.aggregate import PROGRESS_FILE, export_aggregates, get_block_time
from keepersim.export.export_run import ExportError, ExportOptions
from keepersim.types.epoch_layout import compute_model_file_name

FAST = ExportOptions(backoff_base=0.001, backoff_cap=0.004, timeout=10.0, jitter=0.0)
#: Written by the collector of the shared data, not a route's answer (README: left out).
NOT_A_ROUTE = "epoch_group_data_full.json"


class Stop(Exception):
    """Stands for a crash after a file was written."""


@pytest.fixture
def mainnet_node(mainnet_history: ChainHistory) -> Iterator[StandinNode]:  # noqa: F811
    node = StandinNode(mainnet_history).start()
    yield node
    node.stop()


def shared(epoch: int) -> Path:
    return MAINNET_DATA / f"epoch_{epoch}"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["export", *args, "--no-progress"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_same_as_shared(out: Path, epoch: int, node_url: str) -> None:
    """Every file of the shared folder, as the same JSON (and the same bytes where the shared
    file is printed as the layout prints: indent 2, sorted keys); metadata.json as the shared
    one but for the timestamps and the node it names."""
    ours, theirs = out / f"epoch_{epoch}", shared(epoch)
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    for path in theirs.iterdir():
        if path.name == "metadata.json":
            continue
        raw = path.read_bytes()
        mine = (ours / path.name).read_bytes()
        assert json.loads(mine) == json.loads(raw), path.name
        if raw.startswith(b"{\n"):
            assert mine == raw, path.name
    meta = json.loads((ours / "metadata.json").read_text())
    recorded = json.loads((theirs / "metadata.json").read_text())
    assert set(recorded) <= set(meta)
    assert (meta["epoch"], meta["mode"]) == (recorded["epoch"], recorded["mode"]) == (epoch, "live")
    assert meta["node_url"] == node_url
    expected = [e for e in recorded["endpoints"] if e["file"] != NOT_A_ROUTE]
    got = [{"file": e["file"], "status": e["status"]} for e in meta["endpoints"]]
    # the order of the later collector (2026-05-15: epochs 247, 249, 251, 252); the earlier
    # one (248, 250) listed its files otherwise
    assert (
        got == expected
        if recorded["endpoints"][0]["file"] == "params.json"
        else (sorted(got, key=str) == sorted(expected, key=str))
    )
    assert set(meta["files"]) == set(recorded["files"]) - {NOT_A_ROUTE}
    for name, entry in meta["files"].items():
        old = recorded["files"][name]
        assert entry["path"] == f"epoch_{epoch}/{name}" and old["path"].endswith(entry["path"])
        if (theirs / name).read_bytes().startswith(b"{\n"):
            assert (entry["sha256"], entry["size_bytes"]) == (old["sha256"], old["size_bytes"])
    assert meta["pinned_height"] == 3905677 and meta["latest_epoch"] == 252


# --------------------------------------------------------------------------------------------
# The key test: the shared layout, file for file
# --------------------------------------------------------------------------------------------


def test_aggregate_export_reproduces_the_shared_epochs(
    mainnet_node: StandinNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "agg"
    status, stdout, err = run_cli(
        ["--aggregate", "--node", mainnet_node.url, "--epochs", "249-250", "--out", str(out)],
        capsys,
    )
    assert status == 0, err
    result = json.loads(stdout)
    assert result["ok"] and result["epochs_written"] == [249, 250]
    assert result["files_written"] == 14 and result["files_resumed"] == 0
    # every request pinned to the answer height of the first epoch_info
    pinned = [r for r in mainnet_node.requests if r.rpc not in (None, "EpochInfo")]
    assert pinned and {r.height_header for r in pinned} == {"3905677"}
    assert mainnet_node.counts["Params"] == 1  # one answer for every epoch's params.json
    for epoch in (249, 250):
        assert_same_as_shared(out, epoch, mainnet_node.url)
    assert not (out / PROGRESS_FILE).exists()
    # the metadata names each file's route and URL; the block time is null: the node serves no
    # blocks/{height} (the SDK's route, 501 from the stand-in's gateway)
    meta = json.loads((out / "epoch_249" / "metadata.json").read_text())
    assert meta["block_time"] is None
    kimi = compute_model_file_name(249, "moonshotai/Kimi-K2.6")
    entry = next(e for e in meta["endpoints"] if e["file"] == kimi)
    assert entry["url"].endswith("/epoch_group_data/249?model_id=moonshotai%2FKimi-K2.6")


def test_rerun_of_a_complete_export_fetches_nothing_but_the_pin(
    mainnet_node: StandinNode, tmp_path: Path
) -> None:
    out = tmp_path / "agg"
    export_aggregates(mainnet_node.url, (251, 251), out, options=FAST)
    before = {p.name: p.read_bytes() for p in (out / "epoch_251").iterdir()}
    mainnet_node.reset_counts()
    again = export_aggregates(mainnet_node.url, (251, 251), out, options=FAST)
    assert again.epochs_resumed == [251] and again.files_written == 0
    assert set(mainnet_node.counts) <= {"EpochInfo", "<unrouted>"}
    assert {p.name: p.read_bytes() for p in (out / "epoch_251").iterdir()} == before
    # another node's folder is refused, not mixed
    with pytest.raises(ExportError, match="holds the answers of node"):
        export_aggregates(mainnet_node.api_url, (251, 251), out, options=FAST)


# --------------------------------------------------------------------------------------------
# Errors in one line
# --------------------------------------------------------------------------------------------


def test_plain_export_of_a_pruned_epoch_suggests_aggregate(
    mainnet_node: StandinNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.jsonl"
    status, _, err = run_cli(
        ["--node", mainnet_node.url, "--epochs", "249-250", "--out", str(out)], capsys
    )
    assert status == 1 and not out.exists()
    # The node runs v0.2.12: reading its params warns of the fields the upgrades filled.
    assert all(w.startswith("keepersim: warning:") for w in err.splitlines()[:-1])
    line = err.splitlines()[-1]
    assert line.startswith("keepersim: error: epochs 249-250: the node has pruned")
    assert "the earliest exportable epoch is 251" in line
    assert "keepersim export --aggregate --epochs 249-250" in line


def test_an_epoch_the_node_keeps_nothing_of_is_one_line(
    mainnet_node: StandinNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "agg"
    status, stdout, err = run_cli(
        ["--aggregate", "--node", mainnet_node.url, "--epochs", "246-246", "--out", str(out)],
        capsys,
    )
    assert status == 1
    (line,) = err.splitlines()
    assert line == (
        "keepersim: error: epoch 246: the node does not serve "
        "/productscience/inference/inference/epoch_group_data/246 at height 3905677 (HTTP 404, "
        "gRPC code 5): it keeps no such record of that epoch"
    )
    assert json.loads(stdout)["ok"] is False
    assert not (out / "epoch_246" / "metadata.json").exists()


def test_epochs_beyond_the_latest_and_bad_out(
    mainnet_node: StandinNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_cli(
        ["--aggregate", "--node", mainnet_node.url, "--epochs", "252-253", "--out", str(tmp_path)],
        capsys,
    )
    assert status == 1 and "beyond the node's latest epoch 252" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status, _, err = run_cli(
        ["--aggregate", "--node", mainnet_node.url, "--epochs", "250", "--out", str(blocker)],
        capsys,
    )
    assert status == 2 and err.count("\n") == 1 and "--out" in err and "expected a folder" in err
    (tmp_path / "agg").mkdir()
    (tmp_path / "agg" / "epoch_250").write_text("x")  # an epoch folder's name taken
    mainnet_node.reset_counts()
    status, _, err = run_cli(
        [
            "--aggregate",
            "--node",
            mainnet_node.url,
            "--epochs",
            "250",
            "--out",
            str(tmp_path / "agg"),
        ],
        capsys,
    )
    assert status == 2 and "epoch_250" in err and not mainnet_node.counts


# --------------------------------------------------------------------------------------------
# Other nodes: an older one, keepersim serve's routes
# --------------------------------------------------------------------------------------------


def test_older_node_without_the_events_route(
    mainnet_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A node before v0.2.8 lacks confirmation_poc_events (501, gRPC code 12): the file is left
    out and metadata.json says so; everything else is written."""
    node = StandinNode(mainnet_history, version="v0.2.6").start()
    try:
        result = export_aggregates(node.url, (250, 250), tmp_path, options=FAST)
    finally:
        node.stop()
    assert result.ok and result.unimplemented == {"250": ["confirmation_poc_events_250.json"]}
    meta = json.loads((tmp_path / "epoch_250" / "metadata.json").read_text())
    statuses = {e["file"]: e["status"] for e in meta["endpoints"]}
    assert statuses.pop("confirmation_poc_events_250.json") == "unimplemented"
    assert set(statuses.values()) == {"ok"}
    assert not (tmp_path / "epoch_250" / "confirmation_poc_events_250.json").exists()


def test_keepersim_made_node_aggregates_every_epoch(
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The default stand-in (a keepersim run; latest epoch 4, threshold 2): epochs 1-2 are
    pruned for a plain export, and --aggregate writes them with the groups' models."""
    node = StandinNode(chain_history).start()
    try:
        result = export_aggregates(node.url, (0, 4), tmp_path, options=FAST)
    finally:
        node.stop()
    assert result.ok and result.epochs_written == [0, 1, 2, 3, 4]
    latest = chain_history.latest
    for epoch in range(5):
        folder = tmp_path / f"epoch_{epoch}"
        models = [g.model_id for g in latest.epoch_groups if g.epoch_index == epoch and g.model_id]
        names = {compute_model_file_name(epoch, m) for m in models}
        assert names <= {p.name for p in folder.iterdir()}
        summary = json.loads((folder / f"epoch_performance_summary_{epoch}.json").read_text())
        expected = [s for s in latest.summaries if s.epoch_index == epoch]
        assert len(summary["epochPerformanceSummary"]) == len(expected)
    meta0 = json.loads((tmp_path / "epoch_0" / "metadata.json").read_text())
    skipped = [e for e in meta0["endpoints"] if e["status"] == "skipped"]
    assert [e["file"] for e in skipped] == ["excluded_participants_0.json"]


def test_get_block_time_reads_the_sdk_block_header() -> None:
    time_text = "2026-05-15T10:12:09.123456789Z"
    assert get_block_time({"block": {"header": {"time": time_text}}}) == time_text
    assert get_block_time({"block": None, "sdk_block": {"header": {"time": time_text}}}) == (
        time_text
    )
    assert get_block_time({"block": {}}) is None
    assert get_block_time([]) is None


# --------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_after", [1, 4, 8])
def test_stopped_export_resumes_at_the_same_height(
    mainnet_node: StandinNode, tmp_path: Path, stop_after: int
) -> None:
    out = tmp_path / "agg"
    written: list[tuple[int, str]] = []

    def crash(epoch: int, name: str) -> None:
        written.append((epoch, name))
        if len(written) >= stop_after:
            raise Stop(name)

    one = dataclasses.replace(FAST, concurrency=1)
    with pytest.raises(Stop):
        export_aggregates(mainnet_node.url, (249, 250), out, options=one, on_file=crash)
    assert (out / PROGRESS_FILE).exists()
    assert not (out / "epoch_250" / "metadata.json").exists()
    pin = json.loads((out / PROGRESS_FILE).read_text())["pin_height"]
    mainnet_node.reset_counts()
    resumed = export_aggregates(mainnet_node.url, (249, 250), out, options=one)
    # one worker: epoch 249's 7 files, its metadata, then epoch 250's; a complete epoch is
    # skipped whole, the files of the unfinished one are kept
    assert resumed.epochs_resumed == ([249] if stop_after > 7 else [])
    assert resumed.files_resumed + 7 * len(resumed.epochs_resumed) == stop_after
    assert resumed.pinned_height == pin
    assert "EpochInfo" not in mainnet_node.counts  # the pin is the progress file's
    assert {r.height_header for r in mainnet_node.requests} == {str(pin)}
    for epoch in (249, 250):
        assert_same_as_shared(out, epoch, mainnet_node.url)
    assert not (out / PROGRESS_FILE).exists()


def answers(folder: Path) -> list[Path]:
    """The files written whole (not a writer's hidden temporary file)."""
    return (
        [p for p in folder.glob("*.json") if not p.name.startswith(".")] if folder.is_dir() else []
    )


class SlowNode(StandinNode):
    """Each answer 30 ms late, so that a process can be killed in the middle of an export."""

    def process_request(self, method: str, raw_path: str, headers: Any) -> Any:
        time.sleep(0.03)
        return super().process_request(method, raw_path, headers)


def test_killed_process_resumes(mainnet_history: ChainHistory, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "agg"
    node = SlowNode(mainnet_history).start()
    url = node.url
    try:
        argv = ["--aggregate", "--node", node.url, "--epochs", "249-250", "--out", str(out)]
        folder = out / "epoch_249"
        run_export_until_killed([*argv, "--concurrency", "1"], lambda: len(answers(folder)) >= 3)
        kept = len(answers(out / "epoch_249"))
        assert kept >= 3 and not (out / "epoch_249" / "metadata.json").exists()
        result = export_aggregates(node.url, (249, 250), out, options=FAST)
    finally:
        node.stop()
    assert result.files_resumed == kept
    for epoch in (249, 250):
        assert_same_as_shared(out, epoch, url)


def test_height_pins_an_earlier_snapshot(
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``--height`` pins every answer there (the latest epoch is the one at that height); an
    unfinished export keeps its own pin and refuses another ``--height``."""
    height = chain_history.heights[2]
    at = chain_history.get_snapshot_at(height)
    assert at is not None
    node = StandinNode(chain_history).start()
    try:
        pinned = dataclasses.replace(FAST, height=height)
        result = export_aggregates(node.url, (1, 2), tmp_path / "a", options=pinned)
        assert result.pinned_height == height and result.latest_epoch == at.effective_epoch
        assert {r.height_header for r in node.requests if r.rpc not in (None, "EpochInfo")} == {
            str(height)
        }
        meta = json.loads((tmp_path / "a" / "epoch_2" / "metadata.json").read_text())
        assert (meta["pinned_height"], meta["latest_epoch"]) == (height, at.effective_epoch)
        with pytest.raises(ExportError, match="beyond the node's latest epoch"):
            export_aggregates(node.url, (1, 3), tmp_path / "b", options=pinned)
        (tmp_path / "c").mkdir()
        state = {"version": 1, "node": node.url, "pin_height": height + 1}
        (tmp_path / "c" / PROGRESS_FILE).write_text(json.dumps(state))
        with pytest.raises(ExportError, match=f"pinned at height {height + 1}; rerun"):
            export_aggregates(node.url, (1, 2), tmp_path / "c", options=pinned)
    finally:
        node.stop()
