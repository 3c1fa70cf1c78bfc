"""BlockBuffer and PrefixStore over both backends: overlay reads, merged iteration, discard."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.store import BlockBuffer, CommitStore, KVBackend, PrefixStore
from keepersim.store.memory import MemoryBackend

BASE = {b"a": b"1", b"b": b"2", b"c": b"3", b"d": b"4", b"e\x00": b"5"}


def seeded(backend: KVBackend) -> BlockBuffer:
    backend.write_batch(BASE, [])
    return BlockBuffer(backend)


def test_read_your_writes(backend: KVBackend) -> None:
    buf = seeded(backend)
    buf.set(b"a", b"new")
    buf.set(b"z", b"26")
    buf.delete(b"b")
    buf.delete(b"absent")
    assert buf.get(b"a") == b"new"
    assert buf.get(b"z") == b"26"
    assert buf.get(b"b") is None
    assert buf.get(b"c") == b"3"
    assert buf.has(b"a") and buf.has(b"z") and buf.has(b"c")
    assert not buf.has(b"b") and not buf.has(b"absent")
    buf.set(b"b", b"back")  # a put after a delete wins
    assert buf.get(b"b") == b"back"
    # None of it reached the backend.
    assert dict(backend.iterate()) == BASE


def test_pending_and_dirty(backend: KVBackend) -> None:
    buf = seeded(backend)
    assert not buf.is_dirty()
    assert buf.pending() == ({}, [])
    buf.set(b"a", b"x")
    buf.delete(b"b")
    buf.set(b"c", b"y")
    buf.delete(b"c")
    assert buf.is_dirty()
    puts, deletes = buf.pending()
    assert puts == {b"a": b"x"}
    assert sorted(deletes) == [b"b", b"c"]


def test_discard_leaves_backend_untouched(backend: KVBackend) -> None:
    buf = seeded(backend)
    buf.set(b"a", b"x")
    buf.set(b"q", b"y")
    buf.delete(b"b")
    list(buf.iterate())  # builds the sorted overlay; discard must drop it too
    buf.discard()
    assert not buf.is_dirty()
    assert buf.get(b"a") == b"1" and buf.get(b"q") is None and buf.get(b"b") == b"2"
    assert list(buf.iterate()) == sorted(BASE.items())
    assert dict(backend.iterate()) == BASE


def expected_view(
    writes: dict[bytes, bytes | None],
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
) -> list[tuple[bytes, bytes]]:
    state: dict[bytes, bytes] = dict(BASE)
    for k, v in writes.items():
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    out = sorted(
        (k, v)
        for k, v in state.items()
        if (start is None or k >= start) and (stop is None or k < stop)
    )
    return out[::-1] if reverse else out


WRITES: dict[bytes, bytes | None] = {
    b"": b"empty",
    b"a": None,
    b"b": b"B",
    b"bb": b"BB",
    b"c": None,
    b"cc": None,  # tombstone of an absent key
    b"e\x00": None,
    b"f": b"F",
}


@pytest.mark.parametrize(
    ("start", "stop"),
    [
        (None, None),
        (b"b", b"d"),
        (b"a", b"a\x00"),
        (b"bb", None),
        (None, b"c"),
        (b"cc", b"cd"),
        (b"d", b"d\x00"),
        (b"f", b"g"),
        (b"g", None),
        (b"c", b"b"),
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_merged_iteration(
    backend: KVBackend, start: bytes | None, stop: bytes | None, reverse: bool
) -> None:
    buf = seeded(backend)
    for k, v in WRITES.items():
        if v is None:
            buf.delete(k)
        else:
            buf.set(k, v)
    assert list(buf.iterate(start, stop, reverse)) == expected_view(WRITES, start, stop, reverse)


def test_iteration_sees_keys_added_after_previous_iteration(backend: KVBackend) -> None:
    buf = seeded(backend)
    buf.set(b"m", b"1")
    assert [k for k, _ in buf.iterate()] == [b"a", b"b", b"c", b"d", b"e\x00", b"m"]
    buf.set(b"0", b"2")
    buf.delete(b"c")
    assert [k for k, _ in buf.iterate()] == [b"0", b"a", b"b", b"d", b"e\x00", b"m"]
    assert [k for k, _ in buf.iterate(reverse=True)] == [b"m", b"e\x00", b"d", b"b", b"a", b"0"]


@pytest.mark.parametrize("reverse", [False, True])
def test_modifying_during_iteration(backend: KVBackend, reverse: bool) -> None:
    buf = seeded(backend)
    buf.set(b"bb", b"x")
    expected = expected_view({b"bb": b"x"}, None, None, reverse)
    seen = []
    for k, v in buf.iterate(reverse=reverse):
        seen.append((k, v))
        buf.delete(k)
        buf.set(k + b"\x00", b"added")
        buf.set(b"0" + k, b"added")
    assert seen == expected
    assert [k for k, _ in buf.iterate()] == sorted(
        [k + b"\x00" for k, _ in expected] + [b"0" + k for k, _ in expected]
    )


def test_reserved_keys_rejected_and_hidden(backend: KVBackend) -> None:
    store = CommitStore(backend)
    buf = store.begin()
    buf.set(b"\xfe\xff", b"ok")  # just below the reserved space
    for key in (b"\xff", b"\xffmeta/height", b"\xff\x00"):
        with pytest.raises(ValueError, match="reserved"):
            buf.set(key, b"x")
        with pytest.raises(ValueError, match="reserved"):
            buf.delete(key)
    store.commit(buf, 1)
    buf = store.begin()
    assert backend.get(b"\xffmeta/height") is not None
    assert list(buf.iterate()) == [(b"\xfe\xff", b"ok")]
    assert list(buf.iterate(b"\xfe", b"\xff\xff", reverse=True)) == [(b"\xfe\xff", b"ok")]
    assert list(buf.iterate(b"\xff")) == []


def test_set_rejects_non_bytes(backend: KVBackend) -> None:
    buf = BlockBuffer(backend)
    with pytest.raises(TypeError):
        buf.set(b"k", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        buf.set("k", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        buf.delete("k")  # type: ignore[arg-type]
    assert not buf.is_dirty()


def test_prefix_store_strips_and_isolates(backend: KVBackend) -> None:
    buf = BlockBuffer(backend)
    buf.set(b"a", b"outside-before")
    buf.set(b"b", b"outside-after")
    buf.set(b"a\xff", b"outside-ff")
    store = PrefixStore(buf, b"a\x01")
    store.set(b"x", b"1")
    store.set(b"", b"0")
    store.set(b"y\xff", b"2")
    assert buf.get(b"a\x01x") == b"1"
    assert store.get(b"x") == b"1" and store.has(b"x") and not store.has(b"z")
    assert list(store.iterate()) == [(b"", b"0"), (b"x", b"1"), (b"y\xff", b"2")]
    assert list(store.iterate(b"x", reverse=True)) == [(b"y\xff", b"2"), (b"x", b"1")]
    assert list(store.iterate(None, b"y")) == [(b"", b"0"), (b"x", b"1")]
    store.delete(b"x")
    assert buf.get(b"a\x01x") is None
    assert list(store.iterate()) == [(b"", b"0"), (b"y\xff", b"2")]


def test_prefix_store_nests(backend: KVBackend) -> None:
    buf = BlockBuffer(backend)
    outer = PrefixStore(buf, b"p/")
    inner = PrefixStore(outer, b"q/")
    sibling = PrefixStore(outer, b"r/")
    inner.set(b"k1", b"v1")
    inner.set(b"k2", b"v2")
    sibling.set(b"k1", b"s1")
    assert inner.prefix == b"p/q/"
    assert buf.get(b"p/q/k1") == b"v1"
    assert outer.get(b"q/k2") == b"v2"
    assert list(inner.iterate()) == [(b"k1", b"v1"), (b"k2", b"v2")]
    assert list(inner.iterate(reverse=True)) == [(b"k2", b"v2"), (b"k1", b"v1")]
    assert list(outer.iterate()) == [(b"q/k1", b"v1"), (b"q/k2", b"v2"), (b"r/k1", b"s1")]
    deeper = PrefixStore(inner, b"")
    assert list(deeper.iterate()) == list(inner.iterate())
    sibling.delete(b"k1")
    assert list(outer.iterate()) == [(b"q/k1", b"v1"), (b"q/k2", b"v2")]


def test_prefix_store_over_committed_state(backend: KVBackend) -> None:
    # Entries come from the backend, the buffer overlay, or both.
    store = CommitStore(backend)
    buf = store.begin()
    PrefixStore(buf, b"c/").set(b"old", b"1")
    PrefixStore(buf, b"c/").set(b"gone", b"1")
    store.commit(buf, 1)
    buf = store.begin()
    view = PrefixStore(buf, b"c/")
    view.set(b"new", b"2")
    view.delete(b"gone")
    assert list(view.iterate()) == [(b"new", b"2"), (b"old", b"1")]


KEYS = st.sampled_from([b"a", b"b", b"c", b"x", b"y", b"e\x00"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.binary(min_size=1, max_size=2)),
        st.tuples(st.just("delete"), KEYS, st.just(b"")),
        st.tuples(st.just("iterate"), st.just(b""), st.just(b"")),
    ),
    max_size=12,
)


def apply(buf: BlockBuffer, ops: list[tuple[str, bytes, bytes]]) -> None:
    for op, key, value in ops:
        if op == "set":
            buf.set(key, value)
        elif op == "delete":
            buf.delete(key)
        else:
            list(buf.iterate())  # brings the sorted key list up to date mid-way


def snapshot(buf: BlockBuffer) -> tuple[object, ...]:
    keys = [b"a", b"b", b"c", b"x", b"y", b"e\x00", b"d"]
    puts, deletes = buf.pending()
    return (
        list(buf.iterate()),
        list(buf.iterate(reverse=True)),
        list(buf.iterate(b"b", b"y")),
        [buf.get(k) for k in keys],
        puts,
        sorted(deletes),
    )


@settings(max_examples=300, deadline=None)
@given(before=OPS, inside=OPS, after=OPS, merge=st.booleans())
def test_nested_scope_discard_restores_and_merge_keeps(
    before: list[tuple[str, bytes, bytes]],
    inside: list[tuple[str, bytes, bytes]],
    after: list[tuple[str, bytes, bytes]],
    merge: bool,
) -> None:
    """A discarded scope leaves the buffer exactly as before it; a merged one as if its writes
    had been made without a scope; and the buffer keeps working after either."""
    scoped, plain = BlockBuffer(MemoryBackend()), BlockBuffer(MemoryBackend())
    for buf in (scoped, plain):
        buf.backend.write_batch(BASE, [])
        apply(buf, before)
    scoped.begin_nested()
    apply(scoped, inside)
    if merge:
        scoped.merge_nested()
        apply(plain, inside)
    else:
        scoped.discard_nested()
    assert snapshot(scoped) == snapshot(plain)
    apply(scoped, after)
    apply(plain, after)
    assert snapshot(scoped) == snapshot(plain)
    with pytest.raises(RuntimeError, match="already open"):
        scoped.begin_nested()
        scoped.begin_nested()
