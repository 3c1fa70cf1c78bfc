"""A cut trace is never taken for a whole one (keepersim issue 32): the closing record holds the
number of lines before it and the SHA-256 of their bytes (checked here with hashlib and json, not
with keepersim's own reader); a trace without it is refused, or with ``allow_partial`` replayed
as partial, never reported whole; a changed trace is refused by its count or digest."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_helpers import (
    header_line,
    inference_line,
    make_params,
    make_participants,
    params_line,
    participants_line,
    write_trace,
)

from keepersim.replay.as_recorded import replay_as_recorded
from keepersim.replay.common import ReplayError
from keepersim.replay.estimator import estimate_trace
from keepersim.replay.what_if import replay_what_if
from keepersim.server.runner import RunnerError, TraceSource
from keepersim.testing import run_proposal
from keepersim.trace.integrity import (
    append_closing_record,
    check_trace_end,
)
from keepersim.trace.reader import iterate_trace, read_header
from keepersim.trace.records import Header, TraceError
from keepersim.trace.writer import TraceWriter

ROOT = Path(__file__).resolve().parents[2]
PROPOSAL = ROOT / "examples" / "governance_tests" / "stricter-breaker.json"


def _examples(n: int) -> settings:
    return settings(
        max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


def split_closing(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """(the bytes before the closing record, the closing record), found with plain bytes."""
    start = raw.rindex(b"\n", 0, len(raw) - 1) + 1
    return raw[:start], json.loads(raw[start:])


def assert_closed(raw: bytes) -> None:
    body, end = split_closing(raw)
    assert end == {
        "type": "end",
        "lines": body.count(b"\n"),
        "sha256": hashlib.sha256(body).hexdigest(),
    }


def last_whole_line(raw: bytes) -> tuple[int, int | None]:
    """(number, height) of the last whole line of a cut trace, read with json alone."""
    whole = raw[: raw.rindex(b"\n") + 1]
    number = whole.count(b"\n")
    data = json.loads(whole.splitlines()[-1])
    key = "start_block_height" if data["type"] == "inference" else "height"
    return number, int(data[key]) if key in data else None


def test_simulate_writes_a_matching_closing_record(sim_trace: bytes) -> None:
    assert_closed(sim_trace)
    body, _ = split_closing(sim_trace)
    assert b'"type":"end"' not in body


# -- the writer ---------------------------------------------------------------------------------


def _writer(path: Path) -> TraceWriter:
    return TraceWriter(path, chain_id="c", first_height=1, last_height=10, scenario="s", seed=1)


def _fill(writer: TraceWriter, upto: int) -> None:
    """Params at 0 and a params change at heights 3 and 6 (as far as ``upto``)."""
    params = make_params()
    fleet = make_participants(2)
    if upto >= 0:
        writer.add_params(0, params)
        writer.add_participants(0, 0, [p for p, _ in fleet], [n for _, n in fleet])
        writer.flush(0)
    for height in (3, 6):
        if height <= upto:
            params.params.validation_params.expiration_blocks += 1
            writer.add_params(height, params)
            writer.flush(height)


def test_writer_closes_whole_and_abort_leaves_no_closing_record(tmp_path: Path) -> None:
    whole = tmp_path / "whole.jsonl"
    writer = _writer(whole)
    _fill(writer, 10)
    writer.close()
    assert_closed(whole.read_bytes())
    assert writer.lines == whole.read_bytes().count(b"\n")  # the closing record counted too
    assert check_trace_end(whole).state == "closed"
    failed = tmp_path / "failed.jsonl"
    writer = _writer(failed)
    _fill(writer, 6)
    writer.abort()
    assert b'"type":"end"' not in failed.read_bytes()
    with pytest.raises(TraceError) as info:
        list(iterate_trace(failed))
    n, height = last_whole_line(failed.read_bytes())
    assert (info.value.line, info.value.field) == (n, "end")
    assert f"after line {n} (height {height}) without its closing record" in str(info.value)


def test_reopened_writer_hashes_the_lines_already_written(tmp_path: Path) -> None:
    """A resumed run's trace: cut back to the checkpoint, its lines hashed again, then the
    rest: byte for byte the uninterrupted trace, closing record included."""
    reference = tmp_path / "reference.jsonl"
    writer = _writer(reference)
    _fill(writer, 10)
    writer.close()
    path = tmp_path / "resumed.jsonl"
    writer = _writer(path)
    writer.track_pending()
    _fill(writer, 3)
    scalars, pending = writer.get_state()
    params = make_params()
    params.params.validation_params.expiration_blocks += 2
    writer.add_params(6, params)
    writer.flush(6)  # written after the checkpoint: a block never committed
    writer.abort()  # killed
    resumed = TraceWriter.reopen(path, scalars, [(k, v) for k, v in pending.items() if v])
    resumed.add_params(6, params)
    resumed.flush(6)
    resumed.close()
    assert path.read_bytes() == reference.read_bytes()
    assert_closed(path.read_bytes())


def test_reopen_refuses_a_trace_changed_before_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = _writer(path)
    writer.track_pending()
    _fill(writer, 3)
    scalars, pending = writer.get_state()
    writer.abort()
    raw = bytearray(path.read_bytes())
    raw[raw.index(b",")] = ord("\n")  # one line more before the checkpoint's offset
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="it was changed since"):
        TraceWriter.reopen(path, scalars, [])


# -- the closing record -------------------------------------------------------------------------


def _hand_lines() -> list[dict[str, Any]]:
    return [
        header_line(1, 20),
        params_line(make_params()),
        participants_line(make_participants(2)),
        inference_line("a", 3, "p0"),
        inference_line("b", 5, "p1"),
    ]


def test_append_closing_record_closes_a_hand_written_trace(tmp_trace: Path) -> None:
    write_trace(tmp_trace, _hand_lines(), closed=False)
    with pytest.raises(TraceError, match="without its closing record"):
        read_header(tmp_trace)
    append_closing_record(tmp_trace)
    assert_closed(tmp_trace.read_bytes())
    assert len(list(iterate_trace(tmp_trace))) == 5
    tmp_trace.write_bytes(tmp_trace.read_bytes()[:-1])
    with pytest.raises(ValueError, match="no newline"):
        append_closing_record(tmp_trace)


def test_a_malformed_closing_record_is_refused(tmp_trace: Path) -> None:
    write_trace(
        tmp_trace, [*_hand_lines(), {"type": "end", "lines": 5, "sha256": "xyz"}], closed=False
    )
    with pytest.raises(TraceError, match=r":6: end.sha256: expected a SHA-256"):
        list(iterate_trace(tmp_trace, allow_partial=True))


def test_a_closing_record_before_the_last_line_is_refused(tmp_trace: Path) -> None:
    write_trace(tmp_trace, _hand_lines()[:4])
    body = tmp_trace.read_text()
    write_trace(tmp_trace, [*body.splitlines(), json.dumps(inference_line("b", 5, "p1"))])
    with pytest.raises(TraceError, match=r":5: type: a closing record \(end\) before the last"):
        list(iterate_trace(tmp_trace))


def test_lines_added_or_removed_are_refused_by_the_count(tmp_trace: Path) -> None:
    write_trace(tmp_trace, _hand_lines())
    lines = tmp_trace.read_bytes().splitlines(keepends=True)
    tmp_trace.write_bytes(b"".join(lines[:3] + lines[4:]))  # line 4 dropped
    for allow_partial in (False, True):
        with pytest.raises(TraceError) as info:
            list(iterate_trace(tmp_trace, allow_partial=allow_partial))
        assert (info.value.line, info.value.field) == (5, "end.lines")
        assert "counts 5 lines before it, the trace has 4" in info.value.reason


def test_a_cut_before_the_first_block_has_nothing_to_replay(tmp_trace: Path) -> None:
    write_trace(tmp_trace, _hand_lines()[:3], closed=False)
    with pytest.raises(TraceError, match=r":3: end: missing: .*before its first block 1"):
        list(iterate_trace(tmp_trace, allow_partial=True))


def test_version_2_traces_are_read_whole_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.jsonl"
    write_trace(
        path,
        [{**line, "version": 2} if line["type"] == "header" else line for line in _hand_lines()],
        closed=False,
    )
    assert len(list(iterate_trace(path))) == 5
    assert len(list(iterate_trace(path))) == 5
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"keepersim: warning: {path}: trace format version 2"
    )
    assert "cannot be told" in err[0]
    # A version-2 trace has no closing record: one in it is an error.
    write_trace(path, [{**header_line(1, 20), "version": 2}, *_hand_lines()[1:]])
    with pytest.raises(TraceError, match=r":6: type: a closing record \(end\)"):
        list(iterate_trace(path))


# -- cuts at random offsets (property) ----------------------------------------------------------


@pytest.fixture(scope="module")
def cut_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cuts") / "cut.jsonl"


def _check_refused_strictly(path: Path, cut: bytes) -> None:
    with pytest.raises(TraceError) as info:
        list(iterate_trace(path))
    if b"\n" in cut and not str(info.value).startswith(f"{path}:1: <line>"):
        n, height = last_whole_line(cut)
        assert (info.value.line, info.value.field) == (n, "end")
        where = f"line {n}" + ("" if height is None else f" (height {height})")
        assert f"the trace ends after {where} without its closing record" in info.value.reason


@_examples(500)
@given(data=st.data())
def test_a_cut_trace_is_refused_or_read_as_partial(
    sim_trace: bytes, cut_path: Path, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(sim_trace) - 1), label="offset")
    cut = sim_trace[:offset]
    cut_path.write_bytes(cut)
    _check_refused_strictly(cut_path, cut)
    try:
        records = list(iterate_trace(cut_path, allow_partial=True))
    except TraceError:
        return  # cut inside the header, or before the first block: nothing to read
    header = records[0]
    assert isinstance(header, Header) and header.cut is not None
    n, height = last_whole_line(cut)
    assert (header.cut.line, header.cut.height, header.last_height) == (n, height, height)
    assert len(records) == n and records[-1].line == n


@_examples(150)
@given(data=st.data())
def test_a_cut_trace_is_never_replayed_as_whole(
    sim_trace: bytes, cut_path: Path, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(sim_trace) - 1), label="offset")
    cut = sim_trace[:offset]
    cut_path.write_bytes(cut)
    with pytest.raises(TraceError):
        replay_as_recorded(cut_path, policies=["none"])
    try:
        report = replay_as_recorded(cut_path, policies=["gonka", "none"], allow_partial=True)
    except (TraceError, ReplayError):
        return  # refused: nothing to replay
    out = report.to_dict()
    n, height = last_whole_line(cut)
    assert out["partial"] is True and out["ok"] is False
    recorded_last = int(json.loads(sim_trace.split(b"\n", 1)[0])["last_height"])
    assert out["trace_end"] == {"line": n, "height": height, "recorded_last_height": recorded_last}
    assert out["last_height"] == height


@_examples(60)
@given(data=st.data())
def test_a_cut_trace_is_never_replayed_as_whole_what_if(
    sim_trace: bytes, cut_path: Path, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(sim_trace) - 1), label="offset")
    cut = sim_trace[:offset]
    cut_path.write_bytes(cut)
    with pytest.raises(TraceError):
        replay_what_if(cut_path, "none", seed=1)
    try:
        run = replay_what_if(cut_path, "gonka", seed=1, allow_partial=True)
    except (TraceError, ReplayError):
        return
    assert run["partial"] is True and run["trace_end"]["line"] == last_whole_line(cut)[0]


# -- changed bytes ------------------------------------------------------------------------------


def test_a_flipped_digit_in_the_middle_is_refused_by_the_digest(
    sim_trace: bytes, tmp_path: Path
) -> None:
    """Same length, still valid JSON and schema: only the digest tells."""
    raw = bytearray(sim_trace)
    middle = len(raw) // 2
    i = next(i for i in range(middle, len(raw)) if chr(raw[i]).isdigit())
    raw[i] = ord("1") if raw[i] != ord("1") else ord("2")
    path = tmp_path / "flipped.jsonl"
    path.write_bytes(bytes(raw))
    lines = len(split_closing(bytes(raw))[0].splitlines())
    for allow_partial in (False, True):
        with pytest.raises(TraceError) as info:
            replay_as_recorded(path, policies=["none"], allow_partial=allow_partial)
        assert (info.value.line, info.value.field) == (lines + 1, "end.sha256")
        assert "the trace was changed after it was written" in info.value.reason


@_examples(200)
@given(data=st.data())
def test_any_changed_byte_is_refused(sim_trace: bytes, cut_path: Path, data: st.DataObject) -> None:
    body, _ = split_closing(sim_trace)
    offset = data.draw(st.integers(0, len(body) - 1), label="offset")
    if body[offset] == ord("\n"):
        return
    value = data.draw(st.integers(0, 255).filter(lambda b: b not in (body[offset], 10)))
    raw = bytearray(sim_trace)
    raw[offset] = value
    cut_path.write_bytes(bytes(raw))
    with pytest.raises(TraceError) as info:
        list(iterate_trace(cut_path, allow_partial=True))
    if offset > body.index(b"\n"):  # past the header (which says the format: else line 1 errs)
        assert info.value.field == "end.sha256"


# -- every reader goes through the check --------------------------------------------------------


def test_every_trace_reader_refuses_a_cut_trace(sim_trace: bytes, tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(sim_trace[: len(sim_trace) * 2 // 3])
    readers: list[Any] = [
        lambda: list(iterate_trace(path)),
        lambda: read_header(path),
        lambda: estimate_trace(path),
        lambda: replay_as_recorded(path),
        lambda: replay_what_if(path, "gonka", seed=1),
        # keepersim.testing (and so `keepersim proposal --trace`)
        lambda: run_proposal(PROPOSAL, [], traces=[path], seeds=2),
    ]
    for read in readers:
        with pytest.raises(TraceError, match="without its closing record"):
            read()
    with pytest.raises(RunnerError, match="without its closing record"):
        TraceSource(path)


def test_a_failed_simulate_run_leaves_a_trace_that_is_refused(tmp_path: Path) -> None:
    """A run that stops with an error (or a signal: the same path) leaves its --trace-out at
    its final path without a closing record; no reader takes it for a whole trace."""
    from replay_helpers import make_small_scenario

    from keepersim.sim.run_loop import run_scenario

    def stop(chain: Any, height: int) -> None:
        if height == 100:
            raise KeyboardInterrupt

    path = tmp_path / "trace.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(make_small_scenario(), "gonka", store="memory", trace_out=path, on_block=stop)
    with pytest.raises(TraceError, match="without its closing record"):
        replay_as_recorded(path)
    report = replay_as_recorded(path, allow_partial=True)
    assert report.partial and not report.ok and report.last_height < 100


def test_make_trace_script_writes_a_closed_trace(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from make_trace import write_trace as make_trace
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    path = tmp_path / "synthetic.jsonl"
    make_trace(path, 1, per_epoch=500)
    assert_closed(path.read_bytes())
    assert check_trace_end(path).state == "closed"
