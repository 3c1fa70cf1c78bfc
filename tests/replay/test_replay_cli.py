"""``keepersim replay`` via add_replay_command: report files, table, exit statuses."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from replay_helpers import read_lines, record_trace, write_trace

from keepersim.cli import main
from keepersim.cli.replay import add_replay_command


def test_registers_on_subparsers() -> None:
    parser = argparse.ArgumentParser(prog="keepersim")
    add_replay_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", "t.jsonl", "--policies", "gonka,none", "--seed", "3"])
    assert args.policies == ["gonka", "none"] and args.seed == 3 and callable(args.handler)


def test_as_recorded_writes_report_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, _ = record_trace(tmp_path / "t.jsonl", blocks=120, participants=3, miss={"p0": 0.7})
    out = tmp_path / "out"
    code = main(["replay", str(trace), "--policies", "gonka,none", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "as-recorded" and report["ok"]
    assert set(report["policies_shadow"]) == {"gonka", "none"}
    assert (out / "exclusions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "misses inside" in table and "gonka" in table


def test_mismatch_exit_status(tmp_path: Path) -> None:
    trace, _ = record_trace(tmp_path / "t.jsonl", blocks=50, participants=2)
    lines = read_lines(trace)
    for i, raw in enumerate(lines):
        data = json.loads(raw)
        if data["type"] == "epoch_summary":
            data["summaries"][0]["inference_count"] = "999"
            lines[i] = json.dumps(data)
    write_trace(trace, lines)
    assert main(["replay", str(trace), "--policies", "none"]) == 1


def test_bad_trace_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, _ = record_trace(tmp_path / "t.jsonl", blocks=30, participants=2)
    bad = {"type": "inference", "inference_id": 5, "model": "m", "assigned_to": "p0"}
    write_trace(trace, [*read_lines(trace), json.dumps({**bad, "start_block_height": "29"})])
    assert main(["replay", str(trace)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress lines so far
    assert err.startswith("keepersim: error: ") and "inference.inference_id" in err
    assert main(["replay", str(trace), "--skip-bad", "--policies", "none"]) == 0
    assert main(["replay", str(trace), "--policies", "nope", "--skip-bad"]) == 2


def test_what_if_and_governance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, _ = record_trace(tmp_path / "t.jsonl", blocks=150, participants=3, miss={"p2": 0.6})
    governance = tmp_path / "gov.json"
    governance.write_text(
        json.dumps([{"height": 60, "set": {"params.validation_params.expiration_blocks": "30"}}])
    )
    out = tmp_path / "out"
    args = ["replay", str(trace), "--mode", "what-if", "--policies", "gonka,none", "--seed", "4"]
    args += ["--window-blocks", "50", "--governance", str(governance), "--out", str(out)]
    args += ["--store", "leveldb"]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "what-if" and set(report["runs"]) == {"gonka", "none"}
    assert report["runs"]["gonka"]["seed"] == 4 and "estimator" in report
    assert (out / "stores" / "what-if-gonka").is_dir()
    assert "miss_rate" in capsys.readouterr().out
    governance.write_text(
        json.dumps([{"height": 60, "set": {"params.validation_params.expiration_blocks": 0}}])
    )
    assert main([*args[:-2], "--out", str(tmp_path / "o2")]) == 2


def test_recording_policy_row_is_marked_as_selection_biased(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The policy that recorded the trace shows no misses inside its own exclusions (the
    traffic it kept out was never sent there): the report marks its row and says why."""
    from keepersim import cli
    from keepersim.sim.scenario import format_scenario_json, parse_scenario

    scenario = {
        "name": "bias",
        "seed": 2,
        "blocks": 600,
        "epoch_length": 200,
        "expiration_blocks": 10,
        "arrivals_per_block": 2,
        "participants": [
            {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
            {"address": "b", "weight": 700, "miss": [[0, 0.0], [100, 0.9]]},
            {"address": "c", "weight": 900, "miss": [[0, 0.02]]},
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(format_scenario_json(parse_scenario(scenario, "test")))
    trace = tmp_path / "t.jsonl"
    argv = ["simulate", str(path), "--policy", "gonka", "--store", "memory", "--no-progress"]
    assert cli.main([*argv, "--trace-out", str(trace)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    replay = ["replay", str(trace), "--policies", "gonka,consecutive", "--no-progress"]
    assert main([*replay, "--store", "memory", "--out", str(out)]) == 0
    shadows = json.loads((out / "report.json").read_text())["policies_shadow"]
    gonka, other = shadows["gonka"], shadows["consecutive"]
    assert gonka["is_recording_policy"] and "selection bias" in gonka["selection_bias"]
    assert not other["is_recording_policy"] and other["selection_bias"] is None
    # the bias itself: gonka kept b out, yet nothing it kept out missed; consecutive's did
    assert gonka["excluded_blocks"] > 0 and gonka["misses_inside"] == 0
    assert other["misses_inside"] > 0
    table = capsys.readouterr().out
    assert "gonka *" in table and "consecutive *" not in table
    assert "* gonka recorded this trace" in table
