"""keepersim.inputs: the nesting depth counted over the bytes equals the parsed value's, and
whole-JSON inputs are refused by what they are, their size and their depth before the parser."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.inputs import (
    InputError,
    compute_json_depth,
    describe_os_error,
    is_json_too_deep,
    read_json_input,
)
from keepersim.limits import MAX_JSON_DEPTH


def get_depth(value: Any) -> int:
    """The reference: nesting of the decoded value (an empty list or object is one level)."""
    if isinstance(value, dict):
        return 1 + max((get_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((get_depth(v) for v in value), default=0)
    return 0


_text = st.text(alphabet=st.sampled_from('[]{}"\\:,ab é'), max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=_json, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_the_byte_count_is_the_parsed_depth(
    value: Any, indent: int | None, ascii_only: bool
) -> None:
    """Brackets inside strings (escaped quotes and backslashes too) are not nesting."""
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    assert compute_json_depth(data) == get_depth(value)
    assert is_json_too_deep(data, 3) == (get_depth(value) > 3)


def test_depth_at_and_beyond_the_limit(tmp_path: Path) -> None:
    at = tmp_path / "at.json"
    at.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert get_depth(read_json_input(at, "file")) == MAX_JSON_DEPTH
    beyond = tmp_path / "beyond.json"
    beyond.write_text("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(InputError, match=f"more than {MAX_JSON_DEPTH} levels deep"):
        read_json_input(beyond, "file")


def test_the_depth_scan_is_cheap() -> None:
    """A 10 MiB input of many small lists: counted in well under a second (measured ~0.15 s)."""
    data = b"[" + b'[1, {"a": "[["}],' * 600_000 + b"1]"
    started = time.perf_counter()
    assert compute_json_depth(data) == 3
    assert time.perf_counter() - started < 5.0


def test_a_stream_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it to read would block: stat says what it is first
    with pytest.raises(InputError, match="it is a FIFO"):
        read_json_input(fifo, "scenario file")
    with pytest.raises(InputError, match="it is a device"):
        read_json_input("/dev/zero", "scenario file")


def test_size_limit_is_checked_from_stat_and_from_the_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(1000)
    with pytest.raises(InputError, match="1,000 bytes, above the limit of 999 bytes"):
        read_json_input(big, "file", limit=999)


def test_nan_infinity_and_huge_numbers_are_not_json(tmp_path: Path) -> None:
    for text, named in (("[NaN]", "NaN"), ("[-Infinity]", "-Infinity"), ("[1e400]", "1e400")):
        path = tmp_path / "x.json"
        path.write_text(text)
        with pytest.raises(InputError, match=named):
            read_json_input(path, "file")
        assert read_json_input(path, "file", allow_nan=True)  # a caller naming the field


def test_os_errors_in_plain_words(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError) as info:
        loop.read_text()
    assert describe_os_error(info.value) == "a loop of symbolic links"
    with pytest.raises(InputError, match="loop: cannot read the file: a loop of symbolic links"):
        read_json_input(loop, "file")


def test_the_readme_states_every_input_limit() -> None:
    """The README's limits paragraph gives each limit of keepersim/limits.py (one source)."""
    from keepersim import limits

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    text = " ".join(readme.split())
    assert f"{limits.MAX_INPUT_BYTES // 2**20} MiB" in text
    assert f"a trace line is at most {limits.MAX_TRACE_LINE_BYTES // 2**20} MiB" in text
    assert f"`events` at most {limits.MAX_EVENTS:,}" in text
    assert f"`arrival_shape` at most {limits.MAX_ARRIVAL_SHAPE:,} entries" in text
    assert f"`model_traffic` at most {limits.MAX_MODELS:,} models" in text
    assert f"{limits.MAX_GENESIS_BYTES // 2**20} MiB" in text
    assert f"at most {limits.MAX_JSON_DEPTH} levels" in text
    assert f"at most {limits.MAX_GOVERNANCE_ENTRIES:,} entries" in text
    assert f"at most {limits.MAX_PROPOSAL_MESSAGES} messages" in text
    assert f"{limits.MAX_SWEEP_GRID_POINTS:,} grid points" in text
    assert f"{limits.MAX_SWEEP_RUNS:,} runs" in text
    assert f"at most {limits.MAX_PARTICIPANTS:,} participants" in text
    assert f"at most {limits.MAX_EXPECTED_REQUESTS:,}" in text
