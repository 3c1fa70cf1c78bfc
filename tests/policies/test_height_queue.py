"""The policies' height-keyed wake-up queue, on real LevelDB and in memory.

pop_due reads only the heights that hold a key, known from the last flushed block (a
per-backend hint; without it, one scan), instead of walking the tombstones of every past
wake-up; these tests pin what that hint must never change.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.keeper.policies.base import HeightQueue
from keepersim.store import KVBackend, LevelDBBackend, MemoryBackend
from keepersim.store.committed import CommitStore

PREFIX = b"\x41\x09"
BackendFactory = Callable[[str], KVBackend]


@pytest.fixture(params=["leveldb", "memory"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    opened: list[KVBackend] = []

    def make(name: str) -> KVBackend:
        backend: KVBackend = (
            LevelDBBackend(tmp_path / name) if request.param == "leveldb" else MemoryBackend()
        )
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class Blocks:
    """Blocks over one store: each pops (or not), schedules, flushes, commits (or discards)."""

    def __init__(self, backend: KVBackend) -> None:
        self.store = CommitStore(backend)
        self.height = self.store.get_height()

    def run(
        self,
        schedule: Sequence[tuple[int, str]] = (),
        *,
        pop: bool = True,
        schedule_first: bool = False,
        commit: bool = True,
    ) -> list[str]:
        """One block; returns what its pop took. Schedule heights are absolute."""
        height = self.height + 1
        buffer = self.store.begin()
        queue = HeightQueue(buffer, PREFIX, height)
        popped: list[str] = []
        if schedule_first:
            for at, item in schedule:
                queue.schedule(at, item)
        if pop:
            popped = queue.pop_due()
        if not schedule_first:
            for at, item in schedule:
                queue.schedule(at, item)
        queue.flush()
        if commit:
            self.store.commit(buffer, height)
            self.height = height
        else:
            buffer.discard()
        return popped


def test_items_pop_once_at_their_height(make_backend: BackendFactory) -> None:
    blocks = Blocks(make_backend("a"))
    blocks.run([(3, "b"), (3, "a"), (5, "c")], pop=False)
    popped = [blocks.run() for _ in range(5)]
    assert popped == [[], ["a", "b"], [], ["c"], []]  # heights 2..6


def test_a_past_height_pops_at_the_next_pop(make_backend: BackendFactory) -> None:
    blocks = Blocks(make_backend("a"))
    blocks.run()  # height 1: a pop sets the hint
    # Height 2: pop first, then schedule for heights already past: due at height 3.
    assert blocks.run([(1, "x"), (2, "y")]) == []
    assert blocks.run() == ["x", "y"]


def test_scheduled_and_popped_in_one_block(make_backend: BackendFactory) -> None:
    blocks = Blocks(make_backend("a"))
    assert blocks.run([(1, "now")], schedule_first=True) == ["now"]
    assert blocks.run() == []


def test_a_discarded_block_loses_no_wake_up(make_backend: BackendFactory) -> None:
    blocks = Blocks(make_backend("a"))
    blocks.run([(2, "a")], pop=False)
    assert blocks.run(commit=False) == ["a"]  # height 2 fails...
    assert blocks.run() == ["a"]  # ...and its retry still sees it


def test_a_reopened_store_scans_in_full(tmp_path: Path) -> None:
    """A new backend object has no hint: its first pop scans the whole queue (LevelDB only, as
    a memory store cannot be reopened)."""
    first = LevelDBBackend(tmp_path / "a")
    blocks = Blocks(first)
    blocks.run([(4, "late")], pop=False)
    blocks.run()
    first.close()
    reopened = Blocks(LevelDBBackend(tmp_path / "a"))
    try:
        assert [reopened.run() for _ in range(2)] == [[], ["late"]]
    finally:
        reopened.store.close()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.booleans(),
            st.lists(st.tuples(st.integers(-3, 12), st.sampled_from("abcd"))),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_matches_a_model_over_many_blocks(
    blocks_spec: list[tuple[bool, bool, list[tuple[int, str]]]],
) -> None:
    """Schedules relative to the block's height (some in the past), pops in most blocks, some
    blocks discarded: the queue pops exactly what a plain dict model says."""
    with tempfile.TemporaryDirectory() as folder:
        for backend in (LevelDBBackend(Path(folder) / "db"), MemoryBackend()):
            try:
                _check_against_model(backend, blocks_spec)
            finally:
                backend.close()


def _check_against_model(
    backend: KVBackend, spec: list[tuple[bool, bool, list[tuple[int, str]]]]
) -> None:
    blocks = Blocks(backend)
    model: dict[int, set[str]] = {}
    for commit, pop, schedules in spec:
        height = blocks.height + 1
        trial = {h: set(items) for h, items in model.items()}
        expected: list[str] = []
        if pop:
            due = [h for h in trial if h <= height]
            expected = sorted(set().union(*(trial.pop(h) for h in due)))
        absolute = [(height + offset, item) for offset, item in schedules]
        assert blocks.run(absolute, pop=pop, commit=commit) == expected
        if commit:
            for at, item in absolute:
                trial.setdefault(max(at, height), set()).add(item)
            model = trial
