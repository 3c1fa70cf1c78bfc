"""The escrow's own timeouts (issue 33): who serves and what counts as a miss on the devshard
path. gonka ee730031: the user asks for timeout votes ``refusal_timeout`` (60 s) after the send
when the host gave no receipt, ``execution_timeout`` (32 min) after the receipt otherwise, each
plus ``TimeoutBuffer`` (5 s) (``devshard/user/session.go:27, 1747-1781``); the verifiers accept
once the deadline has passed (``devshard/host/timeout.go:55-58, 119-121``), and only a voted
timeout is a miss (``devshard/state/machine.go:1152``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.keeper.devshard.timing import (
    TIMEOUT_BUFFER_MS,
    DevshardTimeouts,
    compute_deadline_blocks,
    compute_timeout_blocks,
)
from keepersim.sim.devshard_path import DevshardDispatch, DevshardPath
from keepersim.sim.devshard_spec import DevshardSpec
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.params import get_default_params, get_mainnet_params
from keepersim.types.pb.inference.inference.params_pb2 import DevshardEscrowParams
from keepersim.types.policies import DEVSHARD_LIMITER


def test_the_default_deadlines_are_13_and_385_blocks_at_5_s() -> None:
    for params in (get_default_params(), get_mainnet_params()):
        ds = params.params.devshard_escrow_params
        assert (ds.refusal_timeout, ds.execution_timeout) == (60, 32 * 60)
        assert compute_deadline_blocks(ds) == DevshardTimeouts(13, 385)
        assert compute_deadline_blocks(ds, 5614) == DevshardTimeouts(12, 343)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 600_000))
def test_a_deadline_is_the_timeout_plus_the_buffer_rounded_up(
    refusal: int, execution: int, block_time_ms: int
) -> None:
    ds = DevshardEscrowParams(refusal_timeout=refusal, execution_timeout=execution)
    got = compute_deadline_blocks(ds, block_time_ms)
    bare = compute_timeout_blocks(ds, block_time_ms)
    for blocks, seconds, plain in (
        (got.refusal_blocks, refusal, bare.refusal_blocks),
        (got.execution_blocks, execution, bare.execution_blocks),
    ):
        wait_ms = seconds * 1000 + TIMEOUT_BUFFER_MS
        assert blocks * block_time_ms >= wait_ms > (blocks - 1) * block_time_ms
        assert blocks >= plain


def test_a_host_without_a_receipt_reaches_the_limiter_at_the_refusal_deadline() -> None:
    path = DevshardPath(DevshardSpec(), 1, limiter=True)
    sent = DevshardDispatch(7, 0, "m", "host", refusal_blocks=13, execution_blocks=385)
    path.process_result(100, sent, "miss", 100 + 150, no_receipt=True)
    slow = DevshardDispatch(8, 0, "m", "slow", refusal_blocks=13, execution_blocks=385)
    path.process_result(100, slow, "miss", 100 + 385)
    assert path.signals == {113: [("host", "m", "miss")], 485: [("slow", "m", "miss")]}
    assert path.counts.misses == {"no_receipt": 1, "execution_timeout": 1}


def _scenario(latency: tuple[int, int], *, devshard: bool) -> Scenario:
    """A slow host (latency above the chain's 20-block expiry) among quick ones."""
    quick = [
        ParticipantSpec(f"q{i}", weight=100, latency_min=1, latency_max=3, miss=((0, 0.0),))
        for i in range(4)
    ]
    slow = ParticipantSpec(
        "slow", weight=400, latency_min=latency[0], latency_max=latency[1], miss=((0, 0.0),)
    )
    return Scenario(
        name="escrow-timeouts",
        seed=9,
        blocks=900,
        epoch_length=100_000,
        expiration_blocks=20,
        arrivals_per_block=1.0,
        participants=(*quick, slow),
        devshard=DevshardSpec(nonces_per_escrow=5000) if devshard else None,
    )


def _by_address(metrics: dict[str, Any], address: str) -> dict[str, Any]:
    return dict(next(p for p in metrics["participants"] if p["address"] == address))


def test_an_answer_within_the_escrows_execution_timeout_is_not_a_miss() -> None:
    """Latency 30-60 blocks: past the chain's expiry (20), within the escrow's 385. On the
    classic path every request of ``slow`` expires; on the devshard path none is a miss, and
    the limiter never quarantines it."""
    classic = run_scenario(_scenario((30, 60), devshard=False), "none", store="memory")
    devshard = run_scenario(_scenario((30, 60), devshard=True), DEVSHARD_LIMITER, store="memory")
    c, d = _by_address(classic.metrics, "slow"), _by_address(devshard.metrics, "slow")
    assert c["assigned"] > 50 and c["misses"] == c["resolved"] > 0
    assert d["assigned"] > 50 and d["resolved"] > 0 and d["misses"] == 0
    assert devshard.metrics["devshard_misses_by_reason"] == {}
    assert devshard.metrics["devshard_ghosts"] == 0


def test_an_answer_past_the_execution_timeout_is_an_execution_miss() -> None:
    """Latency 400-420 blocks: past the escrow's 385, so each is an execution timeout, heard by
    the limiter 385 blocks after its dispatch (then 30 min of probe quarantine: ghosts)."""
    devshard = run_scenario(_scenario((400, 420), devshard=True), DEVSHARD_LIMITER, store="memory")
    m = devshard.metrics
    reasons = m["devshard_misses_by_reason"]
    assert set(reasons) == {"execution_timeout"} and reasons["execution_timeout"] > 0
    assert m["devshard_ghosts"] > 0
    assert _by_address(m, "slow")["misses"] > 0
