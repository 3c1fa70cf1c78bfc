"""Conformance suite of the KVBackend contract, run against LevelDB and memory alike."""

from __future__ import annotations

from pathlib import Path

import plyvel
import pytest

from keepersim.store import (
    KVBackend,
    LevelDBBackend,
    MemoryBackend,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    prefix_end,
)

# Deliberately unsorted, with keys that are prefixes of one another and edge bytes.
KEYS = [b"b", b"a\x00", b"", b"ab", b"\x00", b"a", b"\xfe\xff", b"a\xff", b"\x01"]


def fill(backend: KVBackend) -> dict[bytes, bytes]:
    data = {k: b"v" + k for k in KEYS}
    backend.write_batch(data, [])
    return data


def test_get_put_overwrite_delete(backend: KVBackend) -> None:
    assert backend.get(b"k") is None
    backend.write_batch({b"k": b"1"}, [])
    assert backend.get(b"k") == b"1"
    backend.write_batch({b"k": b"2"}, [])
    assert backend.get(b"k") == b"2"
    backend.write_batch({}, [b"k", b"never-there"])
    assert backend.get(b"k") is None
    backend.write_batch({b"": b"empty key"}, [])
    assert backend.get(b"") == b"empty key"


def test_iterate_sorted_bytewise(backend: KVBackend) -> None:
    data = fill(backend)
    assert list(backend.iterate()) == sorted(data.items())
    assert list(backend.iterate(reverse=True)) == sorted(data.items(), reverse=True)


@pytest.mark.parametrize(
    ("start", "stop"),
    [
        (b"a", b"b"),
        (b"a", None),
        (None, b"a\x00"),
        (b"a\x00", b"a\xff"),
        (b"\x00", b"\x00"),
        (b"b", b"a"),
        (b"zzz", None),
        (None, b""),
        (b"", b"\x01"),
        (b"a\xff", b"b"),  # one key, equal to start (plyvel 1.5.1 reverse bug)
        (b"", b"\x00"),  # only the empty key, equal to start
        (b"b", None),
        (b"a", b"a\x00\x00"),
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_iterate_bounds(
    backend: KVBackend, start: bytes | None, stop: bytes | None, reverse: bool
) -> None:
    data = fill(backend)
    expected = sorted(
        (k, v)
        for k, v in data.items()
        if (start is None or k >= start) and (stop is None or k < stop)
    )
    if reverse:
        expected.reverse()
    assert list(backend.iterate(start, stop, reverse)) == expected
    assert list(backend.iterate(start=start, stop=stop, reverse=reverse)) == expected


def test_batch_applies_puts_and_deletes_together(backend: KVBackend) -> None:
    fill(backend)
    backend.write_batch({b"new": b"n", b"a": b"changed"}, [b"b", b"ab"])
    got = dict(backend.iterate())
    assert got[b"new"] == b"n" and got[b"a"] == b"changed"
    assert b"b" not in got and b"ab" not in got


def test_batch_put_and_delete_of_same_key_deletes(backend: KVBackend) -> None:
    backend.write_batch({b"k": b"v"}, [b"k"])
    assert backend.get(b"k") is None
    assert list(backend.iterate()) == []


def test_batch_is_all_or_nothing(backend: KVBackend) -> None:
    data = fill(backend)
    bad_puts: dict[bytes, bytes] = {b"zz": b"1", b"a": b"overwritten"}
    bad_puts["str-value"] = "not bytes"  # type: ignore[index, assignment]
    with pytest.raises(TypeError):
        backend.write_batch(bad_puts, [b"b"])
    bad_deletes: list[bytes] = [b"b", "str-key"]  # type: ignore[list-item]
    with pytest.raises(TypeError):
        backend.write_batch({b"zz": b"1"}, bad_deletes)
    assert dict(backend.iterate()) == data


def test_deletes_may_be_any_iterable(backend: KVBackend) -> None:
    fill(backend)
    backend.write_batch({}, (k for k in [b"a", b"b"]))
    assert backend.get(b"a") is None and backend.get(b"b") is None


def test_snapshot_unaffected_by_later_writes(backend: KVBackend) -> None:
    data = fill(backend)
    snap = backend.snapshot()
    backend.write_batch({b"a": b"changed", b"new": b"n"}, [b"b"])
    assert snap.get(b"a") == b"va"
    assert snap.get(b"b") == b"vb"
    assert snap.get(b"new") is None
    assert list(snap.iterate()) == sorted(data.items())
    assert list(snap.iterate(b"a", b"b", reverse=True)) == sorted(
        ((k, v) for k, v in data.items() if b"a" <= k < b"b"), reverse=True
    )
    assert backend.get(b"a") == b"changed"
    later = backend.snapshot()
    backend.write_batch({}, [b"a"])
    assert later.get(b"a") == b"changed"
    assert snap.get(b"a") == b"va"


def test_snapshot_reverse_range_holding_only_start(backend: KVBackend) -> None:
    fill(backend)
    snap = backend.snapshot()
    assert list(snap.iterate(b"a\xff", b"b", reverse=True)) == [(b"a\xff", b"va\xff")]
    assert list(snap.iterate(b"\xfe\xff", reverse=True)) == [(b"\xfe\xff", b"v\xfe\xff")]


def test_open_iterator_reads_state_at_creation(backend: KVBackend) -> None:
    fill(backend)
    it = backend.iterate()
    first = next(it)
    backend.write_batch({b"\xfe\xff\x00": b"late"}, [b"b"])
    rest = list(it)
    keys = [first[0]] + [k for k, _ in rest]
    assert keys == sorted(KEYS)


def test_use_after_close_raises(backend: KVBackend) -> None:
    fill(backend)
    snap = backend.snapshot()
    backend.close()
    backend.close()  # idempotent
    with pytest.raises(StoreClosedError):
        backend.get(b"a")
    with pytest.raises(StoreClosedError):
        backend.iterate()
    with pytest.raises(StoreClosedError):
        backend.write_batch({b"x": b"y"}, [])
    with pytest.raises(StoreClosedError):
        backend.snapshot()
    with pytest.raises(StoreClosedError):
        snap.get(b"a")
    assert issubclass(StoreClosedError, StoreError)


def test_memory_snapshot_copy_not_needed_once_dropped() -> None:
    # Copy-on-write bookkeeping: a dropped view must not pin state, a live one must.
    backend = MemoryBackend()
    backend.write_batch({b"a": b"1"}, [])
    snap = backend.snapshot()
    assert backend.snapshot() is snap  # one shared view per version
    del snap
    backend.write_batch({b"a": b"2"}, [])
    assert backend.get(b"a") == b"2"
    assert len(backend) == 1


def test_leveldb_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = LevelDBBackend(path)
    db.write_batch({b"k": b"v"}, [])
    db.close()
    db = LevelDBBackend(str(path), create_if_missing=False)
    try:
        assert db.get(b"k") == b"v"
    finally:
        db.close()


# 1 MB that snappy makes a few KB.
COMPRESSIBLE = {b"k%06d" % i: b"a" * 1000 for i in range(1000)}


def get_table_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.ldb"))


def test_leveldb_writes_tables_uncompressed(tmp_path: Path) -> None:
    """Compaction CPU (keepersim.store.leveldb): 1 MB of very compressible values stays about
    1 MB on disk once compacted into tables."""
    path = tmp_path / "db"
    db = LevelDBBackend(path)
    db.write_batch(COMPRESSIBLE, [])
    db._db.compact_range()  # noqa: SLF001 (the memtable into tables, now)
    db.close()
    assert get_table_bytes(path) > 1_000_000


def test_leveldb_reads_a_compressed_store(tmp_path: Path) -> None:
    """A store written with plyvel's default (snappy) tables opens and reads as before."""
    path = tmp_path / "db"
    raw = plyvel.DB(str(path), create_if_missing=True)
    with raw.write_batch() as wb:
        for key, value in COMPRESSIBLE.items():
            wb.put(key, value)
    raw.compact_range()
    raw.close()
    assert 0 < get_table_bytes(path) < 100_000  # compressed, so the check above can fail
    db = LevelDBBackend(path, create_if_missing=False)
    try:
        assert dict(db.iterate()) == COMPRESSIBLE
    finally:
        db.close()


def test_leveldb_locked_directory(tmp_path: Path) -> None:
    path = tmp_path / "locked"
    db = LevelDBBackend(path)
    try:
        with pytest.raises(StoreLockedError) as info:
            LevelDBBackend(path)
        assert str(path) in str(info.value)
        assert info.value.path == str(path)
    finally:
        db.close()
    LevelDBBackend(path).close()  # the lock is released on close


def test_leveldb_missing_directory_without_create(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        LevelDBBackend(tmp_path / "absent", create_if_missing=False)
    assert not isinstance(info.value, StoreLockedError)
    assert "absent" in str(info.value)


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"a", b"b"),
        (b"a\xff", b"b"),
        (b"a\xff\xff", b"b"),
        (b"\x00", b"\x01"),
        (b"ab\xfe", b"ab\xff"),
        (b"\xff", None),
        (b"\xff\xff", None),
        (b"", None),
    ],
)
def test_prefix_end(prefix: bytes, end: bytes | None) -> None:
    assert prefix_end(prefix) == end
