"""Gas (keepersim/store/gas.py): the block buffer charges every access as the Cosmos SDK's
gaskv store does with KVGasConfig, whatever serves it (the block's writes, the state cache's
objects, the backend), so a block's gas is the schedule summed over the accesses a plain model
of the store makes; and it is the same on LevelDB and in memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.store import CommitStore, LevelDBBackend, MemoryBackend
from keepersim.store.buffer import RESERVED_PREFIX
from keepersim.store.gas import (
    DELETE_COST,
    HAS_COST,
    ITER_NEXT_COST_FLAT,
    READ_COST_FLAT,
    READ_COST_PER_BYTE,
    WRITE_COST_FLAT,
    WRITE_COST_PER_BYTE,
    GasMeter,
    compute_iteration_gas,
)
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines

# KVGasConfig() of cosmossdk.io/store v1.1.x (store/types/gas.go), as gonka builds it.
SDK_KV_GAS_CONFIG = {
    "HasCost": 1000,
    "DeleteCost": 1000,
    "ReadCostFlat": 1000,
    "ReadCostPerByte": 3,
    "WriteCostFlat": 2000,
    "WriteCostPerByte": 30,
    "IterNextCostFlat": 30,
}

STREAMED = b"\x05"  # a streamed prefix of the state cache: its entries come and go from memory
KEYS = st.sampled_from(
    [b"\x01" + bytes([i]) for i in range(5)] + [STREAMED + bytes([i]) * 3 for i in range(5)]
)
# Values are EpochDeclines encodings (b"" is the empty message), so take/peek can decode them.
VALUES = st.builds(
    lambda a, n: EpochDeclines(address=a, declined_requests=n).SerializeToString(),
    st.sampled_from(["", "a", "gonka1xyz"]),
    st.integers(0, 300),
)
BOUND = st.none() | KEYS
OP = st.one_of(
    st.tuples(st.sampled_from(["get", "has", "delete", "take", "peek"]), KEYS),
    st.tuples(st.sampled_from(["set", "set_message"]), KEYS, VALUES),
    # iterate [start, stop), reverse, how many entries the caller reads (None: to the end)
    st.tuples(st.just("iterate"), BOUND, BOUND, st.booleans(), st.none() | st.integers(0, 4)),
)
BLOCKS = st.lists(st.lists(OP, max_size=12), min_size=1, max_size=6)


def test_the_schedule_is_the_sdk_kv_gas_config() -> None:
    ours = {
        "HasCost": HAS_COST,
        "DeleteCost": DELETE_COST,
        "ReadCostFlat": READ_COST_FLAT,
        "ReadCostPerByte": READ_COST_PER_BYTE,
        "WriteCostFlat": WRITE_COST_FLAT,
        "WriteCostPerByte": WRITE_COST_PER_BYTE,
        "IterNextCostFlat": ITER_NEXT_COST_FLAT,
    }
    assert ours == SDK_KV_GAS_CONFIG


def test_an_iteration_is_charged_as_a_go_loop_over_gaskv() -> None:
    """``for it := Iterator(); it.Valid(); it.Next()``: the seek at creation (the first entry's
    bytes), then every Next the bytes of the entry it leaves; an empty range costs one seek."""
    a, b = (b"k1", b"vv"), (b"k22", b"")
    assert compute_iteration_gas([]) == 30
    assert compute_iteration_gas([a]) == 30 + 3 * 4 + (30 + 3 * 4)
    assert compute_iteration_gas([a, b]) == 30 + 3 * 4 + (30 + 3 * 4) + (30 + 3 * 3)
    # the caller stops on b (no Next on it): b's bytes are not charged
    assert compute_iteration_gas([a, b], consumed_all=False) == 30 + 3 * 4 + (30 + 3 * 4)


def _model_range(
    state: dict[bytes, bytes], start: bytes | None, stop: bytes | None, reverse: bool
) -> list[tuple[bytes, bytes]]:
    hi = RESERVED_PREFIX if stop is None or stop > RESERVED_PREFIX else stop
    entries = sorted((k, v) for k, v in state.items() if (start is None or k >= start) and k < hi)
    return entries[::-1] if reverse else entries


def _run(store: CommitStore, blocks: list[list[Any]]) -> tuple[list[int], list[int]]:
    """Each block's gas as the buffer counted it, and as a plain meter over a dict counts it."""
    state: dict[bytes, bytes] = {}
    counted: list[int] = []
    expected: list[int] = []
    for height, ops in enumerate(blocks, start=1):
        buffer = store.begin()
        meter = GasMeter()
        for op in ops:
            kind, key = op[0], op[1]
            if kind == "get":
                assert buffer.get(key) == state.get(key)
                meter.process_get(key, state.get(key))
            elif kind in ("take", "peek"):
                read = buffer.take_message if kind == "take" else buffer.peek_message
                got = read(key, EpochDeclines.FromString)
                raw = state.get(key)
                assert (got is None) == (raw is None)
                meter.process_get(key, raw)
            elif kind == "has":
                assert buffer.has(key) == (key in state)
                meter.process_has()
            elif kind == "delete":
                buffer.delete(key)
                state.pop(key, None)
                meter.process_delete()
            elif kind == "set":
                buffer.set(key, op[2])
                state[key] = op[2]
                meter.process_set(key, op[2])
            elif kind == "set_message":
                buffer.set_message(key, EpochDeclines.FromString(op[2]))
                state[key] = op[2]
                meter.process_set(key, op[2])
            else:
                _, start, stop, reverse, n = op
                entries = _model_range(state, start, stop, reverse)
                it: Iterator[tuple[bytes, bytes]] = buffer.iterate(start, stop, reverse)
                if n is None or n >= len(entries):
                    assert list(it) == entries
                    meter.process_iteration(entries, consumed_all=True)
                elif n == 0:  # made and left: the seek only (gaskv charges it at creation)
                    meter.process_iteration(entries[:1], consumed_all=False)
                else:
                    assert [next(it) for _ in range(n)] == entries[:n]
                    meter.process_iteration(entries[:n], consumed_all=False)
        counted.append(buffer.gas)
        expected.append(meter.consumed)
        store.commit(buffer, height)
    return counted, expected


@settings(max_examples=150, deadline=None)
@given(BLOCKS)
def test_a_block_gas_is_the_schedule_over_a_plain_store(blocks: list[list[Any]]) -> None:
    counted, expected = _run(CommitStore(MemoryBackend(), streamed=[STREAMED]), blocks)
    assert counted == expected


@settings(max_examples=25, deadline=None)
@given(BLOCKS)
def test_gas_is_the_same_on_leveldb_and_in_memory(blocks: list[list[Any]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        backend = LevelDBBackend(Path(folder) / "db")
        try:
            on_disk, _ = _run(CommitStore(backend, streamed=[STREAMED]), blocks)
        finally:
            backend.close()
    in_memory, _ = _run(CommitStore(MemoryBackend(), streamed=[STREAMED]), blocks)
    assert on_disk == in_memory


def test_a_cached_object_is_charged_its_stored_bytes() -> None:
    """take_message served by the state cache's object costs what a Get of its bytes does."""
    store = CommitStore(MemoryBackend())
    key = b"\x01e"
    entry = EpochDeclines(address="a", declined_requests=7)
    buffer = store.begin()
    buffer.set_message(key, entry)
    store.commit(buffer, 1)
    buffer = store.begin()
    assert buffer.take_message(key, EpochDeclines.FromString) is entry  # the cache's object
    raw = entry.SerializeToString()
    assert buffer.gas == READ_COST_FLAT + READ_COST_PER_BYTE * (len(key) + len(raw))


@pytest.mark.parametrize("reverse", [False, True])
def test_an_empty_range_costs_one_seek(reverse: bool) -> None:
    buffer = CommitStore(MemoryBackend()).begin()
    assert list(buffer.iterate(b"\x01", b"\x02", reverse)) == []
    assert buffer.gas == ITER_NEXT_COST_FLAT
