"""Runs killed with a real SIGKILL and resumed with ``--resume`` end exactly as uninterrupted ones
(app hash, every metric of the report, trace bytes); SIGTERM cleans up like Ctrl-C (exit 143).

Kill points are reproducible: ``KEEPERSIM_TEST_KILL_AT=<height>:<phase>`` makes the run SIGKILL
itself just before a block's commit (``pre``) or just after it (``post``), heights drawn from a
seeded RNG, the very first block and the last ones included; one more kill comes from outside at
a random instant. Each chain of kills resumes the same store again and again.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runs import read_stable_report, run_keepersim

from keepersim.sim.generate import generate_scenario
from keepersim.sim.scenario import format_scenario_json
from keepersim.store.checkpoint import KILL_AT_ENV
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import TraceError

BLOCKS = 500


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small fleet with capacity, outages and short epochs: every kind of pending state."""
    scenario = generate_scenario(
        "resume",
        7,
        participants=24,
        blocks=BLOCKS,
        epoch_length=120,
        arrivals_per_block=3.0,
        degraded_share=0.2,
        outage_share=0.1,
        capacity=3,
        latency=(1, 6),
        expiration_blocks=30,
    )
    path = tmp_path_factory.mktemp("resume") / "scenario.json"
    path.write_text(format_scenario_json(scenario), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(scenario_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, bytes]:
    """The uninterrupted run's report and trace."""
    folder = tmp_path_factory.mktemp("reference")
    done = run_keepersim(
        "simulate",
        str(scenario_file),
        "--policy",
        "windowed",
        "--out",
        str(folder / "out.json"),
        "--trace-out",
        str(folder / "trace.jsonl"),
    )
    assert done.returncode == 0, done.stderr
    trace = (folder / "trace.jsonl").read_bytes()
    # Whole: its closing record counts the lines before it and holds their SHA-256.
    body = trace[: trace.rindex(b"\n", 0, len(trace) - 1) + 1]
    assert json.loads(trace[len(body) :]) == {
        "type": "end",
        "lines": body.count(b"\n"),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return read_stable_report(folder / "out.json"), trace


def _simulate_args(scenario: Path, folder: Path, *extra: str) -> list[str]:
    return [
        "simulate",
        str(scenario),
        "--policy",
        "windowed",
        "--store-dir",
        str(folder / "store"),
        "--out",
        str(folder / "out.json"),
        "--trace-out",
        str(folder / "trace.jsonl"),
        *extra,
    ]


def _draw_kill_chains() -> list[list[str]]:
    rng = random.Random(20261201)
    middle = sorted(rng.sample(range(2, BLOCKS - 1), 4))
    return [
        ["1:pre", f"{middle[0]}:post", f"{middle[2]}:pre"],
        [f"{middle[1]}:pre", f"{middle[3]}:post", f"{BLOCKS}:post"],
    ]


@pytest.mark.parametrize("chain", _draw_kill_chains(), ids=lambda c: "+".join(c))
def test_simulate_killed_and_resumed_ends_as_an_uninterrupted_run(
    chain: list[str], scenario_file: Path, reference: tuple[Any, bytes], tmp_path: Path
) -> None:
    args = _simulate_args(scenario_file, tmp_path)
    for i, point in enumerate(chain):
        run = run_keepersim(*args, *(["--resume"] if i else []), env={KILL_AT_ENV: point})
        assert run.returncode == -signal.SIGKILL, (point, run.stderr)
        assert not (tmp_path / "out.json").exists()
        with pytest.raises(TraceError):  # the killed run's trace is never taken for a whole one
            list(iterate_trace(tmp_path / "trace.jsonl"))
    done = run_keepersim(*args, "--resume")
    assert done.returncode == 0, done.stderr
    report, trace = reference
    assert read_stable_report(tmp_path / "out.json") == report
    assert (tmp_path / "trace.jsonl").read_bytes() == trace


def test_simulate_killed_from_outside_at_a_random_instant_resumes(
    scenario_file: Path, reference: tuple[Any, bytes], tmp_path: Path
) -> None:
    """SIGKILL from outside, as soon as the trace has grown past a random size (mid-run, at
    whatever instant of a block the process is in)."""
    report, trace = reference
    threshold = random.Random(5).randrange(len(trace) // 10, len(trace) // 2)
    args = _simulate_args(scenario_file, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "keepersim.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out = tmp_path / "trace.jsonl"
    deadline = time.monotonic() + 60
    while not (out.exists() and out.stat().st_size > threshold):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    done = run_keepersim(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert read_stable_report(tmp_path / "out.json") == report
    assert out.read_bytes() == trace


@pytest.mark.parametrize("policy", ["trin-additive", "trin-multiplicative"])
def test_a_resumed_run_spends_the_gas_of_an_uninterrupted_one(
    policy: str, scenario_file: Path, tmp_path: Path
) -> None:
    """These policies keep an index of their log in memory between blocks, which a restart
    loses and rebuilds from the store: the rebuild must not change the gas (docs/metrics.md,
    "Gas"), nor anything else."""
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    whole.mkdir()
    resumed.mkdir()
    done = run_keepersim(*_simulate_args(scenario_file, whole, "--policy", policy))
    assert done.returncode == 0, done.stderr
    args = _simulate_args(scenario_file, resumed, "--policy", policy)
    killed = run_keepersim(*args, env={KILL_AT_ENV: f"{BLOCKS // 2}:post"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = run_keepersim(*args, "--resume")
    assert done.returncode == 0, done.stderr
    report = read_stable_report(resumed / "out.json")
    assert report["gas_total"] > 0 and report["policy"] == policy
    assert report == read_stable_report(whole / "out.json")


def test_resume_refuses_a_store_of_other_inputs(scenario_file: Path, tmp_path: Path) -> None:
    args = _simulate_args(scenario_file, tmp_path)
    killed = run_keepersim(*args, env={KILL_AT_ENV: "40:post"})
    assert killed.returncode == -signal.SIGKILL
    other = run_keepersim(*args, "--resume", "--seed", "99")
    assert other.returncode == 2
    assert "other inputs" in other.stderr and "Traceback" not in other.stderr
    fresh = run_keepersim(*args)
    assert fresh.returncode == 2
    assert "--resume" in fresh.stderr and "Traceback" not in fresh.stderr


def test_sigterm_removes_the_temporary_store_and_exits_143(
    scenario_file: Path, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # A run far longer than the test waits (the SIGTERM ends it): a loaded machine must not
    # let it finish before the signal arrives.
    long_run = json.loads(scenario_file.read_text("utf-8"))
    long_run["blocks"] = 100 * BLOCKS
    long_file = tmp_path / "long.json"
    long_file.write_text(json.dumps(long_run), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "keepersim.cli", "simulate", str(long_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    deadline = time.monotonic() + 60
    while not any(tmp.glob("keepersim-run-*/chain/CURRENT")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert list(tmp.iterdir()) == []


REPLAY_POLICIES = "gonka,windowed"


def _replay_args(trace: Path, folder: Path) -> list[str]:
    return [
        "replay",
        str(trace),
        "--policies",
        REPLAY_POLICIES,
        "--store",
        "leveldb",
        "--store-dir",
        str(folder / "stores"),
        "--out",
        str(folder / "out"),
    ]


def _replay_report(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "out" / "report.json").read_text("utf-8"))
    for key in ("elapsed_seconds", "blocks_per_second"):
        data["stats"].pop(key)
    return data


def test_replay_killed_and_resumed_ends_as_an_uninterrupted_replay(
    reference: tuple[Any, bytes], tmp_path: Path
) -> None:
    """Kills before and after a lane's commit, the first lane ahead of the second included."""
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(reference[1])
    whole = tmp_path / "whole"
    done = run_keepersim(*_replay_args(trace, whole))
    assert done.returncode == 0, done.stderr
    rng = random.Random(7)
    middle = sorted(rng.sample(range(2, BLOCKS - 1), 3))
    points = [
        "1:post-gonka",
        f"{middle[0]}:pre-windowed",
        f"{middle[1]}:post-gonka",
        f"{middle[2]}:post-windowed",
        f"{BLOCKS}:pre-gonka",
    ]
    folder = tmp_path / "killed"
    args = _replay_args(trace, folder)
    for i, point in enumerate(points):
        run = run_keepersim(*args, *(["--resume"] if i else []), env={KILL_AT_ENV: point})
        assert run.returncode == -signal.SIGKILL, (point, run.stderr)
    done = run_keepersim(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert _replay_report(folder) == _replay_report(whole)
    other = run_keepersim(*args, "--resume", "--strict")
    assert other.returncode == 2 and "other inputs" in other.stderr


def _what_if_report(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "out" / "report.json").read_text("utf-8"))
    for run in data["runs"].values():
        run["stats"].pop("elapsed_seconds")
    return data


def test_what_if_replay_killed_and_resumed_ends_as_an_uninterrupted_one(
    reference: tuple[Any, bytes], tmp_path: Path
) -> None:
    """Kills in the first policy's run (which a resume finishes) and in the second's."""
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(reference[1])
    whole = tmp_path / "whole"
    done = run_keepersim(*_replay_args(trace, whole), "--mode", "what-if")
    assert done.returncode == 0, done.stderr
    rng = random.Random(8)
    middle = sorted(rng.sample(range(2, BLOCKS - 1), 3))
    points = [
        "1:pre-gonka",
        f"{middle[0]}:post-gonka",
        f"{BLOCKS}:post-gonka",
        f"{middle[1]}:pre-windowed",
        f"{middle[2]}:post-windowed",
    ]
    folder = tmp_path / "killed"
    args = [*_replay_args(trace, folder), "--mode", "what-if"]
    for i, point in enumerate(points):
        run = run_keepersim(*args, *(["--resume"] if i else []), env={KILL_AT_ENV: point})
        assert run.returncode == -signal.SIGKILL, (point, run.stderr)
    done = run_keepersim(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert _what_if_report(folder) == _what_if_report(whole)
    other = run_keepersim(*args, "--resume", "--seed", "12")
    assert other.returncode == 2 and "other inputs" in other.stderr
