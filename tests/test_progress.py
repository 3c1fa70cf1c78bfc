"""Progress of long runs: plain lines on a non-terminal stderr, a bar on a terminal, nothing with
--no-progress (keepersim.progress, used by simulate, compare, replay and export)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepersim import cli
from keepersim.progress import LineProgress, NullProgress, format_elapsed, make_progress
from keepersim.sim.scenario import format_scenario_json, parse_scenario

TINY: dict[str, Any] = {
    "name": "progress_tiny",
    "seed": 3,
    "blocks": 200,
    "epoch_length": 100,
    "expiration_blocks": 10,
    "arrivals_per_block": 0.5,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 700, "miss": [[0, 0.0], [50, 0.9]]},
    ],
}
LINE = re.compile(
    r"^(?P<desc>.+): (?P<n>\d+)/(?P<total>\d+) (?P<unit>\w+) \((?P<pct>\d+)%\), \S+ elapsed$"
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(format_scenario_json(parse_scenario(TINY, "test")))
    return path


@given(total=st.integers(1, 5000), step=st.integers(1, 50), chunk=st.integers(1, 300))
def test_lines_every_step_and_a_last_one(total: int, step: int, chunk: int) -> None:
    stream = io.StringIO()
    bar = LineProgress(total, desc="x", unit="runs", stream=stream, step_pct=step)
    done = 0
    while done < total:
        n = min(chunk, total - done)
        bar.update(n)
        done += n
    bar.close()
    lines = stream.getvalue().splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    pcts = [int(m["pct"]) for m in matches if m]
    counts = [int(m["n"]) for m in matches if m]
    assert counts == sorted(set(counts)) and counts[-1] == total and pcts[-1] == 100
    # never more than one line per step crossed (plus none repeated at the end)
    assert len(lines) <= 100 // step + 1
    # with updates of one unit, every step boundary gets its line
    if chunk == 1 and total >= 100:
        assert len(lines) == len(range(step, 101, step)) + (100 % step != 0)


def test_unknown_total_prints_every_n_units() -> None:
    stream = io.StringIO()
    bar = LineProgress(None, desc="export 0-1", unit="records", stream=stream, every=100)
    for _ in range(25):
        bar.update(10)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "export 0-1: 100 records",
        "export 0-1: 200 records",
        "export 0-1: 250 records",
    ]


def test_make_progress_picks_bar_lines_or_nothing() -> None:
    tty = _Tty()
    bar = make_progress(10, desc="d", unit="blocks", enabled=True, stream=tty)
    assert not isinstance(bar, LineProgress | NullProgress)
    bar.close()
    pipe = io.StringIO()
    assert isinstance(
        make_progress(10, desc="d", unit="runs", enabled=True, stream=pipe), LineProgress
    )
    off = make_progress(10, desc="d", unit="runs", enabled=False, stream=pipe)
    assert isinstance(off, NullProgress)
    off.update(10)
    off.close()
    assert pipe.getvalue() == ""
    assert [format_elapsed(s) for s in (5, 90, 7500)] == ["5s", "1m30s", "2h05m"]


def test_simulate_prints_lines_to_a_non_terminal(tiny: Path, capsys: Any) -> None:
    assert cli.main(["simulate", str(tiny), "--store", "memory", "--policy", "none"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(LINE.match(line) for line in err), err
    assert err[-1].startswith("progress_tiny/none: 200/200 blocks (100%)")


def test_no_progress_prints_nothing(tiny: Path, capsys: Any) -> None:
    argv = ["simulate", str(tiny), "--store", "memory", "--policy", "none", "--no-progress"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().err == ""


def test_compare_prints_run_lines(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    base = ["compare", str(tiny), "--policies", "none", "--seeds", "2", "--store", "memory"]
    base += ["--jobs", "1", "--no-plots", "--out", str(tmp_path / "r")]
    assert cli.main(base) == 0
    err = capsys.readouterr().err.splitlines()
    compare_lines = [line for line in err if line.startswith("compare: ")]
    # 2 seeds x (none, oracle) = 4 runs: a line at each 25%
    assert [line.split(" (")[0] for line in compare_lines] == [
        f"compare: {n}/4 runs" for n in (1, 2, 3, 4)
    ]
    assert cli.main([*base, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_replay_prints_block_lines(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    trace = tmp_path / "trace.jsonl"
    argv = ["simulate", str(tiny), "--store", "memory", "--policy", "gonka", "--no-progress"]
    assert cli.main([*argv, "--trace-out", str(trace)]) == 0
    capsys.readouterr()
    replay = ["replay", str(trace), "--mode", "as-recorded", "--policies", "gonka"]
    replay += ["--store", "memory"]
    cli.main(replay)
    err = capsys.readouterr().err.splitlines()
    assert err and all(LINE.match(line) for line in err), err
    assert err[-1].startswith("replay: ") and "(100%)" in err[-1]
    cli.main([*replay, "--no-progress"])
    assert capsys.readouterr().err == ""
