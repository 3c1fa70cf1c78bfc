"""Differential test: BlockBuffer over LevelDB, BlockBuffer over memory and a plain dict model
must agree on every read, iteration and app hash through random block sequences."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from keepersim.store import (
    CommitStore,
    LevelDBBackend,
    MemoryBackend,
    PrefixStore,
    compute_app_hash,
    compute_state_sum,
)

# Few distinct bytes so keys collide, nest as prefixes and straddle bounds; 0xff appears
# inside keys but never first (reserved), and may start a bound.
_BYTES = st.sampled_from([0x00, 0x01, 0x61, 0xFE, 0xFF])
ANY_KEY = st.lists(_BYTES, max_size=3).map(bytes)
KEY = ANY_KEY.filter(lambda k: not k.startswith(b"\xff"))
BOUND = st.none() | ANY_KEY
VALUE = st.binary(max_size=2)

OP = st.one_of(
    st.tuples(st.just("set"), KEY, VALUE),
    st.tuples(st.just("set"), KEY, VALUE),
    st.tuples(st.just("delete"), KEY),
    st.tuples(st.just("get"), KEY),
    st.tuples(st.just("iterate"), BOUND, BOUND, st.booleans()),
    st.tuples(st.just("prefix_iterate"), KEY, BOUND, st.booleans()),
    st.tuples(st.just("mutate_while_iterating"), KEY, VALUE, st.booleans()),
    st.tuples(st.just("commit")),
    st.tuples(st.just("discard")),
    st.tuples(st.just("committed_view"), st.booleans()),
)


def in_range(key: bytes, start: bytes | None, stop: bytes | None) -> bool:
    return (start is None or key >= start) and (stop is None or key < stop)


class Model:
    """Plain dicts: committed state plus this block's writes (None = deleted)."""

    def __init__(self) -> None:
        self.committed: dict[bytes, bytes] = {}
        self.pending: dict[bytes, bytes | None] = {}

    def view(self) -> dict[bytes, bytes]:
        state = dict(self.committed)
        for key, value in self.pending.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        return state

    def iterate(
        self, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> list[tuple[bytes, bytes]]:
        items = sorted((k, v) for k, v in self.view().items() if in_range(k, start, stop))
        return items[::-1] if reverse else items


@settings(max_examples=300, deadline=None)
@given(st.lists(OP, max_size=60))
# Found by this test: plyvel's reverse scan from start=b"" missed the key b"".
@example([("set", b"", b""), ("commit",), ("prefix_iterate", b"", None, True)])
def test_buffers_over_both_backends_match_dict_model(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = [CommitStore(LevelDBBackend(tmp)), CommitStore(MemoryBackend())]
        try:
            run(ops, stores)
        finally:
            for store in stores:
                store.close()


def run(ops: list[tuple[Any, ...]], stores: list[CommitStore]) -> None:
    model = Model()
    buffers = [store.begin() for store in stores]
    height = 0
    for op in ops:
        kind = op[0]
        if kind == "set":
            for buf in buffers:
                buf.set(op[1], op[2])
            model.pending[op[1]] = op[2]
        elif kind == "delete":
            for buf in buffers:
                buf.delete(op[1])
            model.pending[op[1]] = None
        elif kind == "get":
            expected = model.view().get(op[1])
            for buf in buffers:
                assert buf.get(op[1]) == expected
                assert buf.has(op[1]) is (expected is not None)
        elif kind == "iterate":
            _, start, stop, reverse = op
            expected_items = model.iterate(start, stop, reverse)
            for buf in buffers:
                assert list(buf.iterate(start, stop, reverse)) == expected_items
        elif kind == "prefix_iterate":
            _, prefix, start, reverse = op
            n = len(prefix)
            expected_items = [
                (k[n:], v)
                for k, v in model.iterate(None, None, reverse)
                if k.startswith(prefix) and (start is None or k[n:] >= start)
            ]
            for buf in buffers:
                assert list(PrefixStore(buf, prefix).iterate(start, None, reverse)) == (
                    expected_items
                )
        elif kind == "mutate_while_iterating":
            # Writes made mid-iteration must not crash nor change what the iteration yields.
            _, key, value, reverse = op
            expected_items = model.iterate(None, None, reverse)
            for buf in buffers:
                seen = []
                for i, item in enumerate(buf.iterate(reverse=reverse)):
                    seen.append(item)
                    buf.set(key + bytes([i % 3]), value)
                    buf.delete(item[0])
                assert seen == expected_items
            for i, (k, _) in enumerate(expected_items):
                model.pending[key + bytes([i % 3])] = value
                model.pending[k] = None
        elif kind == "commit":
            height += 1
            hashes = {store.commit(buf, height) for store, buf in zip(stores, buffers, strict=True)}
            model.committed = model.view()
            model.pending = {}
            assert hashes == {compute_app_hash(compute_state_sum(model.committed.items()))}
            for store, buf in zip(stores, buffers, strict=True):
                assert not buf.is_dirty()
                assert store.get_height() == height
                assert store.verify_app_hash()
                assert dict(store.backend.iterate(None, b"\xff")) == model.committed
        elif kind == "discard":
            for buf in buffers:
                buf.discard()
            model.pending = {}
        elif kind == "committed_view":
            expected_items = sorted(model.committed.items(), reverse=op[1])
            for store in stores:
                view = store.get_committed_view()
                assert list(view.iterate(None, b"\xff", op[1])) == expected_items
        else:  # pragma: no cover
            raise AssertionError(kind)
    for buf in buffers:
        assert buf.is_dirty() is bool(model.pending)
        assert list(buf.iterate()) == model.iterate(None, None, False)
