"""A block's gas (docs/metrics.md, "Gas") is attributed whole: begin block, each message (a
rejected one too, as the SDK charges a failed tx) and each end-block step add up to its
``gas_used``; the same blocks spend the same gas on LevelDB and in memory, and a message's gas
is what its store accesses cost by the SDK's schedule."""

from __future__ import annotations

from typing import Any

import pytest

from keepersim.chain import BlockResult, Chain
from keepersim.module.abci import END_BLOCK_STEPS, flush_policy_store
from keepersim.store.gas import HAS_COST
from keepersim.types.messages import MsgFinishInference, MsgStartInference
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

MODEL = "m"
STEP_NAMES = [step.__name__ for step in (*END_BLOCK_STEPS, flush_policy_store)]


def _blocks(n: int) -> list[list[Any]]:
    blocks: list[list[Any]] = []
    for h in range(1, n + 1):
        msgs: list[Any] = [
            MsgStartInference(inference_id=f"i{h}-{j}", assigned_to=f"p{j}", model=MODEL)
            for j in range(3)
        ]
        if h > 1:
            msgs += [
                MsgFinishInference(inference_id=f"i{h - 1}-{j}", executed_by=f"p{j}")
                for j in range(2)
            ]
            # rejected: finished by someone who is not a participant
            msgs.append(MsgFinishInference(inference_id=f"i{h - 1}-2", executed_by="stranger"))
        blocks.append(msgs)
    return blocks


def _deliver(chain: Chain, n: int) -> list[BlockResult]:
    return [chain.deliver_block(msgs) for msgs in _blocks(n)]


@pytest.mark.parametrize("policy", ["none", "gonka", "windowed", "trin-additive"])
def test_a_block_gas_is_its_steps_and_messages(
    policy: str, make_chain: Any, make_genesis: Any, make_test_params: Any
) -> None:
    params = make_test_params()
    params.extension_params.health_params.policy = policy
    chain = make_chain(make_genesis(4, params=params), memory=True)
    for result in _deliver(chain, 40):
        steps = result.gas_by_step
        assert result.gas_used == sum(steps.values()) > 0
        assert set(STEP_NAMES) <= set(steps) and "begin_block" in steps
        for kind in {r.kind for r in result.tx_results}:
            assert steps[kind] == sum(r.gas_used for r in result.tx_results if r.kind == kind)
        assert all(r.gas_used > 0 for r in result.tx_results)
        rejected = [r for r in result.tx_results if not r.ok]
        assert len(rejected) == (0 if result.height == 1 else 1)
        # begin block asks whether params are pending, the chain's and keepersim's: two Has
        assert steps["begin_block"] == 2 * HAS_COST


def test_the_same_blocks_spend_the_same_gas_on_leveldb_and_in_memory(
    make_chain: Any, genesis: Genesis
) -> None:
    on_disk = _deliver(make_chain(genesis), 30)
    in_memory = _deliver(make_chain(genesis, memory=True), 30)
    assert [(r.gas_used, dict(r.gas_by_step)) for r in on_disk] == [
        (r.gas_used, dict(r.gas_by_step)) for r in in_memory
    ]
    assert [r.app_hash for r in on_disk] == [r.app_hash for r in in_memory]


def test_a_reopened_chain_spends_the_gas_of_an_open_one(
    make_chain: Any, genesis: Genesis, tmp_path: Any
) -> None:
    """A reopened chain has no decoded params in memory yet: reading them is not charged, so
    a resumed run's blocks cost what the uninterrupted run's do."""
    blocks = _blocks(12)
    whole = make_chain(genesis)
    expected = [whole.deliver_block(msgs) for msgs in blocks]
    first = Chain.open(tmp_path / "reopened", genesis=genesis)
    got = [first.deliver_block(msgs) for msgs in blocks[:6]]
    first.close()
    again = Chain.open(tmp_path / "reopened")
    try:
        got += [again.deliver_block(msgs) for msgs in blocks[6:]]
    finally:
        again.close()
    assert [(r.gas_used, dict(r.gas_by_step)) for r in got] == [
        (r.gas_used, dict(r.gas_by_step)) for r in expected
    ]
