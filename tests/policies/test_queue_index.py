"""The wake-up queue's speed-up (keepersim/keeper/acceleration/queue_index.py) decides nothing and
costs the same gas: against the plain HeightQueue, the same items popped, the same stored state
and the same gas, over blocks that commit, fail and restart; and every policy's chain gives the
same app hashes, events and gas per block and per step with it or without it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import POLICIES, Step, open_chain, run, steps_strategy

from keepersim.chain import Chain
from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.acceleration.queue_index import IndexedHeightQueue
from keepersim.keeper.policies.base import HeightQueue
from keepersim.store.buffer import BlockBuffer, KVStore
from keepersim.store.committed import CommitStore
from keepersim.store.memory import MemoryBackend

PREFIX = b"\x41\x07"

# One block: (op, height offset from the block's height, item); ops run in order.
op_strategy = st.tuples(
    st.sampled_from(["schedule", "schedule", "schedule", "pop", "pop_ahead", "clear"]),
    st.integers(-3, 12),
    st.sampled_from(["a", "b", "c", "d"]),
)
block_strategy = st.tuples(
    st.lists(op_strategy, max_size=6),
    st.sampled_from(["commit", "commit", "commit", "commit", "fail", "restart"]),
)


def run_queue(indexed: bool, blocks: list[tuple[list[tuple[str, int, str]], str]]) -> list[Any]:
    """The blocks over a fresh store; the pops, the gas and the stored queue per block."""
    store = CommitStore(MemoryBackend())
    out: list[Any] = []
    for height, (ops, end) in enumerate(blocks, start=1):
        buffer = store.begin()
        queue = (IndexedHeightQueue if indexed else HeightQueue)(buffer, PREFIX, height)
        pops: list[list[str]] = []
        for op, offset, item in ops:
            if op == "schedule":
                queue.schedule(height + offset, item)
            elif op == "pop":
                pops.append(queue.pop_due())
            elif op == "pop_ahead":  # an explicit height, not below now (the _api adapters)
                pops.append(queue.pop_due(height + abs(offset)))
            else:
                queue.clear()
        pops.append(queue.pop_due())  # as a policy's end block does
        queue.flush()
        gas = buffer.gas
        stored = list(buffer.iterate(PREFIX, PREFIX + b"\xff"))
        if end == "fail":
            buffer.discard()
        else:
            store.commit(buffer, height)
            if end == "restart":
                store.backend.forget_derived()
        out.append((pops, gas, stored, end))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(block_strategy, min_size=1, max_size=25))
def test_the_indexed_queue_pops_stores_and_charges_as_the_plain_one(
    blocks: list[tuple[list[tuple[str, int, str]], str]],
) -> None:
    assert run_queue(True, blocks) == run_queue(False, blocks)


def _open_plain_queue(store: KVStore, prefix: bytes, height: int) -> HeightQueue:
    return HeightQueue(store, prefix, height)


@contextmanager
def recording(chain: Chain, out: list[Any]) -> Iterator[None]:
    """Every block's app hash, events, gas and gas by step, into ``out``."""
    deliver = chain.deliver_block

    def record(*args: Any, **kwargs: Any) -> Any:
        result = deliver(*args, **kwargs)
        out.append((result.app_hash, result.events, result.gas_used, dict(result.gas_by_step)))
        return result

    chain.deliver_block = record  # type: ignore[method-assign]
    try:
        yield
    finally:
        del chain.deliver_block


def run_chains(name: str, steps: list[Step], cold: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[list[Any]] = []
    for indexed in (True, False):
        with monkeypatch.context() as patch:
            if not indexed:
                patch.setattr(ChainPolicyStore, "_open_queue", staticmethod(_open_plain_queue))
            out: list[Any] = []
            with open_chain(name, [1 << 17] * 5, None) as chain, recording(chain, out):
                run(chain, steps, check=False, cold=cold)
            runs.append(out)
    assert runs[0] == runs[1]


BUSY = [Step(starts=(0, 0, 1), finishes=(), declines=(), wait=2) for _ in range(12)] + [
    Step(starts=(2,), finishes=(0, 1), declines=(0,), wait=1) for _ in range(12)
]


@pytest.mark.parametrize("cold", [False, True])
@pytest.mark.parametrize("name", POLICIES)
def test_a_busy_chain_is_the_same_with_the_plain_queue(
    name: str, cold: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_chains(name, BUSY, cold, monkeypatch)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy)
def test_random_chains_are_the_same_with_the_plain_queue(name: str, steps: list[Step]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        run_chains(name, steps, False, monkeypatch)


def test_the_chain_opens_indexed_queues_only_with_its_speed_ups_on() -> None:
    buffer = BlockBuffer(MemoryBackend())
    assert isinstance(ChainPolicyStore._open_queue(buffer, PREFIX, 1), IndexedHeightQueue)
    try:
        ChainPolicyStore.hints_enabled = False
        assert type(ChainPolicyStore._open_queue(buffer, PREFIX, 1)) is HeightQueue
    finally:
        ChainPolicyStore.hints_enabled = True
