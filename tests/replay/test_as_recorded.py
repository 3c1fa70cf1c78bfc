"""As-recorded replay: summaries and statuses against the recording, shadow exclusions,
bounded memory, strict failures, governance and recorded changes."""

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
    record_trace,
    summary_line,
    write_trace,
)

from keepersim.chain import Chain
from keepersim.replay.as_recorded import replay_as_recorded
from keepersim.replay.common import ReplayError
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import InferenceRecord, TraceError


def test_replay_reproduces_the_recorded_chain(tmp_trace: Path) -> None:
    path, summaries = record_trace(tmp_trace, blocks=200, participants=4, miss={"p1": 0.5}, seed=3)
    report = replay_as_recorded(path, policies=["gonka", "none"])
    assert report.ok
    assert report.summary_mismatch_count == 0 and report.status_mismatches.count == 0
    assert [c["epoch"] for c in report.summaries_checked] == sorted(summaries)
    assert report.settlement_mismatches == []
    assert report.tx_failures.count == 0
    assert report.blocks == 200
    # The counts do not depend on the watching policy; gonka would have kept p1 out.
    gonka = report.get_shadow("gonka")
    assert set(gonka.intervals.closed) == {"p1"}
    assert report.get_shadow("none").intervals.closed == {}
    data = report.to_dict()
    json.dumps(data)
    assert data["recorded"]["misses"] == report.recorded["misses"] > 0


def _tamper(path: Path, epoch: int, participant: str, field: str, value: str) -> int:
    lines = read_lines(path)
    for i, raw in enumerate(lines):
        data = json.loads(raw)
        if data["type"] == "epoch_summary" and data["epoch_index"] == str(epoch):
            for s in data["summaries"]:
                if s["participant_id"] == participant:
                    s[field] = value
            lines[i] = json.dumps(data)
            write_trace(path, lines)
            return i + 1
    raise AssertionError("summary not found")


def test_tampered_summary_field_is_exactly_the_mismatch(tmp_trace: Path) -> None:
    path, summaries = record_trace(tmp_trace, blocks=120, participants=3, miss={"p2": 0.4}, seed=5)
    original = next(s for s in summaries[1] if s["participant_id"] == "p2")
    computed = int(original.get("missed_requests", "0"))
    line = _tamper(path, 1, "p2", "missed_requests", str(computed + 3))
    report = replay_as_recorded(path, policies=["none"])
    assert report.summary_mismatches == [
        {
            "epoch": 1,
            "participant": "p2",
            "field": "missed_requests",
            "exported": computed + 3,
            "computed": computed,
            "line": line,
        }
    ]
    assert report.summary_mismatch_count == 1 and not report.ok
    assert report.status_mismatches.count == 0


def test_summary_of_unknown_participant_is_reported(tmp_trace: Path) -> None:
    path, _ = record_trace(tmp_trace, blocks=45, participants=2, seed=2)
    lines = read_lines(path)
    for i, raw in enumerate(lines):
        data = json.loads(raw)
        if data["type"] == "epoch_summary":
            data["summaries"].append({"participant_id": "ghost", "epoch_index": "0"})
            lines[i] = json.dumps(data)
    write_trace(path, lines)
    report = replay_as_recorded(path, policies=["none"])
    assert [
        (m["participant"], m["field"], m["exported"], m["computed"])
        for m in report.summary_mismatches
    ] == [("ghost", "(summary)", "present", "missing")]


def hand_trace(path: Path, last: int = 120) -> Path:
    """p0 misses 4 in a row early (gonka excludes it at 9), then a miss at 20 and a success at 30
    while excluded, a probe success at 70; p1 always succeeds."""
    params = make_params(epoch_length=100, expiration=5)
    infs = [inference_line(f"a{h:03d}", h, "p0", "EXPIRED") for h in range(1, 5)]
    infs += [
        inference_line("b020", 20, "p0", "EXPIRED"),
        inference_line("b030", 30, "p0", "FINISHED", end=32),
        inference_line("b070", 70, "p0", "FINISHED", end=72),
    ]
    infs += [inference_line(f"c{h:03d}", h, "p1", "FINISHED", end=h + 1) for h in range(2, last, 7)]
    infs.sort(key=lambda x: (int(x["start_block_height"]), x["inference_id"]))
    p1_count = sum(1 for h in range(2, 100, 7))
    summary = summary_line(
        0,
        100,
        [
            {"participant_id": "p0", "inference_count": "2", "missed_requests": "5"},
            {"participant_id": "p1", "inference_count": str(p1_count)},
        ],
    )
    before = [x for x in infs if int(x["start_block_height"]) < 100]
    after = [x for x in infs if int(x["start_block_height"]) >= 100]
    return write_trace(
        path,
        [
            header_line(1, last),
            params_line(params),
            participants_line(make_participants(2)),
            *before,
            summary,
            *after,
        ],
    )


def test_shadow_exclusion_intervals_and_inside_counts(tmp_trace: Path) -> None:
    report = replay_as_recorded(hand_trace(tmp_trace), policies=["gonka", "none"])
    assert report.ok
    gonka = report.get_shadow("gonka")
    # Excluded in the end block of 9 (4 misses), so for starts 10..59 (cooldown 50 ends at 59);
    # the probe succeeds at 72 and the filter (epoch miss rate 5/7) keeps it out from 73 to the
    # epoch reset at 100.
    assert gonka.intervals.closed == {"p0": [(10, 59), (73, 100)]}
    assert gonka.intervals.blocks == {"p0": 50 + 28}
    assert gonka.inside["misses"] == 1  # b020
    assert gonka.inside["successes"] == 1  # b030
    assert gonka.inside_by_participant["p0"]["misses"] == 1
    assert "healthy->excluded" in gonka.transitions
    d = report.to_dict()["policies_shadow"]["gonka"]
    assert d["misses_inside"] == 1 and d["successes_inside"] == 1
    assert d["exclusions"]["p0"]["intervals"] == [[10, 59], [73, 100]]
    assert report.get_shadow("none").inside["misses"] == 0


def test_pending_heap_is_bounded_by_inflight(tmp_trace: Path) -> None:
    path, _ = record_trace(
        tmp_trace, blocks=600, participants=5, arrivals=3.0, latency=(1, 15), seed=9
    )
    inflight: dict[int, int] = {}
    count = 0
    for record in iterate_trace(path):
        if isinstance(record, InferenceRecord) and record.is_finished():
            count += 1
            for h in range(record.start_height, record.end_height + 1):
                inflight[h] = inflight.get(h, 0) + 1
    report = replay_as_recorded(path, policies=["none"])
    assert count > 500
    assert 0 < report.max_pending <= max(inflight.values())
    assert report.max_pending < count / 10


def test_status_mismatch_and_rejected_finish(tmp_trace: Path) -> None:
    params = make_params(expiration=5)
    write_trace(
        tmp_trace,
        [
            header_line(1, 30),
            params_line(params),
            participants_line(make_participants(2)),
            inference_line("late", 2, "p0", "FINISHED", end=9),  # expires at 7 first
            inference_line("ok", 3, "p1", "FINISHED", end=4),
            inference_line("running", 10, "p1", "STARTED"),  # expires at 15 in the module
        ],
    )
    report = replay_as_recorded(tmp_trace, policies=["none"])
    assert dict(report.status_mismatch_kinds) == {"FINISHED->EXPIRED": 1, "STARTED->EXPIRED": 1}
    late = report.status_mismatches.items[0]
    assert (late["inference_id"], late["line"], late["module_height"]) == ("late", 4, 7)
    assert report.tx_failures.count == 1
    failure = report.tx_failures.items[0]
    assert (failure["height"], failure["line"], failure["kind"]) == (9, 4, "finish")
    assert "expired" in failure["error"]


def test_strict_failure_names_line_and_leaves_last_commit(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines: list[dict[str, Any]] = [
        header_line(1, 30),
        params_line(make_params(expiration=5)),
        participants_line(make_participants(2)),
        inference_line("a", 2, "p0", "FINISHED", end=4),
        inference_line("late", 3, "p0", "FINISHED", end=12),
    ]
    write_trace(trace, lines)
    with pytest.raises(ReplayError) as info:
        replay_as_recorded(
            trace, policies=["gonka"], store="leveldb", store_dir=tmp_path / "s", strict=True
        )
    message = str(info.value)
    assert f"{trace}:5: block 12: finish 'late' rejected" in message
    assert "the store stays at height 11" in message
    with Chain.open(tmp_path / "s" / "gonka") as chain:
        assert chain.height == 11
        hash_at_11 = chain.app_hash
    # The same trace cut at 11 replays to the same state: the failing block left nothing.
    lines[0] = header_line(1, 11)
    write_trace(trace, lines)
    replay_as_recorded(trace, policies=["gonka"], store="leveldb", store_dir=tmp_path / "t")
    with Chain.open(tmp_path / "t" / "gonka") as chain:
        assert chain.height == 11 and chain.app_hash == hash_at_11


def test_leveldb_store_must_be_fresh(tmp_trace: Path, tmp_path: Path) -> None:
    path, _ = record_trace(tmp_trace, blocks=10, participants=2)
    replay_as_recorded(path, policies=["none"], store="leveldb", store_dir=tmp_path / "s")
    with pytest.raises(ReplayError, match="not empty"):
        replay_as_recorded(path, policies=["none"], store="leveldb", store_dir=tmp_path / "s")
    with pytest.raises(ReplayError, match="unknown health policy"):
        replay_as_recorded(path, policies=["no-such-policy"])


def test_governance_and_recorded_changes_are_applied(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    params = make_params()
    later = make_params(expiration=33)
    changed = make_participants(3)
    changed[0][0].weight = 555
    changed[1][1].models.append("m2")  # p1 registers a second model
    write_trace(
        trace,
        [
            header_line(1, 60),
            params_line(params),
            participants_line(make_participants(2)),
            inference_line("a", 2, "p0"),
            params_line(later, 20),  # in force from 20
            participants_line(changed, epoch=1, height=40),
            inference_line("b", 41, "p2"),  # p2 joined at 40
        ],
    )
    governance_params = make_params(expiration=44)
    governance_params.extension_params.health_params.policy = "none"  # the replay keeps its own
    governance_params.extension_params.cb_min_samples = 7
    report = replay_as_recorded(
        trace,
        policies=["gonka"],
        store="leveldb",
        store_dir=tmp_path / "s",
        governance=[(50, governance_params)],
    )
    assert report.tx_failures.count == 0 and report.late_scheduled.count == 0
    with Chain.open(tmp_path / "s" / "gonka") as chain:
        p = chain.get_params()
        assert p.params.validation_params.expiration_blocks == 44
        health = p.extension_params.health_params
        assert (health.policy, health.shadow) == ("gonka", True)
        assert p.extension_params.cb_min_samples == 7
        p0 = chain.get_participant("p0")
        assert p0 is not None and p0.weight == 555
        with chain.read() as keeper:
            nodes = keeper.get_participant_nodes("p1")
        assert nodes is not None and list(nodes.models) == ["m", "m2"]
        assert chain.get_participant("p2") is not None
        inf = chain.get_inference("b")
        assert inf is not None and inf.assigned_to == "p2"


def test_late_params_line_is_listed(tmp_trace: Path) -> None:
    write_trace(
        tmp_trace,
        [
            header_line(1, 30),
            params_line(make_params()),
            participants_line(make_participants(2)),
            inference_line("a", 10, "p0"),
            inference_line("b", 12, "p0"),
            params_line(make_params(expiration=30), 5),
        ],
    )
    report = replay_as_recorded(tmp_trace, policies=["none"])
    assert report.late_scheduled.count == 1
    assert report.late_scheduled.items[0]["line"] == 6


def test_mid_chain_export_starts_in_its_epoch(tmp_trace: Path) -> None:
    # An export that starts at epoch 5 (height 200 with 40-block epochs).
    infs = [inference_line(f"i{h:03d}", h, "p0", "FINISHED", end=h + 1) for h in range(201, 230, 3)]
    infs.append(inference_line("m", 205, "p1", "EXPIRED"))
    infs.sort(key=lambda x: (int(x["start_block_height"]), x["inference_id"]))
    write_trace(
        tmp_trace,
        [
            {**header_line(201, 250), "source": "export"},
            params_line(make_params(), 200),
            participants_line(make_participants(2), epoch=5, height=200),
            *infs,
            summary_line(
                5,
                240,
                [
                    {"participant_id": "p0", "inference_count": str(len(range(201, 230, 3)))},
                    {"participant_id": "p1", "missed_requests": "1"},
                ],
            ),
        ],
    )
    report = replay_as_recorded(tmp_trace, policies=["gonka"])
    assert report.ok, report.to_dict()["summaries"]
    assert [c["epoch"] for c in report.summaries_checked] == [5]
    assert report.settlement_mismatches == []


def test_bad_lines_are_skipped_and_reported(tmp_trace: Path) -> None:
    path, _ = record_trace(tmp_trace, blocks=60, participants=2, seed=4)
    lines = read_lines(path)
    lines.insert(5, json.dumps({**inference_line("zz", 3, "p0"), "start_block_height": -5}))
    write_trace(path, lines)
    with pytest.raises(TraceError, match=r":6: inference.start_block_height: expected a uint64"):
        replay_as_recorded(path, policies=["none"])
    report = replay_as_recorded(path, policies=["none"], skip_bad=True)
    assert report.bad_lines.count == 1 and report.bad_lines.lines[0].line == 6
    assert report.ok and report.to_dict()["bad_lines"]["count"] == 1


@pytest.mark.parametrize(
    ("policy", "extra"),
    [("gonka", {}), ("consecutive", {"pushback": True}), ("sprt", {})],
)
def test_simulated_run_is_reproduced_exactly(
    tmp_path: Path, policy: str, extra: dict[str, Any]
) -> None:
    governance_mod = pytest.importorskip("keepersim.sim.governance")
    genesis_mod = pytest.importorskip("keepersim.sim.run_genesis")
    run_loop = pytest.importorskip("keepersim.sim.run_loop")
    scenario_mod = pytest.importorskip("keepersim.sim.scenario")
    capacity = 2 if extra.get("pushback") else None
    scenario = scenario_mod.parse_scenario(
        {
            "name": "replay-roundtrip",
            "seed": 11,
            "blocks": 600,
            "epoch_length": 200,
            "expiration_blocks": 20,
            "arrivals_per_block": 2.0,
            **extra,
            "participants": [
                {"address": "gonka1a", "weight": 100, "miss": [[0, 0.02]], "capacity": capacity},
                {"address": "gonka1b", "weight": 120, "miss": [[0, 0.01], [300, 0.4]]},
                {"address": "gonka1c", "weight": 80, "latency_blocks": [1, 5], "miss": [[0, 0.05]]},
            ],
        },
        "test",
    )
    trace = tmp_path / "run.jsonl"
    governance = governance_mod.parse_governance(
        [{"height": 250, "set": {"params.validation_params.expiration_blocks": 25}}],
        genesis_mod.build_params(scenario, policy),
    )
    run_loop.run_scenario(scenario, policy, store="memory", trace_out=trace, governance=governance)
    report = replay_as_recorded(trace, policies=[policy, "none"])
    assert [c["epoch"] for c in report.summaries_checked] == [0, 1, 2]
    assert report.summary_mismatch_count == 0, report.summary_mismatches[:5]
    assert report.settlement_mismatches == []
    assert report.status_mismatches.count == 0, report.status_mismatches.items[:5]
    assert report.tx_failures.count == 0, report.tx_failures.items[:5]
    assert report.late_scheduled.count == 0
    if extra.get("pushback"):
        assert report.recorded["declines"] > 0


def test_shadow_policy_that_would_keep_everyone_out(tmp_trace: Path) -> None:
    # consecutive allows no fallback: when it would keep every candidate out, the (shadow)
    # selection table cannot be built; the replay counts every candidate as kept out.
    params = make_params(expiration=5, policy="consecutive")
    infs = [
        inference_line(f"{a}{h:03d}", h, a, "EXPIRED") for h in range(1, 16) for a in ("p0", "p1")
    ]
    infs.sort(key=lambda x: (int(x["start_block_height"]), x["inference_id"]))
    write_trace(
        tmp_trace,
        [header_line(1, 30), params_line(params), participants_line(make_participants(2)), *infs],
    )
    report = replay_as_recorded(tmp_trace, policies=["consecutive"])
    assert report.ok
    closed = report.get_shadow("consecutive").intervals.closed
    assert set(closed) == {"p0", "p1"}
    assert report.get_shadow("consecutive").inside["misses"] > 0


def _declines_trace(path: Path, recorded_declines: int) -> Path:
    """p0 finishes a (after its start) and c (finish recorded before its start, block 4 < 6);
    p1 declines b and finishes d in its start block (start first)."""
    return write_trace(
        path,
        [
            header_line(1, 45),
            params_line(make_params()),
            participants_line(make_participants(2)),
            inference_line("a", 3, "p0", end=5),
            declined_line("b", 4, "p1", end=6),
            inference_line("c", 6, "p0", end=4),
            inference_line("d", 7, "p1", end=7),
            summary_line(
                0,
                40,
                [
                    {"participant_id": "p0", "inference_count": "2"},
                    {"participant_id": "p1", "inference_count": "1"},
                ],
                [
                    {"epoch_index": "0", "address": "p0", "declined_requests": "0"},
                    {
                        "epoch_index": "0",
                        "address": "p1",
                        "declined_requests": str(recorded_declines),
                    },
                ],
            ),
        ],
    )


def test_declines_and_finish_before_start_are_replayed(tmp_trace: Path) -> None:
    report = replay_as_recorded(_declines_trace(tmp_trace, 1), policies=["gonka"])
    assert report.ok, (report.summary_mismatches, report.status_mismatches.items)
    assert report.summaries_checked[0]["declines_compared"] is True
    assert (report.recorded["successes"], report.recorded["declines"]) == (3, 1)
    assert report.tx_failures.count == 0


def test_tampered_declines_are_a_mismatch(tmp_trace: Path) -> None:
    report = replay_as_recorded(_declines_trace(tmp_trace, 3), policies=["none"])
    assert report.summary_mismatches == [
        {
            "epoch": 0,
            "participant": "p1",
            "field": "declined_requests",
            "exported": 3,
            "computed": 1,
            "line": 8,
        }
    ]


def test_a_checkpointed_block_keeps_its_params_parts() -> None:
    """A block's items travel in a replay's checkpoint: a params change's two parts (the chain's
    Params and keepersim's ExtensionParams) come back equal."""
    from keepersim.replay.common import ParamsPart, expand_scheduled
    from keepersim.store.checkpoint import decode_state, encode_state
    from keepersim.trace.messages import Scheduled

    scheduled = Scheduled(20, 1, "params", 5, make_params(expiration=33))
    items = expand_scheduled(scheduled)
    assert items == [ParamsPart(scheduled.msg, False), ParamsPart(scheduled.msg, True)]
    assert decode_state(encode_state((scheduled, items))) == (scheduled, items)
