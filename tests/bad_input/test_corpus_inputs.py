"""Bad traces, governance files and flags through the CLI: exit 2, the input named, no
traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from corpus_helpers import assert_refused, get_scenario, run_main, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_helpers import record_trace


@pytest.fixture(scope="module")
def trace_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path, _ = record_trace(tmp_path_factory.mktemp("trace") / "t.jsonl", blocks=40, participants=3)
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "scenario.json", get_scenario())


def _first_record(lines: list[str]) -> int:
    """Index of the first line after the prologue (an inference record)."""
    return next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "inference")


def _replace_field(line: str, key: str, value: Any) -> str:
    record = json.loads(line)
    if value is _DROP:
        del record[key]
    else:
        record[key] = value
    return json.dumps(record)


_DROP = object()

# (how to corrupt the lines, strings the message must name besides the file)
TRACE_CASES: list[tuple[str, Any]] = [
    ("not json", lambda ls, i: ls[:i] + ["{not json"] + ls[i + 1 :]),
    ("a list", lambda ls, i: ls[:i] + ["[1, 2]"] + ls[i + 1 :]),
    ("unknown type", lambda ls, i: ls[:i] + [_replace_field(ls[i], "type", "bogus")] + ls[i + 1 :]),
    (
        "bad height",
        lambda ls, i: ls[:i] + [_replace_field(ls[i], "start_block_height", "abc")] + ls[i + 1 :],
    ),
    ("no header", lambda ls, i: ls[1:]),
    ("truncated", lambda ls, i: ls[:i] + [ls[i][: len(ls[i]) // 2]] + ls[i + 1 :]),
    (
        "missing field",
        lambda ls, i: ls[:i] + [_replace_field(ls[i], "inference_id", _DROP)] + ls[i + 1 :],
    ),
    (
        "unknown status",
        lambda ls, i: ls[:i] + [_replace_field(ls[i], "status", "LOST")] + ls[i + 1 :],
    ),
    ("empty", lambda ls, i: []),
]


@pytest.mark.parametrize(("what", "corrupt"), TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
@pytest.mark.parametrize("mode", ["as-recorded", "what-if"])
def test_corrupt_trace(
    what: str, corrupt: Any, mode: str, trace_lines: list[str], tmp_path: Path
) -> None:
    lines = corrupt(list(trace_lines), _first_record(trace_lines))
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    status, err = run_main(["replay", str(path), "--mode", mode])
    assert_refused(status, err, "bad.jsonl")
    if lines:
        assert ":" in err.split("bad.jsonl", 1)[1][:8], err  # path:line


def test_binary_and_missing_trace(tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage\n")
    assert_refused(*run_main(["replay", str(binary)]), "binary.jsonl")
    assert_refused(*run_main(["replay", str(tmp_path / "gone.jsonl")]), "gone.jsonl")


# governance entries (as a file) -> strings the message must name
#: The SPRT's p0 / p1 are the chain's downtime percentages (chain Decimals: any exponent, so a
#: decimal finer than 12 fractional digits is a value, no longer an error).
P0 = "params.validation_params.downtime_good_percentage"
P1 = "params.validation_params.downtime_bad_percentage"
EXPIRATION = "params.validation_params.expiration_blocks"
GOVERNANCE_CASES: list[tuple[Any, tuple[str, ...]]] = [
    ([{"height": 1, "set": {P0: "abc"}}], (P0, "decimal string")),
    ([{"height": 1, "set": {P0: "NaN"}}], (P0, "decimal string")),
    (
        [{"height": 1, "params": {"validation_params": {"downtime_good_percentage": "abc"}}}],
        (P0, "Decimal object"),
    ),
    (
        [
            {
                "height": 1,
                "params": {"validation_params": {"downtime_good_percentage": {"value": "x"}}},
            }
        ],
        ("downtime_good_percentage.value",),
    ),
    (
        [{"height": 1, "extension_params": {"health_params": {"window": 3}}}],
        ("extension_params.health_params", "unknown field 'window'"),
    ),
    # keepersim's params are not the chain's: refused by name, not ignored
    ([{"height": 1, "params": {"health_params": {"policy": "gonka"}}}], ("'health_params'",)),
    ([{"height": 1, "set": {"sprt_params.p0": "0.1"}}], ("no field 'sprt_params'",)),
    ([{"height": 1, "params": {"validation_params": {"expiration_blocks": "x"}}}], (EXPIRATION,)),
    ([{"height": 1, "set": {"nosuch.field": 1}}], ("no field 'nosuch'",)),
    ([{"height": 1, "set": {"params.nosuch": 1}}], ("no field 'nosuch'",)),
    (
        [{"height": 1, "set": {"extension_params.cb_miss_threshold_pct": 101}}],
        ("extension_params.cb_miss_threshold_pct", "[1, 100]"),
    ),
    ([{"height": 0, "set": {EXPIRATION: 5}}], ("'height'",)),
    ([{"height": 10**6, "set": {EXPIRATION: 5}}], ("height", "last block")),
    ([{"height": 1, "set": {EXPIRATION: 5}, "params": {}}], ("not both",)),
    ([{"height": 1, "when": 3}], ("unknown key(s) 'when'",)),
    ({"height": 1}, ("expected a JSON list",)),
    (["entry"], ("expected an object",)),
    ([{"height": 1, "set": {}}], ("'set' must be a non-empty object",)),
]


@pytest.mark.parametrize(("data", "named"), GOVERNANCE_CASES)
def test_bad_governance(
    data: Any, named: tuple[str, ...], scenario_file: Path, tmp_path: Path
) -> None:
    gov = write_json(tmp_path / "gov.json", data)
    status, err = run_main(
        ["simulate", str(scenario_file), "--store", "memory", "--governance", str(gov)]
    )
    assert_refused(status, err, "gov.json", *named)


def test_bad_governance_in_replay(trace_lines: list[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in trace_lines), encoding="utf-8")
    gov = write_json(tmp_path / "gov.json", [{"height": 2, "set": {P1: "x"}}])
    status, err = run_main(["replay", str(trace), "--governance", str(gov)])
    assert_refused(status, err, "gov.json", P1, "decimal string")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(
        st.text(min_size=1, max_size=12).filter(lambda s: not _is_decimal(s)),
        st.sampled_from(["inf", "-Infinity", "NaN", "sNaN", "1e", "0x10"]),
    )
)
def test_random_bad_decimal_names_the_field(
    value: str, scenario_file: Path, tmp_path: Path
) -> None:
    gov = write_json(tmp_path / "gov.json", [{"height": 1, "set": {P0: value}}])
    status, err = run_main(
        ["simulate", str(scenario_file), "--store", "memory", "--governance", str(gov)]
    )
    assert_refused(status, err, "gov.json", P0)


def _is_decimal(text: str) -> bool:
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(text.strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


# flags: argv (with {scenario} / {trace} placeholders) -> the flag the message must name
FLAG_CASES: list[tuple[list[str], tuple[str, ...]]] = [
    (["serve", "--port", "99999"], ("--port", "65535")),
    (["serve", "--port", "0"], ("--port",)),
    (["serve", "--port", "http"], ("--port",)),
    (["serve", "--scenario", "{scenario}", "--block-rate", "0"], ("--block-rate",)),
    (["serve", "--scenario", "{scenario}", "--block-rate", "nan"], ("--block-rate",)),
    (["serve", "--scenario", "{scenario}", "--cold-wait", "-1"], ("--cold-wait",)),
    (["serve", "--scenario", "{scenario}", "--blocks", "0"], ("--blocks",)),
    (["serve", "--scenario", "{scenario}", "--fault-max-streak", "-1"], ("--fault-max-streak",)),
    (["serve", "--scenario", "{scenario}", "--faults", "bogus=1"], ("--faults",)),
    (["serve", "--scenario", "{scenario}", "--log-level", "loud"], ("--log-level",)),
    (["compare", "{scenario}", "--policies", "gonka,,windowed"], ("--policies", "none empty")),
    (["compare", "{scenario}", "--policies", ","], ("--policies",)),
    (["compare", "{scenario}", "--policies", "gonka,gonka"], ("--policies", "repeated")),
    (
        ["compare", "{scenario}", "--policies", "gonka,bogus"],
        ("--policies", "unknown policy 'bogus'"),
    ),
    (["serve", "--scenario", "{scenario}", "--policy", "bogus"], ("--policy", "unknown policy")),
    (["compare", "{scenario}", "--seeds", "0"], ("--seeds",)),
    (["compare", "{scenario}", "--jobs", "-1"], ("--jobs",)),
    (["compare", "{scenario}", "--store", "disk"], ("--store",)),
    (["simulate", "{scenario}", "--seed", "-1"], ("--seed",)),
    (["simulate", "{scenario}", "--seed", "1.5"], ("--seed",)),
    (["simulate", "{scenario}", "--seed", str(2**63)], ("--seed",)),
    (["simulate", "{scenario}", "--policy", "bogus"], ("--policy", "unknown policy")),
    (["simulate", "{scenario}", "--store", "memory", "--store-dir", "x"], ("--store-dir",)),
    (["scenarios", "generate", "--participants", "0"], ("--participants",)),
    (["scenarios", "generate", "--participants", "20000"], ("--participants", "10000")),
    (["scenarios", "generate", "--blocks", "1e12"], ("--blocks",)),
    (["scenarios", "generate", "--arrivals", "nan"], ("--arrivals",)),
    (["scenarios", "generate", "--degraded-share", "2"], ("--degraded-share",)),
    (["scenarios", "generate", "--latency", "5"], ("--latency",)),
    (["scenarios", "generate", "--builtin", "nope"], ("nope",)),
    (["replay", "{trace}", "--policies", "gonka,,none"], ("--policies",)),
    (["replay", "{trace}", "--window-blocks", "0"], ("--window-blocks",)),
    (["replay", "{trace}", "--mode", "what-if", "--prior", "x"], ("--prior",)),
    (["replay", "{trace}", "--seed", "-3"], ("--seed",)),
    (["replay", "{trace}", "--policies", "bogus"], ("--policies", "bogus")),
    (["replay", "{trace}", "--store", "leveldb", "--out", "{tmp}/o", "--resume"], ("--store-dir",)),
    (
        [
            "export",
            "--node",
            "http://127.0.0.1:9",
            "--epochs",
            "1-2",
            "--out",
            "{tmp}/t",
            "--concurrency",
            "0",
        ],
        ("--concurrency",),
    ),
    (
        [
            "export",
            "--node",
            "http://127.0.0.1:9",
            "--epochs",
            "1-2",
            "--out",
            "{tmp}/t",
            "--timeout",
            "0",
        ],
        ("--timeout",),
    ),
    (
        [
            "export",
            "--node",
            "http://127.0.0.1:9",
            "--epochs",
            "1-2",
            "--out",
            "{tmp}/t",
            "--page-limit",
            "5000",
        ],
        ("--page-limit",),
    ),
    (
        ["export", "--node", "http://127.0.0.1:9", "--epochs", "5-3", "--out", "{tmp}/t"],
        ("--epochs",),
    ),
    (["export", "--node", "ftp://x", "--epochs", "1-2", "--out", "{tmp}/t"], ("--node",)),
    (["bogus-command"], ("bogus-command",)),
]


@pytest.mark.parametrize(
    ("argv", "named"), FLAG_CASES, ids=[" ".join(a[:4]) for a, _ in FLAG_CASES]
)
def test_bad_flag(
    argv: list[str],
    named: tuple[str, ...],
    scenario_file: Path,
    trace_lines: list[str],
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in trace_lines), encoding="utf-8")
    names = {"scenario": scenario_file, "trace": trace, "tmp": tmp_path}
    status, err = run_main([a.format(**names) for a in argv])
    assert_refused(status, err, *named)
