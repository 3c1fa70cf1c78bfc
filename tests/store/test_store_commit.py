"""CommitStore and the AdHash app hash: incremental upkeep, order independence, persistence."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from keepersim.store import (
    APP_HASH_KEY,
    EMPTY_APP_HASH,
    HEIGHT_KEY,
    STATE_SUM_KEY,
    CommitStore,
    KVBackend,
    LevelDBBackend,
    MemoryBackend,
    StoreClosedError,
    StoreError,
    compute_app_hash,
    compute_entry_term,
    compute_state_sum,
)

BackendFactory = Callable[[], KVBackend]


def user_entries(backend: KVBackend) -> dict[bytes, bytes]:
    return dict(backend.iterate(None, b"\xff"))


def test_formulas_match_the_spec() -> None:
    key, value = b"key", b"value"
    digest = hashlib.blake2b(b"\x00\x00\x00\x03key" + b"value", digest_size=32).digest()
    assert compute_entry_term(key, value) == int.from_bytes(digest, "big")
    # The length prefix separates pairs whose concatenations coincide.
    assert compute_entry_term(b"ke", b"yvalue") != compute_entry_term(key, value)
    expected = hashlib.sha256(b"keepersim/apphash/v1" + bytes(32)).digest()
    assert compute_app_hash(0) == expected == EMPTY_APP_HASH
    total = compute_entry_term(b"a", b"1") + compute_entry_term(b"b", b"2")
    assert compute_state_sum([(b"b", b"2"), (b"a", b"1")]) == total % (1 << 256)


def test_fresh_store(backend: KVBackend) -> None:
    store = CommitStore(backend)
    assert store.get_height() == 0
    assert store.get_app_hash() == EMPTY_APP_HASH
    assert store.verify_app_hash()


def test_commit_writes_state_and_metadata(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    buf.set(b"b", b"2")
    app_hash = store.commit(buf, 1)
    assert not buf.is_dirty()
    assert store.get_height() == 1
    assert store.get_app_hash() == app_hash
    assert app_hash == compute_app_hash(compute_state_sum([(b"a", b"1"), (b"b", b"2")]))
    assert user_entries(backend) == {b"a": b"1", b"b": b"2"}
    assert backend.get(HEIGHT_KEY) == (1).to_bytes(8, "big")
    assert backend.get(APP_HASH_KEY) == app_hash
    state_sum = backend.get(STATE_SUM_KEY)
    assert state_sum is not None and int.from_bytes(state_sum, "big") == store.get_state_sum()
    assert store.verify_app_hash()
    # The buffer is reusable after commit.
    buf.delete(b"a")
    second = store.commit(buf, 2)
    assert second == compute_app_hash(compute_state_sum([(b"b", b"2")]))
    assert second != app_hash


def test_same_state_by_different_orders_gives_same_hash(make_backend: BackendFactory) -> None:
    one = CommitStore(make_backend())
    buf = one.begin()
    for k in (b"a", b"b", b"c"):
        buf.set(k, b"v" + k)
    one.commit(buf, 1)

    two = CommitStore(make_backend())
    buf = two.begin()
    buf.set(b"c", b"old")
    buf.set(b"x", b"to-delete")
    two.commit(buf, 1)
    buf = two.begin()
    buf.set(b"b", b"vb")
    buf.delete(b"x")
    buf.set(b"c", b"vc")
    two.commit(buf, 5)
    buf = two.begin()
    buf.set(b"a", b"va")
    buf.set(b"b", b"vb")  # rewrite of an unchanged value
    buf.delete(b"never-existed")
    two.commit(buf, 6)

    assert user_entries(one.backend) == user_entries(two.backend)
    assert one.get_app_hash() == two.get_app_hash()
    assert one.verify_app_hash() and two.verify_app_hash()


def test_different_state_gives_different_hash(make_backend: BackendFactory) -> None:
    hashes = set()
    for value in (b"1", b"2"):
        store = CommitStore(make_backend())
        buf = store.begin()
        buf.set(b"k", value)
        hashes.add(store.commit(buf, 1))
    assert len(hashes) == 2


def test_incremental_sum_equals_full_recomputation(backend: KVBackend) -> None:
    store = CommitStore(backend)
    model: dict[bytes, bytes] = {}
    for height in range(1, 30):
        buf = store.begin()
        for i in range(height % 7 + 1):
            key = bytes([(height * 31 + i * 17) % 23])
            if (height + i) % 3 == 0:
                buf.delete(key)
                model.pop(key, None)
            else:
                value = bytes([height, i])
                buf.set(key, value)
                model[key] = value
        app_hash = store.commit(buf, height)
        assert store.get_state_sum() == compute_state_sum(model.items())
        assert app_hash == compute_app_hash(compute_state_sum(model.items()))
        assert store.verify_app_hash()
    assert user_entries(backend) == model


def test_export_import_gives_same_hash(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    for i in range(50):
        buf.set(i.to_bytes(2, "big"), bytes([i]) * (i % 5))
    store.commit(buf, 3)
    exported = list(backend.iterate(None, b"\xff"))

    target = CommitStore(MemoryBackend())
    buf = target.begin()
    for key, value in reversed(exported):
        buf.set(key, value)
    assert target.commit(buf, 1) == store.get_app_hash()


def test_discarded_block_changes_nothing(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    first = store.commit(buf, 1)
    buf = store.begin()
    buf.set(b"a", b"2")
    buf.set(b"b", b"3")
    buf.delete(b"a")
    buf.discard()  # the block raised midway
    assert user_entries(backend) == {b"a": b"1"}
    assert store.get_app_hash() == first and store.get_height() == 1
    # An empty block still commits (metadata only) and keeps the hash.
    assert store.commit(buf, 2) == first
    assert store.get_height() == 2


def test_height_must_increase(backend: KVBackend) -> None:
    store = CommitStore(backend)
    with pytest.raises(ValueError):
        store.commit(store.begin(), -1)
    store.commit(store.begin(), 0)  # genesis may be height 0
    assert store.get_height() == 0
    with pytest.raises(ValueError):
        store.commit(store.begin(), 0)
    store.commit(store.begin(), 1)
    with pytest.raises(ValueError):
        store.commit(store.begin(), 1)


def test_buffer_of_other_backend_rejected(make_backend: BackendFactory) -> None:
    store = CommitStore(make_backend())
    other = CommitStore(make_backend())
    with pytest.raises(ValueError):
        store.commit(other.begin(), 1)


def test_committed_view_is_stable(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    store.commit(buf, 1)
    view = store.get_committed_view()
    buf = store.begin()
    buf.set(b"a", b"2")
    buf.set(b"b", b"2")
    assert view.get(b"a") == b"1"  # pending writes are invisible
    store.commit(buf, 2)
    assert view.get(b"a") == b"1" and view.get(b"b") is None  # and so is the next commit
    assert list(view.iterate(None, b"\xff")) == [(b"a", b"1")]
    assert store.get_committed_view().get(b"a") == b"2"


def test_verify_detects_state_written_behind_its_back(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    store.commit(buf, 1)
    backend.write_batch({b"a": b"tampered"}, [])
    assert not store.verify_app_hash()


def test_metadata_is_validated_on_open(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    store.commit(buf, 1)
    backend.write_batch({STATE_SUM_KEY: (12345).to_bytes(32, "big")}, [])
    with pytest.raises(StoreError, match="app hash"):
        CommitStore(backend)
    backend.write_batch({}, [APP_HASH_KEY])
    with pytest.raises(StoreError, match="incomplete"):
        CommitStore(backend)


def test_state_without_metadata_is_hashed_on_open(backend: KVBackend) -> None:
    backend.write_batch({b"a": b"1", b"b": b"2"}, [])
    store = CommitStore(backend)
    assert store.get_height() == 0
    assert store.get_app_hash() == compute_app_hash(compute_state_sum(backend.iterate()))
    assert store.get_app_hash() != EMPTY_APP_HASH


def test_closed_commit_store(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"a", b"1")
    store.close()
    with pytest.raises(StoreClosedError):
        store.commit(buf, 1)
    with pytest.raises(StoreClosedError):
        buf.get(b"zz")
    with pytest.raises(StoreClosedError):
        store.get_committed_view()
    assert buf.is_dirty()  # a failed commit keeps the block's writes


def test_reopen_leveldb_keeps_height_and_hash(tmp_path: Path) -> None:
    path = tmp_path / "chain"
    store = CommitStore(LevelDBBackend(path))
    for height in (1, 2, 3):
        buf = store.begin()
        buf.set(b"h", height.to_bytes(8, "big"))
        buf.set(height.to_bytes(1, "big"), b"x")
        if height == 3:
            buf.delete(b"\x01")
        store.commit(buf, height)
    app_hash = store.get_app_hash()
    store_sum = store.get_state_sum()
    store.close()

    reopened = CommitStore(LevelDBBackend(path, create_if_missing=False))
    try:
        assert reopened.get_height() == 3
        assert reopened.get_app_hash() == app_hash
        assert reopened.get_state_sum() == store_sum
        assert reopened.verify_app_hash()
        buf = reopened.begin()
        assert buf.get(b"h") == (3).to_bytes(8, "big") and buf.get(b"\x01") is None
        buf.set(b"\x04", b"y")
        reopened.commit(buf, 4)
        assert reopened.verify_app_hash()
    finally:
        reopened.close()
