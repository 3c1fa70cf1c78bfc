"""A killed devshard run resumes to the result of an uninterrupted one (issue 33).

The devshard path's escrows, pickers, limiter and pending signals are driver state outside the
app hash; ``keepersim.sim.devshard_checkpoint`` commits them with every block. Checked three
ways: the CLI killed with a real SIGKILL at reproducible points (``KEEPERSIM_TEST_KILL_AT``, the
mechanism of tests/test_resume.py) and resumed, reports and traces byte-equal; runs stopped
after any block and resumed in process (hypothesis over the stop height, the policy and the
devshard knobs); and the record's round trip.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from functools import cache
from pathlib import Path
from typing import Any

import plyvel
import pytest
from cli_runs import UNSTABLE, read_stable_report, run_keepersim
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.chain import Chain
from keepersim.gateway.limiter_params import ThrottleSettings
from keepersim.sim.devshard_checkpoint import (
    DEVSHARD_CHECKPOINT_KEY,
    encode_devshard_state,
    process_devshard_state,
)
from keepersim.sim.devshard_path import DevshardPath
from keepersim.sim.devshard_spec import DevshardSpec
from keepersim.sim.governance import parse_governance
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.run_result import RunResult
from keepersim.sim.scenario import ParticipantSpec, Scenario, format_scenario_json
from keepersim.store.checkpoint import KILL_AT_ENV, ResumeError
from keepersim.types.policies import DEVSHARD_LIMITER

BLOCKS = 160


def _scenario(spec: DevshardSpec, *, blocks: int = BLOCKS) -> Scenario:
    """Seven hosts, one that misses half its requests, capacity with pushback (declines,
    re-tries with exclusions, 429 quarantines), short epochs (escrows renewed by epoch): every
    kind of devshard state is pending at some block."""
    weights = [100, 200, 300, 400, 50, 25]
    participants = [
        ParticipantSpec(
            f"p{i}", weight=w, latency_min=1, latency_max=4, miss=((0, 0.02),), capacity=2
        )
        for i, w in enumerate(weights)
    ]
    participants.append(
        ParticipantSpec("bad", weight=300, latency_min=1, latency_max=3, miss=((0, 0.5),))
    )
    return Scenario(
        name="devshard-resume",
        seed=11,
        blocks=blocks,
        epoch_length=60,
        expiration_blocks=15,
        arrivals_per_block=3.0,
        participants=tuple(participants),
        pushback=True,
        max_reselects=2,
        devshard=spec,
    )


# Short quarantines, so that hosts come back on probation and "no winner" races run.
_SPEC = DevshardSpec(
    share=0.8,
    nonces_per_escrow=40,
    open_escrows=2,
    limiter=ThrottleSettings(transport_failure_quarantine_ms=60_000, http_quarantine_ms=120_000),
)


def _stable(result: RunResult) -> dict[str, Any]:
    return {k: v for k, v in result.to_dict().items() if k not in UNSTABLE and k != "store"}


@cache
def _reference(policy: str, spec: DevshardSpec) -> dict[str, Any]:
    return _stable(run_scenario(_scenario(spec), policy, store="memory"))


class _Stop(Exception):
    pass


def _run_stopped(policy: str, spec: DevshardSpec, folder: Path, stops: list[int]) -> RunResult:
    """Run with a store, abort after each of ``stops`` (a block committed and processed, as a
    kill between blocks), resume after each, and finish."""
    for i, stop in enumerate(stops):

        def hook(_chain: Chain, height: int, stop: int = stop) -> None:
            if height == stop:
                raise _Stop

        with pytest.raises(_Stop):
            run_scenario(_scenario(spec), policy, store_dir=folder, on_block=hook, resume=i > 0)
    return run_scenario(_scenario(spec), policy, store_dir=folder, resume=bool(stops))


def test_the_limiter_run_has_every_kind_of_pending_state() -> None:
    """The scenario is worth resuming: the limiter ghosts, quarantines and re-tries happen."""
    m = _reference(DEVSHARD_LIMITER, _SPEC)
    assert m["devshard_ghosts"] > 0 and m["devshard_limiter_signals"] > 0
    assert m["declines"] > 0 and m["devshard_escrows"] > 2
    assert sum(m["devshard_misses_by_reason"].values()) > 0
    assert m["requests"] > m["devshard_requests"] > 0  # both paths
    assert m["devshard_race_attempts"] > 0 and m["devshard_no_winner_dispatches"] > 0


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(["none", DEVSHARD_LIMITER, "windowed"]),
    st.lists(st.integers(1, BLOCKS - 1), min_size=1, max_size=2, unique=True).map(sorted),
    st.booleans(),
)
def test_a_stopped_and_resumed_devshard_run_ends_as_an_uninterrupted_one(
    policy: str, stops: list[int], slot_filter: bool
) -> None:
    import tempfile

    spec = dataclasses.replace(_SPEC, slot_filter=slot_filter)
    with tempfile.TemporaryDirectory() as tmp:
        resumed = _run_stopped(policy, spec, Path(tmp) / "chain", stops)
    assert _stable(resumed) == _reference(policy, spec)


def test_a_governance_change_of_devshard_params_survives_a_resume(tmp_path: Path) -> None:
    """The limiter's params changed by governance before the stop are the checkpoint's."""
    base = build_params(_scenario(_SPEC), DEVSHARD_LIMITER)
    entry = {
        "height": 50,
        "set": {
            "extension_params.devshard_params.request_burst": 2,
            "extension_params.devshard_params.transport_failure_quarantine_ms": 20_000,
        },
    }
    schedule = parse_governance([entry], base)

    def run(**kw: Any) -> RunResult:
        return run_scenario(_scenario(_SPEC), DEVSHARD_LIMITER, governance=schedule, **kw)

    reference = _stable(run(store="memory"))
    assert reference != _reference(DEVSHARD_LIMITER, _SPEC)

    def hook(_chain: Chain, height: int) -> None:
        if height == 90:
            raise _Stop

    with pytest.raises(_Stop):
        run(store_dir=tmp_path / "chain", on_block=hook)
    assert _stable(run(store_dir=tmp_path / "chain", resume=True)) == reference


def test_the_record_round_trips_mid_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """encode(decode(encode(state))) == encode(state) after a limiter run's every block."""
    spec = _SPEC
    seen: list[bytes] = []
    original = DevshardPath.process_block

    def process_block(self: DevshardPath, height: int, chain: Chain) -> Any:
        out = original(self, height, chain)
        data = encode_devshard_state(self)
        fresh = DevshardPath(spec, 11, limiter=True)
        process_devshard_state(fresh, data)
        assert encode_devshard_state(fresh) == data
        seen.append(data)
        return out

    monkeypatch.setattr(DevshardPath, "process_block", process_block)
    run_scenario(_scenario(spec, blocks=80), DEVSHARD_LIMITER, store="memory")
    assert len(seen) == 80
    record = json.loads(seen[-1])
    assert record["limiter"]["hosts"], "the limiter tracked nobody: the round trip tested little"


def test_a_record_of_another_layout_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "chain"

    def hook(chain: Chain, height: int) -> None:
        if height == 20:
            raise _Stop

    with pytest.raises(_Stop):
        run_scenario(_scenario(_SPEC), "none", store_dir=folder, on_block=hook)
    db = plyvel.DB(str(folder))
    try:
        record = json.loads(db.get(DEVSHARD_CHECKPOINT_KEY))
        record["version"] = 999
        db.put(DEVSHARD_CHECKPOINT_KEY, json.dumps(record).encode())
    finally:
        db.close()
    with pytest.raises(ResumeError, match="devshard checkpoint"):
        run_scenario(_scenario(_SPEC), "none", store_dir=folder, resume=True)


# the CLI, killed with SIGKILL -------------------------------------------------------------


def test_the_cli_killed_and_resumed_ends_as_an_uninterrupted_devshard_run(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(format_scenario_json(_scenario(_SPEC)), encoding="utf-8")

    def args(folder: Path, *extra: str) -> list[str]:
        return [
            "simulate",
            str(scenario),
            "--policy",
            DEVSHARD_LIMITER,
            "--out",
            str(folder / "out.json"),
            "--trace-out",
            str(folder / "trace.jsonl"),
            "--no-progress",
            *extra,
        ]

    ref = tmp_path / "ref"
    ref.mkdir()
    done = run_keepersim(*args(ref))
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    run.mkdir()
    resumable = args(run, "--store-dir", str(run / "store"))
    for i, point in enumerate(["1:pre", "57:post", "103:pre", f"{BLOCKS}:post"]):
        killed = run_keepersim(*resumable, *(["--resume"] if i else []), env={KILL_AT_ENV: point})
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
    done = run_keepersim(*resumable, "--resume")
    assert done.returncode == 0, done.stderr
    assert read_stable_report(run / "out.json") == read_stable_report(ref / "out.json")
    assert (run / "trace.jsonl").read_bytes() == (ref / "trace.jsonl").read_bytes()
