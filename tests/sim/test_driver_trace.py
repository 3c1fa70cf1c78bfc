"""The trace written during a run (docs/trace-format.md): content and order."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from keepersim.sim.governance import parse_governance
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import parse_scenario


def make_scenario() -> Any:
    return parse_scenario(
        {
            "name": "trace",
            "seed": 11,
            "blocks": 250,
            "epoch_length": 100,
            "expiration_blocks": 15,
            "arrivals_per_block": 1.5,
            "participants": [
                {"address": "a", "weight": 1000, "latency_blocks": [1, 6], "miss": [[0, 0.02]]},
                {"address": "b", "weight": 700, "miss": [[0, 0.0], [50, 0.8], [120, 0.0]]},
                {"address": "c", "weight": 500, "miss": [[0, 0.05]]},
            ],
        },
        "test",
    )


def read_trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trace_lines_come_in_height_order(tmp_path: Path) -> None:
    s = make_scenario()
    path = tmp_path / "trace.jsonl"
    governance = parse_governance(
        [{"height": 80, "set": {"params.validation_params.expiration_blocks": 25}}],
        build_params(s, "gonka"),
    )
    result = run_scenario(
        s, "gonka", store="memory", trace_out=path, governance=governance
    ).to_dict()
    lines = read_trace(path)
    # The closing record: the number of lines before it and the SHA-256 of their bytes.
    raw = path.read_bytes()
    body = raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 1]
    assert lines.pop() == {
        "type": "end",
        "lines": len(lines),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    assert [line["type"] for line in lines].count("end") == 0
    header = lines[0]
    assert header == {
        "type": "header",
        "version": 3,
        "chain_id": "keepersim-trace",
        "source": "simulate",
        "first_height": "1",
        "last_height": "250",
        "scenario": "trace",
        "seed": 11,
        "policy": "gonka",
    }
    kinds = [line["type"] for line in lines]
    assert kinds.count("header") == 1
    params = [line for line in lines if line["type"] == "params"]
    assert [p["height"] for p in params] == ["0", "81"]  # one line for the change
    # the chain's Params (int64 as a string) and keepersim's ExtensionParams
    assert params[0]["params"]["validation_params"]["expiration_blocks"] == "15"
    assert params[1]["params"]["validation_params"]["expiration_blocks"] == "25"
    assert params[0]["extension_params"]["health_params"]["policy"] == "gonka"
    participants = [line for line in lines if line["type"] == "participants"]
    assert [(p["epoch_index"], p["height"]) for p in participants] == [
        ("0", "0"),
        ("1", "100"),
        ("2", "200"),
    ]
    assert {p["address"] for p in participants[0]["participants"]} == {"a", "b", "c"}
    # models and ML nodes are keepersim's registration, beside the chain's Participant
    assert "models" not in participants[0]["participants"][0]
    nodes = participants[0]["participant_nodes"]
    assert [n["address"] for n in nodes] == ["a", "b", "c"] and all(n["ml_nodes"] for n in nodes)
    summaries = [line for line in lines if line["type"] == "epoch_summary"]
    assert [(x["epoch_index"], x["height"]) for x in summaries] == [("0", "100"), ("1", "200")]
    assert len(summaries[0]["summaries"]) == 3
    assert [d["address"] for d in summaries[0]["epoch_declines"]] == ["a", "b", "c"]
    assert "declined_requests" not in summaries[0]["summaries"][0]

    inferences = [line for line in lines if line["type"] == "inference"]
    assert len(inferences) == result["selections"]
    keys = [(int(i["start_block_height"]), i["inference_id"]) for i in inferences]
    assert keys == sorted(keys)
    statuses = [i["status"] for i in inferences]
    assert statuses.count("EXPIRED") == result["misses"]
    assert statuses.count("FINISHED") == result["finished"]
    unfinished = [
        i for i in inferences if i["status"] == "STARTED" and i["end_block_height"] == "0"
    ]
    assert len(unfinished) == statuses.count("STARTED") == result["in_flight_at_end"]
    # Order by height: each non-inference line at height H follows every inference line that
    # started before H and precedes those that started at or after H.
    position = {id(line): n for n, line in enumerate(lines)}
    for line in params + participants + summaries:
        height = int(line["height"])
        for inf in inferences:
            start = int(inf["start_block_height"])
            if start < height:
                assert position[id(inf)] < position[id(line)]
            else:
                assert position[id(inf)] > position[id(line)]
    # Summaries agree with the inference lines of their epoch.
    first = summaries[0]["summaries"]
    misses_epoch0 = sum(int(x["missed_requests"]) for x in first)

    def expiry(inf: dict[str, Any]) -> int:  # expiration_blocks 15, then 25 from height 81
        start = int(inf["start_block_height"])
        return start + (15 if start <= 80 else 25)

    expired_in_epoch0 = sum(1 for i in inferences if i["status"] == "EXPIRED" and expiry(i) <= 100)
    assert misses_epoch0 == expired_in_epoch0


def test_no_trace_file_without_trace_out(tmp_path: Path) -> None:
    s = make_scenario()
    result = run_scenario(s, "none", store="memory")
    assert result.trace_path is None
    assert list(tmp_path.iterdir()) == []


def test_trace_matches_the_trace_schema(tmp_path: Path) -> None:
    import jsonschema

    schema_path = Path(__file__).resolve().parents[2] / "keepersim/trace/schema/trace.schema.json"
    if not schema_path.exists():
        pytest.skip("the trace schema is not in this tree")
    validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
    path = tmp_path / "trace.jsonl"
    run_scenario(make_scenario(), "gonka", store="memory", trace_out=path)
    for n, line in enumerate(read_trace(path), start=1):
        errors = [e.message for e in validator.iter_errors(line)]
        assert not errors, (n, line["type"], errors[:3])


def test_trace_is_read_back_by_the_reader(tmp_path: Path) -> None:
    """The writer writes what the reader reads: every line parses and passes its checks."""
    from keepersim.trace.reader import iterate_trace
    from keepersim.trace.records import InferenceRecord, ParticipantsRecord

    path = tmp_path / "trace.jsonl"
    scenario = make_scenario()
    run_scenario(scenario, "gonka", store="memory", trace_out=path)
    records = list(iterate_trace(path))
    assert len(records) == len(read_trace(path)) - 1  # all but the closing record
    participants = next(r for r in records if isinstance(r, ParticipantsRecord))
    assert {n.address: list(n.models) for n in participants.nodes} == {
        p.address: list(p.models) for p in scenario.participants
    }
    assert any(isinstance(r, InferenceRecord) and r.is_finished() for r in records)
