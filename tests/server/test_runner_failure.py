"""A runner that fails (a bad trace line, a block that fails, a scenario error) says so: one log
record naming file, line and height, ``state: "failed"`` with the failure in ``/status``,
``keepersim_runner_up`` 0; every route keeps answering from the last committed block with its
height headers. A run that ends normally is ``finished`` with ``keepersim_runner_up`` 1."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from keepersim.chain import Chain
from keepersim.server.app import GATEWAY_HEIGHT_HEADER, HEIGHT_HEADER, BackgroundServer, create_app
from keepersim.server.metrics import ServerMetrics
from keepersim.server.runner import (
    BlockSink,
    Runner,
    ScenarioRunner,
    TickerRunner,
    TraceRunner,
    TraceSource,
    open_scenario_chain,
)
from keepersim.sim.generate import generate_scenario
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario
from keepersim.trace.integrity import append_closing_record

P = "/productscience/inference/inference"
LOGGER = "keepersim.server.runner"


def make_scenario(blocks: int = 120) -> Scenario:
    return generate_scenario(
        "failing",
        5,
        participants=6,
        blocks=blocks,
        epoch_length=80,
        arrivals_per_block=3,
        expiration_blocks=20,
        latency=(1, 6),
        capacity=3,
        degraded_share=0.3,
        degraded_miss=(0.4, 0.7),
    )


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = tmp_path_factory.mktemp("trace") / "good.jsonl"
    run_scenario(make_scenario(), "gonka", store="memory", trace_out=trace)
    return trace


def read_lines(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def needed_height(line: dict[str, Any]) -> int:
    """The block a trace record is placed in (the replay's rule: docs/server.md)."""
    if line["type"] == "inference":
        return int(line["start_block_height"])
    if line["type"] == "params":
        return int(line["height"]) - 1
    return int(line["height"])


def write_bad_trace(good: Path, out: Path) -> tuple[Path, int, int]:
    """A copy of ``good`` with a cut-off inference line half-way. Returns (path, bad line
    number, the height expected to fail: the block the line before it is placed in)."""
    lines = good.read_text().splitlines()[:-1]  # without the closing record: written again
    records = [json.loads(line) for line in lines]
    index = next(
        i
        for i in range(len(lines) // 2, len(lines))
        if records[i]["type"] == "inference" and records[i - 1]["type"] == "inference"
    )
    lines[index] = lines[index][: len(lines[index]) // 2]
    out.write_text("\n".join(lines) + "\n")
    append_closing_record(out)
    return out, index + 1, needed_height(records[index - 1])


@contextmanager
def serve_trace(trace: Path) -> Iterator[tuple[Chain, TraceRunner, httpx.Client]]:
    source = TraceSource(trace)
    chain = source.open_chain()
    metrics = ServerMetrics()
    sink = BlockSink(chain, metrics)
    runner = TraceRunner(sink, source)
    app = create_app(chain, metrics=metrics, sink=sink, runner=runner)
    try:
        with (
            BackgroundServer(app) as server,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            assert runner.join(60)
            yield chain, runner, client
    finally:
        chain.close()


def metric(client: httpx.Client, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+-]+)$", client.get("/metrics").text, re.M)
    assert found is not None, name
    return float(found.group(1))


def runner_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.ERROR]


def assert_every_route_answers_at(client: httpx.Client, chain: Chain, height: int) -> None:
    """Every GET route answers 200 with both height headers saying ``height``."""
    with chain.read() as k:
        inference = next(k.iterate_inferences()).inference_id
        address = next(k.iterate_participants()).address
    paths = [
        f"{P}/get_random_executor?model=default&request_id=r1",
        f"{P}/participant/{address}",
        f"{P}/participant",
        f"{P}/inference/{inference}",
        f"{P}/inference",
        f"{P}/epoch_performance_summary/0",
        f"{P}/epoch_group_data/0",
        f"{P}/excluded_participants/0",
        f"{P}/params",
        f"{P}/epoch_info",
        "/cosmos/base/tendermint/v1beta1/node_info",
        f"/keepersim/v1/policy/{address}",
        "/keepersim/v1/selection?model=default",
        "/keepersim/v1/reputation/0",
        "/keepersim/v1/status",
    ]
    for path in paths:
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers[HEIGHT_HEADER] == str(height), path
        assert r.headers[GATEWAY_HEIGHT_HEADER] == str(height), path


def test_a_bad_trace_line_is_logged_shown_and_exported(
    good_trace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad, line, height = write_bad_trace(good_trace, tmp_path / "bad.jsonl")
    caplog.set_level(logging.ERROR, logger=LOGGER)
    with serve_trace(bad) as (chain, runner, client):
        assert chain.height == height - 1  # the blocks before the bad line were delivered
        [record] = runner_errors(caplog)  # logged once
        message = record.getMessage()
        assert f"at height {height} " in message and f"file {bad}, line {line}," in message
        assert f"{bad}:{line}: <line>: not valid JSON" in message
        assert (record.runner_file, record.runner_line, record.runner_height) == (  # type: ignore[attr-defined]
            str(bad),
            line,
            height,
        )

        status = client.get("/keepersim/v1/status").json()
        assert status["height"] == height - 1
        runner_status = status["runner"]
        assert runner_status["state"] == "failed"
        assert runner_status["finished"] and not runner_status["running"]
        assert runner_status["last_height"] == height - 1
        failure = runner_status["failure"]
        assert failure["error"] == runner_status["error"]
        assert failure["error"].startswith(f"TraceError: {bad}:{line}: <line>: not valid JSON")
        assert (failure["file"], failure["line"], failure["field"], failure["height"]) == (
            str(bad),
            line,
            "<line>",
            height,
        )

        assert metric(client, "keepersim_runner_up") == 0
        assert metric(client, "keepersim_runner_failures_total") == 1
        assert metric(client, "keepersim_height") == height - 1
        assert_every_route_answers_at(client, chain, height - 1)
        time.sleep(0.1)
        assert chain.height == height - 1 and len(runner_errors(caplog)) == 1


def test_a_good_trace_ends_finished_with_runner_up(
    good_trace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)
    last = int(read_lines(good_trace)[0]["last_height"])
    with serve_trace(good_trace) as (chain, runner, client):
        assert chain.height == last
        runner_status = client.get("/keepersim/v1/status").json()["runner"]
        assert runner_status["state"] == "finished" and runner_status["finished"]
        assert runner_status["failure"] is None and runner_status["error"] is None
        assert metric(client, "keepersim_runner_up") == 1
        assert metric(client, "keepersim_runner_failures_total") == 0
        assert_every_route_answers_at(client, chain, last)
    assert runner_errors(caplog) == []


def fail_at(chain: Chain, height: int) -> None:
    """Make ``chain.deliver_block`` raise for block ``height`` (a block the chain cannot run)."""
    deliver = chain.deliver_block

    def failing(*args: Any, **kwargs: Any) -> Any:
        if chain.height + 1 == height:
            raise KeyError("unknown health policy 'oracle'")
        return deliver(*args, **kwargs)

    chain.deliver_block = failing  # type: ignore[method-assign]


@pytest.mark.parametrize("height", [1, 57])
def test_a_failing_block_in_a_replay_names_the_last_line_read(
    good_trace: Path, caplog: pytest.LogCaptureFixture, height: int
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)
    records = read_lines(good_trace)
    source = TraceSource(good_trace)
    chain = source.open_chain()
    metrics = ServerMetrics()
    runner = TraceRunner(BlockSink(chain, metrics), source)
    fail_at(chain, height)
    with pytest.raises(KeyError):
        runner.run_blocking()
    failure = runner.status()["failure"]
    assert runner.status()["state"] == "failed" and chain.height == height - 1
    assert failure["height"] == height and failure["file"] == str(good_trace)
    assert failure["error"] == "KeyError: \"unknown health policy 'oracle'\""
    line = failure["line"]
    # every line up to it is placed in a block <= the failed one, the next one after it
    assert needed_height(records[line - 1]) <= height < needed_height(records[line])
    [record] = runner_errors(caplog)
    assert f"trace runner failed at height {height} (file {good_trace}, line {line})" in (
        record.getMessage()
    )
    assert b"keepersim_runner_up 0.0" in metrics.render()
    chain.close()


def test_a_scenario_error_in_the_thread_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)
    scenario = make_scenario(blocks=40)
    chain = open_scenario_chain(scenario, "gonka")
    metrics = ServerMetrics()
    runner = ScenarioRunner(BlockSink(chain, metrics), scenario)
    fail_at(chain, 23)
    runner.start()
    assert runner.join(30)
    status = runner.status()
    assert status["state"] == "failed" and status["finished"]
    assert status["failure"] == {
        "error": status["error"],
        "height": 23,
        "file": None,
        "line": None,
        "field": None,
    }
    [record] = runner_errors(caplog)
    assert record.getMessage().startswith("scenario runner failed at height 23: KeyError")
    text = metrics.render().decode()
    assert "keepersim_runner_up 0.0" in text and "keepersim_runner_failures_total 1.0" in text
    chain.close()


@pytest.mark.parametrize("stop", [False, True])
def test_finished_and_stopped_runs_are_up(make_genesis: Any, stop: bool) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(3))
    metrics = ServerMetrics()
    runner: Runner = TickerRunner(
        BlockSink(chain, metrics), block_rate=200.0, blocks=None if stop else 5
    )
    assert runner.status()["state"] == "idle"
    runner.start()
    assert runner.status()["state"] in ("running", "finished")
    if stop:
        while chain.height < 3:
            time.sleep(0.01)
        runner.stop(5)
    assert runner.join(10)
    assert runner.status()["state"] == ("stopped" if stop else "finished")
    assert runner.status()["failure"] is None
    assert "keepersim_runner_up 1.0" in metrics.render().decode()
    chain.close()


def test_serve_cli_logs_the_failure_once_on_stderr(good_trace: Path, tmp_path: Path) -> None:
    bad, line, height = write_bad_trace(good_trace, tmp_path / "bad.jsonl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "keepersim.cli", "serve", "--trace", str(bad), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = proc.stderr.readline()
            if not text:
                break
            lines.append(text)
            if "runner failed" in text:
                break
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=20)[1]
    failures = [t for t in lines + rest.splitlines() if "runner failed" in t]
    assert len(failures) == 1, lines
    assert failures[0].startswith(
        f"keepersim serve: ERROR: trace runner failed at height {height} "
        f"(file {bad}, line {line}, field <line>): TraceError: "
    )
    assert "Traceback" not in "".join(lines) + rest
