"""Checkpoint metadata rides in the block's batch without touching the app hash; the journal of
incremental dicts always rebuilds the dict it was fed; the loader refuses foreign classes."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.store import KVBackend, MemoryBackend
from keepersim.store.checkpoint import (
    DictJournal,
    ResumeError,
    compute_fingerprint,
    decode_state,
    encode_checkpoint,
    encode_state,
    load_message,
    read_checkpoint,
)
from keepersim.store.committed import RUN_META_PREFIX, CommitStore
from keepersim.types.messages import MsgFinishInference, Participant
from keepersim.types.pb.keepersim.v1.health_pb2 import OpenInference, WindowedEntry
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes


def _commit(store: CommitStore, height: int, puts: dict[bytes, bytes], meta: Any = None) -> bytes:
    buffer = store.begin()
    for key, value in puts.items():
        buffer.set(key, value)
    return store.commit(buffer, height, meta)


def test_meta_is_committed_with_the_block_and_outside_the_app_hash(backend: KVBackend) -> None:
    plain = CommitStore(MemoryBackend())
    store = CommitStore(backend)
    key = RUN_META_PREFIX + b"x/1"
    state = {b"a": b"1", b"b": b"2"}
    assert _commit(store, 1, state, {key: b"v"}) == _commit(plain, 1, state)
    assert store.get_meta(key) == b"v"
    assert store.iterate_meta(RUN_META_PREFIX + b"x/") == [(key, b"v")]
    assert _commit(store, 2, {b"a": b"3"}, {key: None}) == _commit(plain, 2, {b"a": b"3"})
    assert store.get_meta(key) is None
    assert store.verify_app_hash()


def test_meta_outside_the_run_prefix_is_refused_before_anything_is_written() -> None:
    store = CommitStore(MemoryBackend())
    with pytest.raises(ValueError, match="must start with"):
        _commit(store, 1, {b"a": b"1"}, {b"\xffmeta/height": b"x"})
    assert store.get_height() == 0 and store.get_meta(b"\xffmeta/height") is None


_values = st.one_of(
    st.integers(),
    st.lists(st.integers(), max_size=4),
    st.tuples(st.integers(), st.text(max_size=5)),
)
_steps = st.lists(
    st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from(["set", "append", "delete"]), _values),
        max_size=6,
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_journal_deltas_rebuild_the_dict(steps: list[list[tuple[int, str, Any]]]) -> None:
    """Random sets, in-place appends and deletions between checkpoints: applying each delta to
    a store gives back the live dict, and so does loading it in a fresh journal."""
    prefix = RUN_META_PREFIX + b"d/"
    live: dict[int, Any] = {}
    stored: dict[bytes, bytes] = {}
    journal = DictJournal()
    for changes in steps:
        for key, op, value in changes:
            if op == "delete":
                live.pop(key, None)
            elif op == "append" and isinstance(live.get(key), list):
                live[key].append(value)
            else:
                live[key] = value
        for k, v in journal.get_delta(prefix, live).items():
            if v is None:
                stored.pop(k, None)
            else:
                stored[k] = v
        loaded = DictJournal().load(prefix, sorted(stored.items()))
        assert loaded == live
        assert journal.get_delta(prefix, live) == {}


def test_state_round_trips_messages_and_refuses_foreign_classes() -> None:
    msg = MsgFinishInference(inference_id="r", executed_by="a")
    assert decode_state(encode_state({"m": [msg], "s": {1, 2}})) == {"m": [msg], "s": {1, 2}}

    class Evil:
        def __reduce__(self) -> Any:
            return (print, ("pwned",))

    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        decode_state(pickle.dumps(Evil()))


@pytest.mark.parametrize(
    "name",
    [
        "os.system",  # a module a keepersim module imports, reached through it
        "compute_fingerprint",  # a keepersim function
        "read_checkpoint",
    ],
)
def test_loader_refuses_anything_callable_but_classes_and_rebuilders(name: str) -> None:
    """A crafted store cannot name a function to call, not even through a keepersim module's
    attribute (protocol 4 resolves dotted names)."""
    module = b"keepersim.store.checkpoint"
    crafted = (
        b"\x80\x04"
        + b"\x8c"
        + bytes([len(module)])
        + module
        + b"\x8c"
        + bytes([len(name)])
        + name.encode()
        + b"\x93"  # STACK_GLOBAL
        + b"\x8c\x04true\x85R."  # ("true",) REDUCE STOP
    )
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        decode_state(crafted)


def test_messages_load_by_their_full_name_from_every_generated_module() -> None:
    """Every generated message, the chain's (all its vendored modules) and keepersim's, loads by
    its full name, and by no other: names are never aliased across the two packages (a
    checkpoint written before the chain's types cannot resume on them anyway)."""
    entry = WindowedEntry(address="a", failure_bits=5, open=[OpenInference(inference_id="r")])
    data = entry.SerializeToString()
    assert load_message("keepersim.v1.WindowedEntry", data) == entry
    assert load_message("inference.inference.MsgFinishInference", b"") == MsgFinishInference()
    participant = Participant(address="p", weight=3)
    assert load_message("inference.inference.Participant", participant.SerializeToString()) == (
        participant
    )
    nodes = ParticipantNodes(address="p", models=["m"])
    assert load_message("keepersim.v1.ParticipantNodes", nodes.SerializeToString()) == nodes
    for name in ("keepersim.v1.MsgFinishInference", "inference.inference.WindowedEntry"):
        with pytest.raises(pickle.UnpicklingError, match="unknown message type"):
            load_message(name, b"")


def test_read_checkpoint_refuses_another_runs_fingerprint() -> None:
    mine, other = compute_fingerprint({"seed": 1}), compute_fingerprint({"seed": 2})
    meta = encode_checkpoint(mine, {"x": 1})
    assert read_checkpoint(meta.get, mine, "store") == {"x": 1}
    assert read_checkpoint({}.get, mine, "store") is None
    with pytest.raises(ResumeError, match="other inputs"):
        read_checkpoint(meta.get, other, "store")
