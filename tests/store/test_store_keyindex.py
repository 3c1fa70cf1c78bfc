"""The state cache's key index (keepersim.store.keyindex) is the plain form, a sorted list of
all the keys, only grouped by collection: the same keys in the same order for any range, after
any sequence of inserts and removals, in lists or in SortedLists (a small ``large``)."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from keepersim.store.keyindex import KeyIndex

# Short keys over a few first bytes (the empty key included), so groups fill, empty and meet.
KEYS = st.binary(max_size=3).map(lambda b: bytes(x % 4 for x in b))
BOUNDS = st.none() | KEYS


def get_plain_range(
    keys: list[bytes], start: bytes | None, stop: bytes | None, reverse: bool
) -> list[bytes]:
    lo = 0 if start is None else bisect_left(keys, start)
    hi = len(keys) if stop is None else bisect_left(keys, stop)
    found = keys[lo:hi] if lo < hi else []
    return found[::-1] if reverse else found


class KeyIndexMachine(RuleBasedStateMachine):
    """The index against a sorted list of its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.plain: list[bytes] = []
        self.index = KeyIndex()

    @initialize(keys=st.sets(KEYS, max_size=8), large=st.sampled_from([1, 2, 3, 1 << 14]))
    def open(self, keys: set[bytes], large: int) -> None:
        self.plain = sorted(keys)
        self.index = KeyIndex(keys, large=large)

    @rule(key=KEYS)
    def add(self, key: bytes) -> None:
        if key not in self.plain:
            self.plain.insert(bisect_left(self.plain, key), key)
            self.index.add(key)

    @precondition(lambda self: self.plain)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.plain))
        self.plain.remove(key)
        self.index.remove(key)

    @rule(start=BOUNDS, stop=BOUNDS, reverse=st.booleans())
    def get_range(self, start: bytes | None, stop: bytes | None, reverse: bool) -> None:
        assert self.index.get_range(start, stop, reverse) == get_plain_range(
            self.plain, start, stop, reverse
        )

    @rule(key=KEYS)
    def copy_is_independent(self, key: bytes) -> None:
        copy = self.index.copy()
        if key in self.plain:
            copy.remove(key)
        else:
            copy.add(key)
        assert list(self.index) == self.plain

    @invariant()
    def same_keys(self) -> None:
        assert list(self.index) == self.plain
        assert len(self.index) == len(self.plain)


TestKeyIndexMachine = KeyIndexMachine.TestCase
TestKeyIndexMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


@settings(max_examples=200, deadline=None)
@given(keys=st.sets(KEYS), start=BOUNDS, stop=BOUNDS, reverse=st.booleans())
def test_a_range_is_the_sorted_keys_range(
    keys: set[bytes], start: bytes | None, stop: bytes | None, reverse: bool
) -> None:
    plain = sorted(keys)
    for large in (1, 1 << 14):
        index = KeyIndex(keys, large=large)
        assert index.get_range(start, stop, reverse) == get_plain_range(plain, start, stop, reverse)
