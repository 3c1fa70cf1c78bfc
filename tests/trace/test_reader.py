"""The trace reader: typed records, per-line errors naming file/line/field, skip_bad, ordering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import (
    declined_line,
    header_line,
    inference_line,
    make_params,
    make_participants,
    params_line,
    participants_line,
    read_lines,
    summary_line,
    write_trace,
)

from keepersim.trace.integrity import append_closing_record
from keepersim.trace.reader import iterate_trace, read_header
from keepersim.trace.records import (
    BadLines,
    EpochSummaryRecord,
    Header,
    InferenceRecord,
    ParamsRecord,
    ParticipantsRecord,
    TraceError,
)
from keepersim.types.messages import EXPIRED, FINISHED


def prologue(last: int = 100) -> list[dict[str, Any]]:
    return [
        header_line(1, last, scenario="hand", seed=7, policy="gonka"),
        params_line(make_params()),
        participants_line(make_participants(2)),
    ]


def test_reads_typed_records(tmp_trace: Path) -> None:
    write_trace(
        tmp_trace,
        [
            *prologue(),
            inference_line("a", 3, "p0", "FINISHED", end=5),
            inference_line("b", 3, "p1", "EXPIRED"),
            summary_line(0, 40, [{"participant_id": "p0", "inference_count": "1"}]),
        ],
    )
    records = list(iterate_trace(tmp_trace))
    assert [type(r) for r in records] == [
        Header,
        ParamsRecord,
        ParticipantsRecord,
        InferenceRecord,
        InferenceRecord,
        EpochSummaryRecord,
    ]
    header = records[0]
    assert isinstance(header, Header)
    assert (header.first_height, header.last_height, header.seed) == (1, 100, 7)
    assert header.get_scenario_name() == "hand"
    params = records[1]
    assert isinstance(params, ParamsRecord)
    assert params.params.params.validation_params.expiration_blocks == 20
    assert params.params.extension_params.health_params.policy == "gonka"
    participants = records[2]
    assert isinstance(participants, ParticipantsRecord)
    assert [p.address for p in participants.participants] == ["p0", "p1"]
    assert [(n.address, list(n.models)) for n in participants.nodes] == [
        ("p0", ["m"]),
        ("p1", ["m"]),
    ]
    a, b = records[3], records[4]
    assert isinstance(a, InferenceRecord) and isinstance(b, InferenceRecord)
    assert (a.inference_id, a.start_height, a.end_height, a.status) == ("a", 3, 5, FINISHED)
    assert a.inference.executed_by == "p0" and a.is_finished()
    assert b.status == EXPIRED and b.line == 5
    summary = records[5]
    assert isinstance(summary, EpochSummaryRecord)
    assert summary.summaries[0].inference_count == 1 and summary.summaries[0].epoch_index == 0
    assert summary.declines is None  # no epoch_declines on the line: not recorded
    assert read_header(tmp_trace) == header


def _params_with(section: str, path: str, value: Any) -> dict[str, Any]:
    """A params line with one field (``path``, dotted, under ``section``) set to ``value``."""
    line = params_line(make_params())
    parent = line[section]
    *parents, name = path.split(".")
    for part in parents:
        parent = parent[part]
    parent[name] = value
    return line


def _params_without(section: str) -> dict[str, Any]:
    return {k: v for k, v in params_line(make_params()).items() if k != section}


BAD_LINES: list[tuple[dict[str, Any] | str, str, str]] = [
    (
        {**inference_line("x", 5, "p0"), "start_block_height": -5},
        "inference.start_block_height",
        "expected a uint64 string, got -5",
    ),
    (
        {**inference_line("x", 5, "p0"), "start_block_height": "5x"},
        "inference.start_block_height",
        'expected a uint64 string, got "5x"',
    ),
    ({**inference_line("x", 5, "p0"), "colour": "red"}, "inference.colour", "unknown field"),
    (
        {k: v for k, v in inference_line("x", 5, "p0").items() if k != "assigned_to"},
        "inference.assigned_to",
        "missing (required)",
    ),
    (inference_line("x", 5, "p0", status="DONE"), "inference.status", 'got "DONE"'),
    (
        {k: v for k, v in inference_line("x", 5, "p0").items() if k != "executed_by"},
        "inference.executed_by",
        "required for status FINISHED",
    ),
    (
        declined_line("x", 5, "p0", end=3),
        "inference.end_block_height",
        "3 is before start 5 for a declined inference",
    ),
    (
        {**inference_line("x", 5, "p0"), "start_block_height": "99999999999999999999"},
        "inference.start_block_height",
        "does not fit in an int64",
    ),
    (inference_line("x", 500, "p0"), "inference.start_block_height", "outside the trace's heights"),
    (
        {**inference_line("x", 5, "p0"), "max_tokens": 12},
        "inference.max_tokens",
        "expected a uint64 string, got 12",
    ),
    (
        summary_line(0, 40, [{"participant_id": "p0", "missed_requests": 3}]),
        "epoch_summary.summaries[0].missed_requests",
        "expected a uint64 string, got 3",
    ),
    (
        _params_with("params", "validation_params.expiration_blocks", "0"),
        "params.params.validation_params.expiration_blocks",
        "breaks rule",
    ),
    (
        _params_with("params", "authority", "gonka1someoneelse"),
        "params.params.authority",
        "unknown field",
    ),
    (
        _params_with("params", "validation_params.expiration_blocks", 20),
        "params.params.validation_params.expiration_blocks",
        "expected an int64 string, got 20",
    ),
    (
        _params_with("extension_params", "health_params.windowed.window", "9"),
        "params.extension_params.health_params.windowed.window",
        'expected a uint32 number, got "9"',
    ),
    (
        _params_with("extension_params", "health_params.policy", "nosuchpolicy"),
        "params.extension_params.health_params.policy",
        "breaks rule",
    ),
    (_params_without("extension_params"), "params.extension_params", "missing (required)"),
    (
        {**participants_line(make_participants(1)), "participant_nodes": [{"address": "p9"}]},
        "participants.participant_nodes[0].address",
        "'p9' is not one of the line's participants",
    ),
    (
        summary_line(0, 40, [], [{"epoch_index": "1", "address": "p0"}]),
        "epoch_summary.epoch_declines[0].epoch_index",
        "1 differs from the line's epoch_index 0",
    ),
    ({"type": "checkpoint"}, "type", 'got "checkpoint"'),
    ("{not json", "<line>", "not valid JSON"),
    ("[1, 2]", "<line>", "expected a JSON object"),
    ("", "<line>", "empty line"),
]


@pytest.mark.parametrize(("line", "field", "reason"), BAD_LINES)
def test_bad_line_names_file_line_and_field(
    tmp_trace: Path, line: dict[str, Any] | str, field: str, reason: str
) -> None:
    write_trace(tmp_trace, [*prologue(), inference_line("a", 2, "p0"), line])
    with pytest.raises(TraceError) as info:
        list(iterate_trace(tmp_trace))
    err = info.value
    assert (err.path, err.line, err.field) == (str(tmp_trace), 5, field)
    assert str(err).startswith(f"{tmp_trace}:5: {field}: ")
    assert reason in err.reason


def test_skip_bad_counts_and_lists(tmp_trace: Path) -> None:
    lines: list[dict[str, Any] | str] = [*prologue()]
    for i in range(30):
        lines.append(inference_line(f"ok{i:02d}", 2 + i, "p0"))
        lines.append({**inference_line(f"bad{i:02d}", 2 + i, "p0"), "start_block_height": -1})
    lines.append("garbage")
    write_trace(tmp_trace, lines)
    bad = BadLines(max_listed=5)
    records = list(iterate_trace(tmp_trace, skip_bad=True, bad_lines=bad))
    assert sum(isinstance(r, InferenceRecord) for r in records) == 30
    assert bad.count == 31
    assert [b.line for b in bad.lines] == [5, 7, 9, 11, 13]
    assert bad.lines[0].field == "inference.start_block_height"
    assert bad.to_dict()["count"] == 31 and len(bad.to_dict()["listed"]) == 5


def test_header_is_required_even_with_skip_bad(tmp_trace: Path) -> None:
    write_trace(tmp_trace, [params_line(make_params()), *prologue()[1:]])
    with pytest.raises(TraceError, match=r":1: type: the first line must be the header"):
        list(iterate_trace(tmp_trace, skip_bad=True))
    write_trace(tmp_trace, [], closed=False)
    with pytest.raises(TraceError, match="no header"):
        list(iterate_trace(tmp_trace))
    bad_header = {**header_line(5, 4)}
    write_trace(tmp_trace, [bad_header])
    with pytest.raises(TraceError, match=r":1: header.last_height: must be >= first_height 5"):
        list(iterate_trace(tmp_trace))


ORDERING: list[tuple[list[dict[str, Any]], int, str, str]] = [
    (
        [inference_line("b", 5, "p0"), inference_line("a", 4, "p0")],
        5,
        "inference.start_block_height",
        "out of order after line 4",
    ),
    (
        [inference_line("b", 5, "p0"), inference_line("a", 5, "p0")],
        5,
        "inference.start_block_height",
        "ordered by (start_block_height, inference_id)",
    ),
    (
        [inference_line("a", 5, "p0"), inference_line("a", 5, "p0")],
        5,
        "inference.start_block_height",
        "a duplicate of line 4",
    ),
    (
        [summary_line(0, 40, []), inference_line("a", 39, "p0")],
        5,
        "inference.start_block_height",
        "before the epoch_summary of line 4",
    ),
    (
        [summary_line(1, 80, []), summary_line(0, 90, [])],
        5,
        "epoch_summary.epoch_index",
        "does not follow",
    ),
    (
        [summary_line(0, 80, []), summary_line(1, 40, [])],
        5,
        "epoch_summary.height",
        "below the previous summary's height 80",
    ),
    ([header_line(1, 100)], 4, "type", "a second header"),
    ([params_line(make_params(), 50), params_line(make_params(), 10)], 5, "params.height", "below"),
]


@pytest.mark.parametrize(("extra", "line", "field", "reason"), ORDERING)
def test_ordering_violations(
    tmp_trace: Path, extra: list[dict[str, Any]], line: int, field: str, reason: str
) -> None:
    write_trace(tmp_trace, [*prologue(), *extra])
    with pytest.raises(TraceError) as info:
        list(iterate_trace(tmp_trace))
    assert (info.value.line, info.value.field) == (line, field)
    assert reason in info.value.reason
    # With skip_bad the misplaced line is skipped and listed; the rest is read.
    bad = BadLines()
    records = list(iterate_trace(tmp_trace, skip_bad=True, bad_lines=bad))
    assert bad.count == 1 and bad.lines[0].line == line
    assert len(records) == len(extra) + 3 - 1


def test_summary_after_later_inferences_is_allowed(tmp_trace: Path) -> None:
    # Inferences that started at or after the summary's height may come before it.
    write_trace(
        tmp_trace,
        [
            *prologue(),
            inference_line("a", 40, "p0"),
            inference_line("b", 45, "p0"),
            summary_line(0, 40, []),
        ],
    )
    assert len(list(iterate_trace(tmp_trace))) == 6


def test_inference_before_prologue(tmp_trace: Path) -> None:
    write_trace(tmp_trace, [header_line(1, 10), inference_line("a", 2, "p0")])
    with pytest.raises(TraceError, match=r":2: type: inference line before the first params line"):
        list(iterate_trace(tmp_trace))


def test_finished_before_start_and_declines(tmp_trace: Path) -> None:
    write_trace(
        tmp_trace,
        [
            *prologue(),
            inference_line("a", 5, "p0", end=4),  # the finish came before the start
            declined_line("b", 6, "p0", end=6),
            declined_line("c", 7, "p0", end=3),
        ],
    )
    with pytest.raises(TraceError, match=r":6: inference.end_block_height: 3 is before start 7"):
        list(iterate_trace(tmp_trace))
    records = list(iterate_trace(tmp_trace, skip_bad=True))
    a, b = (r for r in records if isinstance(r, InferenceRecord))
    assert (a.is_finished(), a.is_declined(), a.end_height) == (True, False, 4)
    assert (b.is_finished(), b.is_declined(), b.status) == (False, True, 0)


def test_version_1_trace_says_the_format_changed(tmp_trace: Path) -> None:
    write_trace(tmp_trace, [{**header_line(1, 10), "version": 1}, *prologue()[1:]])
    with pytest.raises(TraceError) as info:
        list(iterate_trace(tmp_trace, skip_bad=True))
    assert (info.value.line, info.value.field) == (1, "header.version")
    assert "version 1 is no longer read" in info.value.reason
    assert "--trace-out" in info.value.reason and "\n" not in str(info.value)
    write_trace(tmp_trace, [{**header_line(1, 10), "version": 4}])
    with pytest.raises(TraceError, match=r"header.version: expected trace format version 3"):
        list(iterate_trace(tmp_trace))


def test_gateway_json_is_read(tmp_trace: Path) -> None:
    """What the chain's REST gateway prints: every field, null for an unset message; and what
    it leaves out reads as unset."""
    line = inference_line("a", 3, "p0", end=5)
    line["proposal_details"] = None
    participants = participants_line(make_participants(1))
    assert participants["participants"][0]["current_epoch_stats"] is None
    write_trace(tmp_trace, [header_line(1, 10), params_line(make_params()), participants, line])
    records = list(iterate_trace(tmp_trace))
    inference = records[3]
    assert isinstance(inference, InferenceRecord)
    assert not inference.inference.HasField("proposal_details")
    params = records[1]
    assert isinstance(params, ParamsRecord) and params.params == make_params()


def test_duplicate_participant_and_summary(tmp_trace: Path) -> None:
    dup = participants_line(make_participants(1) * 2)
    write_trace(tmp_trace, [header_line(1, 10), dup])
    with pytest.raises(TraceError, match=r"participants.participants\[1\].address: duplicate"):
        list(iterate_trace(tmp_trace))
    write_trace(
        tmp_trace,
        [*prologue(), summary_line(0, 40, [{"participant_id": "p0"}, {"participant_id": "p0"}])],
    )
    with pytest.raises(TraceError, match=r"summaries\[1\].participant_id: duplicate"):
        list(iterate_trace(tmp_trace))


def test_not_utf8(tmp_trace: Path) -> None:
    write_trace(tmp_trace, prologue(), closed=False)
    with open(tmp_trace, "ab") as f:
        f.write(b'{"type": "inference", "model": "\xff"}\n')
    append_closing_record(tmp_trace)
    with pytest.raises(TraceError, match=r":4: <line>: not UTF-8"):
        list(iterate_trace(tmp_trace))
    assert json.loads(tmp_trace.read_bytes().splitlines()[0])["type"] == "header"


def test_participants_lines_carry_the_groups_weights_and_reputations(tmp_path: Path) -> None:
    """simulate writes each epoch's group members (the chain's ValidationWeight) on its
    participants line, and the reader gives them back as recorded; a duplicate is an error."""
    import dataclasses

    from keepersim.sim.run_loop import run_scenario
    from keepersim.sim.suite import get_builtin_scenario
    from keepersim.trace.reader import iterate_trace
    from keepersim.trace.records import ParticipantsRecord

    base = get_builtin_scenario("sparse", 1)
    scenario = dataclasses.replace(base, blocks=base.epoch_length + 5)
    out = tmp_path / "t.jsonl"
    run_scenario(scenario, "none", store="memory", trace_out=out)
    lines = [r for r in iterate_trace(out) if isinstance(r, ParticipantsRecord)]
    assert len(lines) >= 2
    for line in lines:
        assert {w.member_address for w in line.weights} == {p.address for p in line.participants}
        assert {w.member_address: w.weight for w in line.weights} == {
            p.address: p.weight for p in line.participants
        }
        assert all(0 <= w.reputation <= 100 for w in line.weights)
    text = read_lines(out)
    i = next(n for n, t in enumerate(text) if '"type":"participants"' in t.replace(" ", ""))
    data = json.loads(text[i])
    data["validation_weights"].append(data["validation_weights"][0])
    text[i] = json.dumps(data)
    bad = tmp_path / "bad.jsonl"
    write_trace(bad, text)
    with pytest.raises(TraceError, match=r"validation_weights\[\d+\]\.member_address.*duplicate"):
        list(iterate_trace(bad))
