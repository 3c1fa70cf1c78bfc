"""The server's chains open through ``keepersim.chain.open_chain``: in memory, or in an empty
folder whose chain is the one ``keepersim simulate`` builds; a folder that holds anything is
refused naming it, before any block."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepersim.chain import Chain
from keepersim.server.runner import RunnerError, TraceSource, open_scenario_chain
from keepersim.sim.generate import generate_scenario
from keepersim.sim.run_loop import run_scenario


def test_scenario_and_trace_chains_need_an_empty_folder(tmp_path: Path) -> None:
    scenario = generate_scenario("store", 1, participants=4, blocks=60, epoch_length=30)
    with open_scenario_chain(scenario, "gonka") as memory:
        expected = memory.app_hash
    store = tmp_path / "store"
    with open_scenario_chain(scenario, "gonka", path=store) as chain:
        assert chain.app_hash == expected and chain.height == memory.height
    with pytest.raises(RunnerError, match=f"store folder {store} is not empty: a scenario needs"):
        open_scenario_chain(scenario, "gonka", path=store)
    with Chain.open(store) as kept:  # the refused open left the stored chain alone
        assert kept.app_hash == expected

    trace = tmp_path / "t.jsonl"
    run_scenario(scenario, "none", store="memory", trace_out=trace)
    source = TraceSource(trace)
    with pytest.raises(RunnerError, match=f"store folder {store} is not empty: a replay needs"):
        source.open_chain(store)
    with source.open_chain(tmp_path / "fresh") as replay, source.open_chain() as in_memory:
        assert replay.app_hash == in_memory.app_hash and replay.height == in_memory.height
