"""``keepersim replay`` on a trace that is not whole, as a user runs it (a subprocess): one error
line naming the file, the last whole line and its height, exit 2; ``--allow-partial`` replays
it and the report and table say ``partial: true`` and where the trace ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keepersim.cli", "replay", *args, "--no-progress"],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=120,
    )


def _last_whole_line(raw: bytes) -> tuple[int, int]:
    whole = raw[: raw.rindex(b"\n") + 1]
    data = json.loads(whole.splitlines()[-1])
    key = "start_block_height" if data["type"] == "inference" else "height"
    return whole.count(b"\n"), int(data[key])


def _error_line(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


@pytest.mark.parametrize("inside_a_line", [True, False], ids=["cut-mid-line", "no-closing"])
def test_a_trace_without_its_closing_record_is_one_error_line(
    sim_trace: bytes, tmp_path: Path, inside_a_line: bool
) -> None:
    body = sim_trace[: sim_trace.rindex(b"\n", 0, len(sim_trace) - 1) + 1]
    cut = body[: len(body) * 3 // 5]
    if not inside_a_line:
        cut = cut[: cut.rindex(b"\n") + 1]  # whole lines, the closing record missing
    path = tmp_path / "trace.jsonl"
    path.write_bytes(cut)
    n, height = _last_whole_line(cut)
    line = _error_line(_replay(str(path)))
    assert line.startswith(f"keepersim: error: {path}:{n}: end: missing: ")
    assert f"the trace ends after line {n} (height {height}) without its closing record" in line
    assert ("is cut short" in line) == inside_a_line
    assert "--allow-partial" in line
    assert _error_line(_replay(str(path), "--mode", "what-if")) == line


def test_a_changed_trace_is_refused_by_its_digest(sim_trace: bytes, tmp_path: Path) -> None:
    raw = bytearray(sim_trace)
    i = next(i for i in range(len(raw) // 2, len(raw)) if chr(raw[i]).isdigit())
    raw[i] = ord("1") if raw[i] != ord("1") else ord("2")
    path = tmp_path / "trace.jsonl"
    path.write_bytes(bytes(raw))
    closing = raw.count(b"\n")
    for extra in ([], ["--allow-partial"]):
        line = _error_line(_replay(str(path), *extra))
        assert line.startswith(f"keepersim: error: {path}:{closing}: end.sha256: ")
        assert "the trace was changed after it was written" in line


def test_allow_partial_reports_a_partial_replay(sim_trace: bytes, tmp_path: Path) -> None:
    cut = sim_trace[: len(sim_trace) // 2]
    path = tmp_path / "trace.jsonl"
    path.write_bytes(cut)
    n, height = _last_whole_line(cut)
    recorded_last = int(json.loads(sim_trace.split(b"\n", 1)[0])["last_height"])
    end = {"line": n, "height": height, "recorded_last_height": recorded_last}
    out = tmp_path / "as-recorded"
    run = _replay(str(path), "--allow-partial", "--policies", "gonka,none", "--out", str(out))
    assert run.returncode == 1, run.stderr  # never ok: not a whole replay
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True and report["ok"] is False
    assert report["trace_end"] == end and report["last_height"] == height
    assert run.stdout.startswith("partial: true")
    assert f"last whole line {n} (height {height})" in run.stdout
    out = tmp_path / "what-if"
    run = _replay(str(path), "--allow-partial", "--mode", "what-if", "--out", str(out))
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True and report["trace_end"] == end
    assert all(r["partial"] and r["trace_end"] == end for r in report["runs"].values())
    assert run.stdout.startswith("partial: true")
