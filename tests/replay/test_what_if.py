"""What-if replay: deterministic per seed, paired across policies, bounded memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from replay_helpers import record_trace

from keepersim.replay.estimator import estimate_trace
from keepersim.replay.what_if import compute_keyed_int, replay_what_if
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import InferenceRecord

Log = list[tuple[int, str, str, int | None]]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, _ = record_trace(
        tmp_path_factory.mktemp("wi") / "trace.jsonl",
        blocks=400,
        participants=5,
        arrivals=2.0,
        miss={"p1": 0.8},
        latency=(1, 6),
        seed=21,
    )
    return path


def _strip(result: dict[str, Any]) -> dict[str, Any]:
    out = dict(result)
    out["stats"] = {k: v for k, v in out["stats"].items() if k != "elapsed_seconds"}
    return out


def test_same_seed_same_result(trace: Path) -> None:
    a = replay_what_if(trace, "gonka", seed=5, window_blocks=100)
    b = replay_what_if(trace, "gonka", seed=5, window_blocks=100)
    assert _strip(a) == _strip(b)
    c = replay_what_if(trace, "gonka", seed=6, window_blocks=100)
    assert _strip(c) != _strip(a)
    for key in ("inferences", "misses", "miss_rate", "fallback_selections", "app_hash", "policy"):
        assert key in a
    assert a["inferences"] + a["unserved"]["count"] == a["recorded"]["inferences"]


def test_policies_are_paired(trace: Path) -> None:
    _, estimator = estimate_trace(trace, window_blocks=100)
    logs: dict[str, Log] = {"none": [], "gonka": []}
    results = {}
    for policy, log in logs.items():

        def hook(h: int, i: str, e: str, lat: int | None, log: Log = log) -> None:
            log.append((h, i, e, lat))

        results[policy] = replay_what_if(
            trace, policy, seed=9, estimator=estimator, on_request=hook
        )
    none, gonka = logs["none"], logs["gonka"]
    # The same request stream: heights and ids in the same order.
    assert [(h, i) for h, i, _, _ in none] == [(h, i) for h, i, _, _ in gonka]
    recorded = [
        (r.start_height, r.inference_id)
        for r in iterate_trace(trace)
        if isinstance(r, InferenceRecord)
    ]
    assert [(h, i) for h, i, _, _ in none] == recorded
    # The same (request, executor) gets the same outcome under both policies.
    same = [(a, b) for a, b in zip(none, gonka, strict=True) if a[2] == b[2]]
    assert len(same) > len(none) // 2
    assert all(a[3] == b[3] for a, b in same)
    # gonka keeps the 80%-miss participant out part of the time: fewer misses on it.
    p1_none = results["none"]["per_participant"]["p1"]["inferences"]
    p1_gonka = results["gonka"]["per_participant"]["p1"]["inferences"]
    assert p1_gonka < p1_none
    assert results["gonka"]["exclusions"]["p1"]["blocks"] > 0
    assert results["gonka"]["misses"] <= results["none"]["misses"]


def test_pending_bounded_by_inflight(trace: Path) -> None:
    result = replay_what_if(trace, "none", seed=1, window_blocks=100)
    # Latencies come from the recording (at most 6 blocks) and at most 6 arrivals per block.
    assert 0 < result["stats"]["max_pending"] <= 6 * 6


def test_keyed_randomness_is_stable() -> None:
    assert compute_keyed_int(1, "req", "p0", "miss") == compute_keyed_int(1, "req", "p0", "miss")
    assert compute_keyed_int(1, "req", "p0", "miss") != compute_keyed_int(2, "req", "p0", "miss")
    assert compute_keyed_int(1, "req", "p0", "miss") != compute_keyed_int(1, "req", "p1", "miss")
    assert 0 <= compute_keyed_int(1, "req", "p0", "latency") < 2**64


# The calibration, small: what-if on a none-recorded trace against simulate's real runs of the
# same seed (the full figure: scripts/calibrate_what_if.py, docs/results/what-if-calibration/).
CALIBRATION_CELLS = (
    ("steady_degraded", 1, ("none", "gonka", "windowed")),
    ("mainnet_like", 1, ("none", "windowed")),
)
CALIBRATION_BLOCKS = 2000


def test_what_if_matches_simulate(tmp_path: Path) -> None:
    import dataclasses

    from keepersim.replay.calibration import compute_rank_agreement
    from keepersim.sim.run_loop import run_scenario
    from keepersim.sim.suite import get_builtin_scenario

    separated = 0
    for scenario, seed, policies in CALIBRATION_CELLS:
        spec = dataclasses.replace(get_builtin_scenario(scenario, seed), blocks=CALIBRATION_BLOCKS)
        trace = tmp_path / f"{scenario}.jsonl"
        real: dict[str, dict[str, Any]] = {}
        for policy in policies:
            run = run_scenario(
                spec,
                policy,
                seed=seed,
                store="memory",
                trace_out=trace if policy == "none" else None,
            )
            real[policy] = {
                "misses": run.misses,
                "inferences": run.inferences,
                "miss_rate": run.miss_rate,
            }
        _, estimator = estimate_trace(trace)
        what_if = {
            policy: replay_what_if(trace, policy, seed=seed, estimator=estimator)
            for policy in policies
        }
        table = {p: (real[p]["miss_rate"], what_if[p]["miss_rate"]) for p in policies}
        for policy in policies:
            error = what_if[policy]["miss_rate"] / real[policy]["miss_rate"] - 1
            assert abs(error) <= 0.15, (scenario, policy, table)
        rank = compute_rank_agreement(real, what_if)
        assert rank["disagreements"] == [], (scenario, table)
        separated += rank["separated_pairs"]
        assert what_if["none"]["calibration"]["available"]
    assert separated >= 2  # simulate's intervals do separate policies here: ranks are tested


def test_cli_report_states_the_calibration_error(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from keepersim.cli import main

    out = tmp_path / "out"
    args = ["replay", str(trace), "--mode", "what-if", "--policies", "none,windowed"]
    assert main([*args, "--store", "memory", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "calib_err_med" in printed and "calibration (what-if vs simulate" in printed
    report = json.loads((out / "report.json").read_text())
    calibration = report["calibration"]
    assert calibration["available"] and set(calibration["per_policy"]) >= {"none", "windowed"}
    assert report["runs"]["windowed"]["calibration"]["per_policy"].keys() == {"windowed"}
    assert report["estimator"]["method"] == "segments"
    # The windows estimator is not what was calibrated: the report says so.
    assert main([*args, "--store", "memory", "--window-blocks", "100"]) == 0
    assert "differ from the calibrated" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--estimator", "segments", "--window-blocks", "100"]) == 2
    assert "--window-blocks applies to --estimator windows only" in capsys.readouterr().err


def test_sprt_what_if_runs_the_chains_sprt(trace: Path) -> None:
    """The sprt policy is the chain's SPRT deactivation alone: as simulate's sprt runs, a what-if
    of it turns sprt_enabled on (the recording, made under gonka, had it off)."""
    from keepersim.replay.common import open_trace
    from keepersim.trace.records import BadLines

    prologue, _ = open_trace(trace, skip_bad=False, bad_lines=BadLines())
    assert not prologue.params.params.extension_params.sprt_enabled
    sprt = replay_what_if(trace, "sprt", seed=3)
    none = replay_what_if(trace, "none", seed=3)
    # SPRT deactivates the 80%-miss participant (out of the candidates, not a table exclusion).
    p1_sprt = sprt["per_participant"]["p1"]["inferences"]
    assert p1_sprt < none["per_participant"]["p1"]["inferences"]
    assert sprt["misses"] < none["misses"]


def test_what_if_reports_the_weight_a_factor_withholds(tmp_path: Path) -> None:
    # p2 and p3 are healthy (estimated p <= 0.05) but miss now and then: trin-multiplicative
    # halves their weight for a while, keeps nobody out (false exclusion 0) and withholds.
    path, _ = record_trace(
        tmp_path / "trace.jsonl",
        blocks=400,
        participants=5,
        arrivals=2.0,
        miss={"p1": 0.8, "p2": 0.04, "p3": 0.03},
        latency=(1, 6),
        seed=21,
    )
    _, estimator = estimate_trace(path, window_blocks=100)
    trin = replay_what_if(path, "trin-multiplicative", seed=5, estimator=estimator)
    assert trin["false_exclusion_weight_share"] == 0.0
    assert trin["withheld_weight_share"] > 0.0
    none = replay_what_if(path, "none", seed=5, estimator=estimator)
    assert none["withheld_weight_share"] == 0.0
    gonka = replay_what_if(path, "gonka", seed=5, estimator=estimator)
    assert gonka["withheld_weight_share"] == gonka["false_exclusion_weight_share"]
