"""Key codecs of keepersim/types/keys.py: round trips and ordering (Cosmos collections style)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepersim.types import keys
from keepersim.types.errors import KeyCodecError

u64 = st.integers(min_value=0, max_value=keys.U64_MAX)
# Key strings: any text without NUL (NUL is the terminator of non-final parts).
text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24)


@given(u64)
def test_u64_roundtrip(value: int) -> None:
    encoded = keys.encode_u64(value)
    assert len(encoded) == 8
    assert keys.decode_u64(encoded) == value


@given(u64, u64)
def test_u64_big_endian_sorts_numerically(a: int, b: int) -> None:
    assert (keys.encode_u64(a) < keys.encode_u64(b)) == (a < b)


@given(st.lists(u64, min_size=2, max_size=30))
def test_u64_sorted_bytes_are_sorted_numbers(values: list[int]) -> None:
    assert sorted(values, key=keys.encode_u64) == sorted(values)


@pytest.mark.parametrize("bad", [-1, keys.U64_MAX + 1, 1 << 70])
def test_u64_out_of_range(bad: int) -> None:
    with pytest.raises(KeyCodecError, match=f"out of range: {bad}"):
        keys.encode_u64(bad)


@pytest.mark.parametrize("raw", [b"", b"\x00" * 7, b"\x00" * 9])
def test_u64_wrong_length(raw: bytes) -> None:
    with pytest.raises(KeyCodecError, match=f"got {len(raw)}"):
        keys.decode_u64(raw)


@given(text, text)
def test_str_part_roundtrip(a: str, rest: str) -> None:
    encoded = keys.encode_str(a, last=False)
    assert encoded.endswith(b"\x00")
    assert keys.split_str(encoded + rest.encode()) == (a, rest.encode())
    assert keys.encode_str(a, last=True) == a.encode()


def test_str_part_rejects_nul_and_missing_terminator() -> None:
    with pytest.raises(KeyCodecError, match="0x00"):
        keys.encode_str("a\x00b", last=False)
    with pytest.raises(KeyCodecError, match="0x00"):
        keys.encode_str("a\x00", last=True)
    with pytest.raises(KeyCodecError, match="missing 0x00 terminator"):
        keys.split_str(b"abc")


@given(text)
def test_single_string_keys(value: str) -> None:
    assert keys.participant_key(value).decode() == value
    assert keys.inference_key(value).decode() == value


@given(u64, text)
def test_timeout_key_roundtrip(height: int, inference_id: str) -> None:
    assert keys.decode_timeout_key(keys.timeout_key(height, inference_id)) == (height, inference_id)


@given(st.integers(min_value=-2, max_value=keys.U64_MAX + 2), st.text(max_size=12))
def test_timeout_key_is_the_plain_composition(height: int, inference_id: str) -> None:
    """timeout_key's one-go check gives encode_u64 + encode_str(last=True)'s bytes, or its error."""
    try:
        plain: bytes | None = keys.encode_u64(height) + keys.encode_str(inference_id, last=True)
    except KeyCodecError:
        plain = None
    if plain is None:
        with pytest.raises(KeyCodecError):
            keys.timeout_key(height, inference_id)
    else:
        assert keys.timeout_key(height, inference_id) == plain


@given(u64, text)
def test_epoch_group_key_roundtrip(epoch: int, model: str) -> None:
    assert keys.decode_epoch_group_key(keys.epoch_group_key(epoch, model)) == (epoch, model)
    assert keys.epoch_key(epoch) == keys.encode_u64(epoch)


@given(text, u64)
def test_summary_key_roundtrip(address: str, epoch: int) -> None:
    key = keys.summary_key(address, epoch)
    assert keys.decode_summary_key(key) == (address, epoch)
    assert key.startswith(keys.summary_prefix(address))


@given(u64, text)
def test_excluded_key_roundtrip(epoch: int, address: str) -> None:
    assert keys.decode_excluded_key(keys.excluded_key(epoch, address)) == (epoch, address)


@given(u64)
def test_height_key_roundtrip(height: int) -> None:
    assert keys.decode_height_key(keys.height_key(height)) == height


@given(st.lists(text.filter(bool), max_size=12))
def test_address_set_roundtrip(addresses: list[str]) -> None:
    raw = keys.encode_address_set(addresses)
    assert keys.decode_address_set(raw) == sorted(set(addresses), key=str.encode)


def test_decode_short_keys_rejected() -> None:
    with pytest.raises(KeyCodecError):
        keys.decode_timeout_key(b"\x00" * 7)
    for decode in (keys.decode_epoch_group_key, keys.decode_excluded_key, keys.decode_height_key):
        with pytest.raises(KeyCodecError):
            decode(b"\x01\x02")


@given(st.lists(st.tuples(text, u64), min_size=2, max_size=40, unique=True))
def test_summary_keys_do_not_interleave(entries: list[tuple[str, int]]) -> None:
    """Byte order of (address\\0, u64 epoch) keys is (address bytes, epoch) order: one address's
    keys form a contiguous range, even when one address is a prefix of another."""
    by_bytes = sorted(entries, key=lambda e: keys.summary_key(*e))
    assert by_bytes == sorted(entries, key=lambda e: (e[0].encode(), e[1]))
    for address, _ in entries:
        prefix = keys.summary_prefix(address)
        inside = [e for e in entries if keys.summary_key(*e).startswith(prefix)]
        assert {e[0] for e in inside} == {address}


def test_prefix_address_does_not_leak_into_longer_one() -> None:
    # Without the 0x00 terminator, ("ab", 1) would sort inside "a"'s epochs.
    shared = [("a", 1), ("a", 1 << 40), ("ab", 0), ("a\x01", 5), ("", 3)]
    ordered = sorted(shared, key=lambda e: keys.summary_key(*e))
    assert ordered == [("", 3), ("a", 1), ("a", 1 << 40), ("a\x01", 5), ("ab", 0)]
    assert not keys.summary_key("ab", 0).startswith(keys.summary_prefix("a"))


@given(st.lists(st.tuples(u64, text), min_size=2, max_size=40, unique=True))
def test_height_first_keys_sort_by_height(entries: list[tuple[int, str]]) -> None:
    for encode in (keys.timeout_key, keys.excluded_key, keys.epoch_group_key, keys.declines_key):
        by_bytes = sorted(entries, key=lambda e, f=encode: f(*e))  # type: ignore[misc]
        assert by_bytes == sorted(entries, key=lambda e: (e[0], e[1].encode()))


def test_collection_prefixes_are_distinct_single_bytes() -> None:
    prefixes = [
        keys.PARTICIPANTS,
        keys.INFERENCE_TIMEOUTS,
        keys.EPOCH_GROUP_DATA,
        keys.EPOCHS,
        keys.EFFECTIVE_EPOCH_INDEX,
        keys.INFERENCES,
        keys.EPOCH_PERFORMANCE_SUMMARIES,
        keys.EXCLUDED_PARTICIPANTS,
        keys.PARAMS,
        keys.PENDING_PARAMS,
        keys.CHAIN_ID,
        keys.EXTENSION_PARAMS,
        keys.PENDING_EXTENSION_PARAMS,
        keys.PARTICIPANT_NODES,
        keys.EPOCH_DECLINES,
        keys.POLICY_STATE,
        keys.POLICY_QUEUE,
        keys.POLICY_ITEMS,
        keys.POLICY_LOG,
    ]
    assert all(len(p) == 1 for p in prefixes)
    assert len(set(prefixes)) == len(prefixes)
    # The chain's collection numbers (x/inference types/keys.go).
    assert [p[0] for p in prefixes[:8]] == [0, 7, 10, 11, 12, 14, 18, 24]
