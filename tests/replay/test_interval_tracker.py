"""IntervalTracker.observe given the same set object again (the replay hands the last block's
kept-out set back while the table keeps the same participants out) records exactly what it
records given an equal copy each time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keepersim.replay.common import IntervalTracker

blocks_strategy = st.lists(
    st.tuples(st.frozensets(st.sampled_from("abcd"), max_size=3), st.booleans()),
    max_size=40,
)


@given(blocks=blocks_strategy)
def test_observing_the_same_set_object_equals_observing_copies(
    blocks: list[tuple[frozenset[str], bool]],
) -> None:
    reused, copied = IntervalTracker(), IntervalTracker()
    last: frozenset[str] = frozenset()
    height = 10
    for excluded, same in blocks:
        if same or excluded == last:
            excluded = last  # noqa: PLW2901 - the object the replay hands back
        reused.observe(height, excluded)
        copied.observe(height, frozenset(set(excluded)))
        last = excluded
        height += 1
        assert reused.open == copied.open
    reused.finish(height)
    copied.finish(height)
    assert reused.to_dict() == copied.to_dict()
    assert reused.last_height == copied.last_height
