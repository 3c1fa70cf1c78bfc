"""The state cache (keepersim.store.cache) is the backend alone, only faster: the same reads,
scans and app hashes after any sequence of blocks, whatever the write-back interval and
however often streamed entries are evicted; and the backend holds exactly the last
written-back commit, which is what a reopened store (a resumed run) goes on from."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.store import CommitStore, LevelDBBackend, MemoryBackend
from keepersim.store.apphash import compute_app_hash, compute_state_sum
from keepersim.store.buffer import RESERVED_PREFIX, BlockBuffer
from keepersim.store.cache import StateCache
from keepersim.store.committed import HEIGHT_KEY
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines

STREAMED = b"\x05"
# Keys under a resident prefix (0x01) and a streamed one (0x05), a handful of each, so blocks
# rewrite and delete the same keys often.
KEYS = st.sampled_from(
    [b"\x01" + bytes([i]) for i in range(6)] + [STREAMED + bytes([i]) for i in range(6)]
)
VALUES = st.binary(min_size=0, max_size=4)
WRITE = st.tuples(KEYS, st.none() | VALUES)  # None: delete
BLOCKS = st.lists(st.lists(WRITE, max_size=6), min_size=1, max_size=25)


def apply_block(store: CommitStore, height: int, writes: list[tuple[bytes, bytes | None]]) -> bytes:
    buffer = store.begin()
    for key, value in writes:
        if value is None:
            buffer.delete(key)
        else:
            buffer.set(key, value)
    return store.commit(buffer, height)


def user_entries(reader: object) -> list[tuple[bytes, bytes]]:
    return list(reader.iterate(None, RESERVED_PREFIX))  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(blocks=BLOCKS, write_every=st.integers(1, 5), max_streamed=st.integers(1, 8))
def test_a_cached_store_reads_and_hashes_as_the_state_itself(
    blocks: list[list[tuple[bytes, bytes | None]]], write_every: int, max_streamed: int
) -> None:
    """Against the definition: the state as a plain dict, hashed in full after every block."""
    model: dict[bytes, bytes] = {}
    cache = StateCache(
        MemoryBackend(), streamed=[STREAMED], write_every=write_every, max_streamed=max_streamed
    )
    cached = CommitStore(cache)
    for height, writes in enumerate(blocks, start=1):
        for key, value in writes:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        expected = compute_app_hash(compute_state_sum(model.items()))
        assert apply_block(cached, height, writes) == expected
        assert user_entries(cache) == sorted(model.items())
        for key in {key for key, _ in writes}:
            assert cache.get(key) == model.get(key)
        assert list(cache.iterate(STREAMED, RESERVED_PREFIX, reverse=True)) == sorted(
            ((k, v) for k, v in model.items() if k >= STREAMED), reverse=True
        )
        if height % write_every == 0:  # a write-back: the backend holds this very state
            assert user_entries(cache.backend) == sorted(model.items())
    # The backend holds the last write-back: every write_every-th commit.
    written = len(blocks) - len(blocks) % write_every
    if written:
        raw = cache.backend.get(HEIGHT_KEY)
        assert raw is not None and int.from_bytes(raw, "big") == written
    cached.flush()
    assert user_entries(cache.backend) == sorted(model.items())
    assert cached.verify_app_hash()


A = b"\x01a"
PUT_A, DEL_A, PUT_Z = [(A, b"1")], [(A, None)], [(b"\x01z", b"0")]


@pytest.mark.parametrize(
    "blocks",
    [
        # written back, then deleted, put again and deleted before the next write-back
        [PUT_A, [], [], [], DEL_A, PUT_A, DEL_A, []],
        # put and deleted between two write-backs (never in the backend), then put again
        [PUT_Z, [], [], [], PUT_A, DEL_A, PUT_A, []],
        [PUT_Z, [], [], [], PUT_A, DEL_A, [], []],
        [PUT_A, DEL_A, PUT_A, DEL_A, PUT_A, [], DEL_A, []],
    ],
)
def test_the_backend_holds_each_written_back_state(
    blocks: list[list[tuple[bytes, bytes | None]]],
) -> None:
    """A key put and deleted between two write-backs may skip the backend, only if the backend
    does not hold it (the cache's fresh keys). Every 4th commit is written back."""
    cache = StateCache(MemoryBackend(), write_every=4)
    store = CommitStore(cache)
    model: dict[bytes, bytes] = {}
    for height, writes in enumerate(blocks, start=1):
        for key, value in writes:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        apply_block(store, height, writes)
        if height % 4 == 0:
            assert user_entries(cache.backend) == sorted(model.items())
    assert store.verify_app_hash()


def test_a_reopened_store_goes_on_from_the_last_write_back(tmp_path: Path) -> None:
    """Commits the cache had not written back are lost with the process, not half kept."""
    backend = LevelDBBackend(tmp_path / "s")
    store = CommitStore(backend, write_every=3)
    hashes = [apply_block(store, h, [(b"\x01k", str(h).encode())]) for h in range(1, 6)]
    # Killed now: nothing of blocks 4 and 5 reached LevelDB. (Closing would write them back.)
    backend.close()
    reopened = CommitStore(LevelDBBackend(tmp_path / "s"), write_every=3)
    try:
        assert reopened.get_height() == 3
        assert reopened.get_app_hash() == hashes[2]
        assert reopened.backend.get(b"\x01k") == b"3"
        assert apply_block(reopened, 4, [(b"\x01k", b"4")]) == hashes[3]
    finally:
        reopened.close()


def test_close_writes_back_what_the_cache_holds(tmp_path: Path) -> None:
    store = CommitStore(LevelDBBackend(tmp_path / "s"), write_every=100)
    final = [apply_block(store, h, [(b"\x01k", str(h).encode())]) for h in range(1, 4)][-1]
    store.close()
    reopened = CommitStore(LevelDBBackend(tmp_path / "s"))
    try:
        assert (reopened.get_height(), reopened.get_app_hash()) == (3, final)
    finally:
        reopened.close()


class RefusingBackend(MemoryBackend):
    """Refuses every write batch once told to (a full disk)."""

    __slots__ = ("refuse",)

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False

    def write_batch(self, puts: object, deletes: object) -> None:  # type: ignore[override]
        if self.refuse:
            raise OSError("disk full")
        super().write_batch(puts, deletes)  # type: ignore[arg-type]


def test_a_refused_write_back_leaves_the_last_commit() -> None:
    backend = RefusingBackend()
    store = CommitStore(backend)
    apply_block(store, 1, [(b"\x01k", b"1")])
    backend.refuse = True
    buffer = store.begin()
    buffer.set(b"\x01k", b"2")
    with pytest.raises(OSError):
        store.commit(buffer, 2)
    assert store.get_height() == 1
    assert store.backend.get(b"\x01k") == b"1"
    assert buffer.is_dirty()  # the block's writes are kept for a retry
    backend.refuse = False
    store.commit(buffer, 2)
    assert store.backend.get(b"\x01k") == b"2"
    assert store.verify_app_hash()


def test_a_known_key_costs_no_backend_read() -> None:
    reads: list[bytes] = []

    class Counting(MemoryBackend):
        __slots__ = ()

    backend = Counting()
    backend.write_batch({b"\x01a": b"x", b"\x05i": b"y"}, [])
    cache = StateCache(backend, streamed=[STREAMED])
    original = backend.get
    backend.get = lambda key: reads.append(key) or original(key)  # type: ignore[method-assign]
    assert cache.get(b"\x01a") == b"x"  # resident: loaded at open
    assert cache.get(b"\x01zz") is None  # resident and absent: known without a read
    assert cache.get(b"\x05i") == b"y" and cache.get(b"\x05i") == b"y"
    assert cache.get(b"\x05new") is None and cache.get(b"\x05new") is None
    assert reads == [b"\x05i", b"\x05new"]  # each streamed key read once, absent ones too


def test_objects_cross_blocks_only_through_a_commit() -> None:
    """A written message is handed to the next block (take: the block's to change; peek: read
    only); a block that fails leaves the cache without the objects it took, so the next
    decodes the committed bytes again."""
    store = CommitStore(MemoryBackend())
    key = b"\x01e"
    buffer = store.begin()
    entry = EpochDeclines(address="a", declined_requests=1)
    buffer.set_message(key, entry)
    store.commit(buffer, 1)
    buffer = store.begin()
    assert buffer.peek_message(key, EpochDeclines.FromString) is entry
    taken = buffer.take_message(key, EpochDeclines.FromString)
    assert taken is entry
    taken.declined_requests = 99  # changed in a block that then fails
    buffer.discard()
    buffer = store.begin()
    fresh = buffer.take_message(key, EpochDeclines.FromString)
    assert fresh is not entry and fresh is not None and fresh.declined_requests == 1


def test_verify_objects_catches_a_message_changed_after_its_write() -> None:
    store = CommitStore(MemoryBackend())
    buffer = store.begin()
    entry = EpochDeclines(address="a", declined_requests=1)
    buffer.set_message(b"\x01e", entry)
    entry.declined_requests = 2  # the bytes written say 1
    assert StateCache.verify_objects  # tests/conftest.py
    with pytest.raises(AssertionError, match="changed"):
        store.commit(buffer, 1)


def test_memos_are_handed_to_the_next_block_once() -> None:
    store = CommitStore(MemoryBackend())
    buffer = store.begin()
    buffer.give_memo("index", {"built": 1})
    store.commit(buffer, 1)
    buffer = store.begin()
    assert buffer.take_memo("index") == {"built": 1}
    assert buffer.take_memo("index") is None  # taken: a failed block leaves none behind
    store.commit(buffer, 2)
    assert store.begin().take_memo("index") is None  # not given again by block 2


def test_a_block_buffer_without_a_cache_decodes_from_the_backend() -> None:
    backend = MemoryBackend()
    backend.write_batch({b"\x01e": EpochDeclines(address="a").SerializeToString()}, [])
    buffer = BlockBuffer(backend)
    assert buffer.take_message(b"\x01e", EpochDeclines.FromString) == EpochDeclines(address="a")
    assert buffer.take_memo("x") is None


@pytest.mark.parametrize("prefix", [b"", b"\x01\x02", b"\xff"])
def test_a_streamed_prefix_is_one_byte_below_the_reserved_one(prefix: bytes) -> None:
    with pytest.raises(ValueError, match="streamed prefix"):
        StateCache(MemoryBackend(), streamed=[prefix])


def test_write_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="write_every"):
        StateCache(MemoryBackend(), write_every=0)


@pytest.mark.parametrize("write_every", [1, 3])
def test_a_snapshot_keeps_its_commit(write_every: int) -> None:
    cache = StateCache(MemoryBackend(), streamed=[STREAMED], write_every=write_every)
    store = CommitStore(cache)
    apply_block(store, 1, [(b"\x01a", b"1"), (b"\x05i", b"1")])
    view = cache.snapshot()
    before = user_entries(view)
    apply_block(store, 2, [(b"\x01a", b"2"), (b"\x05i", None), (b"\x05j", b"2")])
    apply_block(store, 3, [(b"\x01b", b"3")])
    assert user_entries(view) == before
    assert (view.get(b"\x01a"), view.get(b"\x05i"), view.get(b"\x05j")) == (b"1", b"1", None)
    assert list(view.iterate(b"\x05", RESERVED_PREFIX, reverse=True)) == [(b"\x05i", b"1")]


def test_on_a_store_that_began_empty_a_new_streamed_key_costs_no_read() -> None:
    """Until the first eviction every streamed key is in memory, so an absent one is known
    absent (a new inference's id); after it, the backend is asked again."""
    backend = MemoryBackend()
    cache = StateCache(backend, streamed=[STREAMED], max_streamed=2)
    store = CommitStore(cache)
    reads: list[bytes] = []
    original = backend.get
    backend.get = lambda key: reads.append(key) or original(key)  # type: ignore[method-assign]
    assert cache.get(b"\x05new") is None
    assert reads == []
    apply_block(store, 1, [(b"\x05a", b"1"), (b"\x05b", b"2")])  # reaches max_streamed
    apply_block(store, 2, [])
    assert cache.get(b"\x05other") is None
    assert reads == [b"\x05other"]
    assert cache.get(b"\x05a") == b"1"  # from the old generation, or read back: never lost
