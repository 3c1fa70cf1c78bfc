"""How a served chain advances: scenario runner and trace replay reproduce ``simulate``'s chain
(same app hash), pacing, posted blocks refused while a runner drives the chain, metrics fed
from block events."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from keepersim.server.app import BackgroundServer, create_app
from keepersim.server.metrics import ServerMetrics
from keepersim.server.runner import (
    BlockSink,
    RunnerError,
    ScenarioRunner,
    TickerRunner,
    TraceRunner,
    TraceSource,
    open_scenario_chain,
)
from keepersim.sim.generate import generate_scenario
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario
from keepersim.types.events import (
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
)

P = "/productscience/inference/inference"


def small_scenario(**changes: Any) -> Scenario:
    s = generate_scenario(
        "runner",
        3,
        participants=10,
        blocks=240,
        epoch_length=80,
        arrivals_per_block=4,
        expiration_blocks=20,
        latency=(1, 6),
        capacity=3,
        degraded_share=0.3,
        degraded_miss=(0.4, 0.7),
    )
    return dataclasses.replace(s, **changes)


@pytest.mark.parametrize(
    ("policy", "pushback"), [("gonka", True), ("windowed", False), ("consecutive", True)]
)
def test_scenario_runner_and_trace_replay_match_simulate(
    tmp_path: Path, policy: str, pushback: bool
) -> None:
    scenario = small_scenario(pushback=pushback)
    trace = tmp_path / "sim.jsonl"
    expected = run_scenario(scenario, policy, store="memory", trace_out=trace)

    chain = open_scenario_chain(scenario, policy)
    runner = ScenarioRunner(BlockSink(chain), scenario)
    runner.run_blocking()
    assert chain.height == scenario.blocks
    assert chain.app_hash.hex() == expected.app_hash
    assert runner.status()["rejected_txs"] == 0 and runner.status()["finished"]
    chain.close()

    source = TraceSource(trace)
    replay = source.open_chain()
    tracer = TraceRunner(BlockSink(replay), source)
    tracer.run_blocking()
    assert replay.height == scenario.blocks
    assert replay.app_hash.hex() == expected.app_hash
    assert tracer.status()["late_records"] == 0
    replay.close()


def test_trace_replay_sends_both_governance_updates(tmp_path: Path) -> None:
    """A later params line is replayed as the chain's MsgUpdateParams and keepersim's
    MsgUpdateExtensionParams in the block before it: the replay reaches the governed run's app
    hash and serves both new parts."""
    from keepersim.sim.run_genesis import build_params

    scenario = small_scenario(pushback=True)
    governed = build_params(scenario, "gonka")
    governed.params.validation_params.expiration_blocks = 12
    governed.extension_params.health_params.policy = "windowed"
    trace = tmp_path / "sim.jsonl"
    expected = run_scenario(
        scenario, "gonka", store="memory", governance=[(100, governed)], trace_out=trace
    )
    source = TraceSource(trace)
    replay = source.open_chain()
    try:
        runner = TraceRunner(BlockSink(replay), source)
        runner.run_blocking()
        assert replay.app_hash.hex() == expected.app_hash
        assert runner.status()["rejected_txs"] == 0 and runner.skipped_params == 0
        served = replay.get_params()
        assert served.params.validation_params.expiration_blocks == 12
        assert replay.get_policy_name() == "windowed"
    finally:
        replay.close()


def test_metrics_follow_block_events(make_genesis: Any) -> None:
    scenario = small_scenario(pushback=True)
    chain = open_scenario_chain(scenario, "gonka")
    metrics = ServerMetrics()
    sink = BlockSink(chain, metrics)
    counts = {"success": 0, "miss": 0, "neutral": 0, "transitions": 0}
    last_state: dict[str, str] = {}

    def count(result: Any) -> None:
        for e in result.events:
            if isinstance(e, InferenceFinished):
                counts["success"] += 1
            elif isinstance(e, InferenceExpired):
                counts["miss"] += 1
            elif isinstance(e, InferenceDeclined):
                counts["neutral"] += 1
            elif isinstance(e, HealthTransition):
                counts["transitions"] += 1
                last_state[e.address] = e.to_state

    sink.add_listener(count)
    runner = ScenarioRunner(sink, scenario, blocks=150)
    runner.run_blocking()
    text = metrics.render().decode()
    for outcome in ("success", "miss", "neutral"):
        found = re.search(rf'keepersim_outcomes_total{{outcome="{outcome}"}} ([0-9.]+)', text)
        assert found is not None and float(found.group(1)) == counts[outcome]
    assert counts["miss"] > 0 and counts["transitions"] > 0
    transitions = sum(
        float(v) for v in re.findall(r"keepersim_policy_transitions_total\{[^}]*\} ([0-9.]+)", text)
    )
    assert transitions == counts["transitions"]
    selections = re.search(r"keepersim_selections_total ([0-9.]+)", text)
    assert selections is not None and float(selections.group(1)) >= runner.requests
    assert f"keepersim_height {chain.height}.0" in text
    # gauges agree with the chain's policy view of every group member
    states = metrics.get_policy_states()
    assert set(states) == {p.address for p in scenario.participants}
    from keepersim.server.metrics import get_state_code

    for address, code in states.items():
        assert code == get_state_code(str(chain.get_policy_state(address)["state"]))
    assert any(code == 1 for code in states.values()) or counts["transitions"] > 0
    chain.close()


def test_removed_participants_are_minus_one(make_genesis: Any) -> None:
    """SPRT deactivation takes a participant out of the pool: -1 until the epoch boundary,
    where it is back in the new group (the gonka breaker resets too)."""
    from keepersim.chain import Chain
    from keepersim.types.pb.inference.inference.tx_pb2 import MsgStartInference

    chain = Chain.open(memory=True, genesis=make_genesis(3))  # SPRT on: 6 misses trip it
    metrics = ServerMetrics()
    metrics.sync_policy_states(chain)
    sink = BlockSink(chain, metrics)
    assert metrics.get_policy_states() == {"p0": 0, "p1": 0, "p2": 0}
    sink.deliver(
        [
            MsgStartInference(creator="r", inference_id=f"m{i}", model="m", assigned_to="p1")
            for i in range(8)
        ]
    )
    for _ in range(21):  # expire them (expiration 20 blocks)
        sink.deliver([])
    states = metrics.get_policy_states()
    assert states["p1"] == -1 and states["p0"] == 0
    assert (
        'keepersim_policy_state{participant="p1",policy="gonka"} -1.0' in metrics.render().decode()
    )
    while chain.height < 40:  # epoch boundary: p1 is ACTIVE in the new group
        sink.deliver([])
    assert metrics.get_policy_states()["p1"] == 0
    chain.close()


def test_served_runner_paced_and_posts_refused(tmp_path: Path) -> None:
    scenario = small_scenario(blocks=30)
    chain = open_scenario_chain(scenario, "gonka")
    metrics = ServerMetrics()
    sink = BlockSink(chain, metrics)
    runner = ScenarioRunner(sink, scenario, block_rate=40.0)
    app = create_app(chain, metrics=metrics, sink=sink, runner=runner)
    started = time.monotonic()
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        r = client.post("/keepersim/v1/blocks", json=[])
        assert r.status_code == 409 and "scenario runner" in r.json()["message"]
        status = client.get("/keepersim/v1/status").json()
        assert status["runner"]["mode"] == "scenario" and status["runner"]["block_rate"] == 40.0
        assert runner.join(20)
        elapsed = time.monotonic() - started
        assert elapsed >= 29 / 40 * 0.9  # paced, not as fast as possible
        status = client.get("/keepersim/v1/status").json()
        assert status["runner"]["finished"] and status["runner"]["error"] is None
        assert status["height"] == 30 and status["blocks_delivered"] == 30
        # the run is over: blocks can be posted again
        assert client.post("/keepersim/v1/blocks", json=[]).json()["height"] == 31
    chain.close()


def test_ticker_and_stop(make_genesis: Any) -> None:
    from keepersim.chain import Chain

    chain = Chain.open(memory=True, genesis=make_genesis(3))
    runner = TickerRunner(BlockSink(chain), block_rate=200.0)
    runner.start()
    deadline = time.monotonic() + 10
    while chain.height < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.stop(5)
    assert not runner.running and chain.height >= 5
    height = chain.height
    time.sleep(0.05)
    assert chain.height == height
    with pytest.raises(RunnerError):
        TickerRunner(BlockSink(chain), block_rate=0)
    chain.close()


def test_trace_source_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "params"}\n')
    with pytest.raises(RunnerError):
        TraceSource(bad)
    with pytest.raises(RunnerError, match="unknown policy"):
        open_scenario_chain(small_scenario(), "no-such-policy")
