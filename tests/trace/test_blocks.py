"""Trace records to blocks (keepersim/trace/blocks.py), the one feeder replay and serve share: the
blocks of a trace written by ``simulate`` are every height once, hold the starts the trace's
lines record at that height, and take a chain from the trace's genesis to the app hash the
simulating chain reached (the chain itself is the reference). A scheduled params change
becomes the chain's two governance messages, as recorded or with a replay's policy."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

from replay_helpers import make_small_scenario

from keepersim.chain import open_chain
from keepersim.sim.run_loop import run_scenario
from keepersim.trace.blocks import (
    ParamsPart,
    expand_scheduled,
    iter_recorded_blocks,
    resolve_scheduled,
)
from keepersim.trace.genesis import build_genesis, read_prologue
from keepersim.trace.messages import Scheduled
from keepersim.trace.reader import iterate_trace
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.messages import MsgStartInference, MsgUpdateParams
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams


def test_the_recorded_blocks_replay_the_simulated_chain(tmp_path: Path) -> None:
    trace = tmp_path / "sim.jsonl"
    result = run_scenario(make_small_scenario(), "windowed", store="memory", trace_out=trace)
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    header = lines[0]
    recorded_starts = Counter(
        int(line["start_block_height"]) for line in lines if line.get("type") == "inference"
    )
    records = iterate_trace(trace)
    prologue = read_prologue(records)
    blocks = list(iter_recorded_blocks(prologue, itertools.chain(prologue.extra, records)))
    first, last = int(header["first_height"]), int(header["last_height"])
    assert [b.height for b in blocks] == list(range(first, last + 1))
    starts = {
        b.height: sum(isinstance(tx, MsgStartInference) for tx in b.txs)
        for b in blocks
        if any(isinstance(tx, MsgStartInference) for tx in b.txs)
    }
    assert starts == dict(recorded_starts)
    lines_read = [b.last_line for b in blocks]
    assert lines_read == sorted(lines_read)  # the lines read only grow, block after block
    with open_chain("memory", None, genesis=build_genesis(prologue)) as chain:
        for block in blocks:
            chain.deliver_block(block.txs, height=block.height, strict=True)
        assert chain.app_hash.hex() == result.app_hash


def test_a_params_change_is_the_chains_two_governance_messages() -> None:
    params = get_default_params()
    item = Scheduled(5, 1, "governance", 0, params)
    parts = expand_scheduled(item)
    assert parts == [ParamsPart(params, extension=False), ParamsPart(params, extension=True)]
    chain_msg, extension_msg = (resolve_scheduled(p) for p in parts)
    assert isinstance(chain_msg, MsgUpdateParams) and chain_msg.authority == GOV_AUTHORITY
    assert chain_msg.params == params.params
    assert isinstance(extension_msg, MsgUpdateExtensionParams)
    assert extension_msg.extension_params == params.extension_params  # as recorded
    shadowed = resolve_scheduled(parts[1], "consecutive", True)
    assert isinstance(shadowed, MsgUpdateExtensionParams)
    health = shadowed.extension_params.health_params
    assert (health.policy, health.shadow) == ("consecutive", True)
    assert params.extension_params.health_params.policy != "consecutive"  # a copy was changed
    assert resolve_scheduled(parts[0], "consecutive", True) == chain_msg
    registration = MsgStartInference(inference_id="x")
    assert resolve_scheduled(registration, "consecutive", True) is registration
