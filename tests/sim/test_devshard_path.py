"""The devshard path in a run (keepersim.sim.devshard_path): escrows' slots are the chain's
draw (compute_escrow_slots, bit-exact with gonka ee730031's slots.go, tests/devshard), nonces go
round-robin over them, the gateway limiter gates the picker in ``devshard-limiter`` runs, the
chain policy's exclusions filter slot sampling with ``slot_filter``; runs are reproducible."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.chain import Chain
from keepersim.gateway.limiter_params import ThrottleSettings
from keepersim.keeper.devshard.slots import compute_escrow_slots
from keepersim.sim import run_loop
from keepersim.sim.devshard_path import is_devshard_request
from keepersim.sim.devshard_spec import DevshardSpec
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import ParticipantSpec, Scenario, dump_scenario, parse_scenario
from keepersim.sim.suite import get_builtin_scenario
from keepersim.types.policies import DEVSHARD_LIMITER, RUN_POLICIES


def _fleet(
    *,
    blocks: int = 400,
    arrivals: float = 2.0,
    bad_p: float = 0.0,
    devshard: DevshardSpec | None = None,
    pushback: bool = False,
    capacity: int | None = None,
) -> Scenario:
    participants = [
        ParticipantSpec(
            f"p{i}", weight=w, latency_min=1, latency_max=3, miss=((0, 0.0),), capacity=capacity
        )
        for i, w in enumerate([100, 200, 300, 400, 50, 25])
    ]
    participants.append(
        ParticipantSpec("bad", weight=300, latency_min=1, latency_max=3, miss=((0, bad_p),))
    )
    return Scenario(
        name="devshard-test",
        seed=3,
        blocks=blocks,
        epoch_length=10_000,
        expiration_blocks=20,
        arrivals_per_block=arrivals,
        participants=tuple(participants),
        pushback=pushback,
        devshard=devshard,
    )


def _assigned(metrics: dict[str, Any], address: str) -> int:
    return int(next(p["assigned"] for p in metrics["participants"] if p["address"] == address))


def test_devshard_limiter_is_a_known_policy_and_none_on_classic_traffic() -> None:
    assert DEVSHARD_LIMITER in RUN_POLICIES
    s = dataclasses.replace(get_builtin_scenario("sparse"), blocks=1500)
    a = run_scenario(s, "none", store="memory")
    b = run_scenario(s, DEVSHARD_LIMITER, store="memory")
    assert a.app_hash == b.app_hash
    assert not any(k.startswith("devshard") for k in b.metrics)


@pytest.mark.parametrize("share", [1.0, 0.5])
@pytest.mark.parametrize("policy", ["none", DEVSHARD_LIMITER, "gonka"])
def test_same_inputs_same_result_on_the_devshard_path(share: float, policy: str) -> None:
    s = _fleet(bad_p=0.5, devshard=DevshardSpec(share=share, nonces_per_escrow=200))
    a = run_scenario(s, policy, store="memory")
    b = run_scenario(s, policy, store="memory")
    assert a.app_hash == b.app_hash
    assert {k: v for k, v in a.metrics.items()} == b.metrics
    assert a.metrics["devshard_requests"] > 0


def test_nonces_go_round_robin_over_the_escrows_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hosts of the first escrow's dispatches, in order, are its slots 1, 2, ... (nonce n ->
    slot n % 16), the slots drawn from the app hash the block's header carries."""
    s = _fleet(blocks=30, devshard=DevshardSpec(nonces_per_escrow=5000))
    hashes: dict[int, bytes] = {}
    starts: list[tuple[int, str]] = []

    def on_block(chain: Chain, height: int) -> None:
        hashes[height] = chain.app_hash

    original = run_loop._Run.record_start

    def record(self: run_loop._Run, height: int, rid: str, address: str) -> None:
        starts.append((height, address))
        original(self, height, rid, address)

    monkeypatch.setattr(run_loop._Run, "record_start", record)
    run_scenario(s, "none", store="memory", on_block=on_block)
    first = starts[0][0]
    header_hash = hashes[first - 1] if first > 1 else None
    assert header_hash is not None
    weights = [(p.address, p.weight) for p in s.participants]
    slots = compute_escrow_slots(header_hash, 1, "default", weights, 16)
    expected = [slots[n % 16] for n in range(1, len(starts) + 1)]
    assert [a for _, a in starts] == expected


def test_the_limiter_ghosts_a_host_in_probe_quarantine() -> None:
    """``bad`` misses every request: after its first miss is known (the refusal deadline, 13
    blocks at 5 s), the gateway quarantines it for 30 min (360 blocks) and its slots carry
    ghost probes; under ``none`` it keeps getting requests."""
    s = _fleet(blocks=300, bad_p=1.0, devshard=DevshardSpec(nonces_per_escrow=5000))
    limited = run_scenario(s, DEVSHARD_LIMITER, store="memory")
    plain = run_scenario(s, "none", store="memory")
    assert plain.metrics["devshard_ghosts"] == 0
    assert limited.metrics["devshard_ghosts_by_kind"].get("participant_throttled_no_send", 0) > 0
    assert _assigned(limited.metrics, "bad") < _assigned(plain.metrics, "bad") / 5
    assert limited.misses < plain.misses


def test_slot_filter_keeps_the_chain_policys_exclusions_out_of_new_escrows() -> None:
    s = _fleet(
        blocks=1200, bad_p=0.9, devshard=DevshardSpec(nonces_per_escrow=100, slot_filter=True)
    )
    unfiltered = dataclasses.replace(
        s, devshard=DevshardSpec(nonces_per_escrow=100, slot_filter=False)
    )
    filtered = run_scenario(s, "gonka", store="memory")
    plain = run_scenario(unfiltered, "gonka", store="memory")
    assert filtered.metrics["devshard_filtered_escrows"] > 0
    assert plain.metrics["devshard_filtered_escrows"] == 0
    assert _assigned(filtered.metrics, "bad") < _assigned(plain.metrics, "bad")


def test_a_declined_request_is_retried_on_another_host() -> None:
    s = _fleet(
        blocks=200,
        arrivals=6.0,
        capacity=1,
        pushback=True,
        devshard=DevshardSpec(nonces_per_escrow=5000),
    )
    r = run_scenario(s, "none", store="memory")
    assert r.metrics["declines"] > 0
    assert r.metrics["devshard_dispatches"] > r.metrics["devshard_requests"]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.floats(0.0, 1.0))
def test_the_share_split_is_a_threshold_on_one_hash(seed: int, share: float) -> None:
    """Raising the share only adds requests to the devshard path (one hash per request)."""
    lower = [is_devshard_request(seed, n, share / 2) for n in range(50)]
    upper = [is_devshard_request(seed, n, share) for n in range(50)]
    assert all(u or not lo for lo, u in zip(lower, upper, strict=True))
    assert all(is_devshard_request(seed, n, 1.0) for n in range(5))
    assert not any(is_devshard_request(seed, n, 0.0) for n in range(5))


def test_open_escrows_spread_a_models_traffic_over_several_escrows() -> None:
    one = run_scenario(_fleet(blocks=60, devshard=DevshardSpec(nonces_per_escrow=5000)), "none")
    three = run_scenario(
        _fleet(blocks=60, devshard=DevshardSpec(nonces_per_escrow=5000, open_escrows=3)), "none"
    )
    assert one.metrics["devshard_escrows"] == 1
    assert three.metrics["devshard_escrows"] == 3
    assert three.metrics["devshard_dispatches"] == one.metrics["devshard_dispatches"]


@settings(max_examples=50, deadline=None)
@given(
    st.floats(0.0, 1.0),
    st.integers(1, 20_000),
    st.integers(1, 64),
    st.integers(0, 1024),
    st.booleans(),
    st.integers(1, 600_000),
    st.sampled_from(["transport_failure", "eof_transport", "empty_stream", "stalled_winner"]),
)
def test_the_devshard_key_round_trips(
    share: float, npe: int, lanes: int, size: int, slot_filter: bool, ms: int, signal: str
) -> None:
    spec = DevshardSpec(share, npe, lanes, size, slot_filter, ms, signal)
    s = dataclasses.replace(get_builtin_scenario("sparse"), devshard=spec)
    assert parse_scenario(dump_scenario(s), "round trip") == s


def test_the_limiters_durations_are_params() -> None:
    """A 429 quarantines its host for 60 min by default (720 blocks at 5 s); with
    ``limiter.http_quarantine_ms`` at one block the hosts that declined come back at once (on
    probation, so their dispatches start "no winner" races): a far smaller share of the nonces
    is burned on throttled hosts, and more requests reach a full host and are declined."""
    base = _fleet(blocks=300, arrivals=6.0, capacity=1, pushback=True)
    default = dataclasses.replace(base, devshard=DevshardSpec(nonces_per_escrow=5000))
    short = dataclasses.replace(
        base,
        devshard=DevshardSpec(
            nonces_per_escrow=5000, limiter=ThrottleSettings(http_quarantine_ms=5000)
        ),
    )
    a = run_scenario(default, DEVSHARD_LIMITER, store="memory").metrics
    b = run_scenario(short, DEVSHARD_LIMITER, store="memory").metrics
    throttled = "participant_throttled_no_send"

    def throttled_share(m: dict[str, Any]) -> float:
        nonces = m["devshard_dispatches"] + m["devshard_ghosts"]
        return float(m["devshard_ghosts_by_kind"][throttled]) / nonces

    assert throttled_share(a) > 1.5 * throttled_share(b)
    assert b["devshard_race_attempts"] > 0 == a["devshard_race_attempts"]
    assert b["declines"] > 10 * max(1, a["declines"])


def test_the_server_refuses_a_devshard_scenario() -> None:
    from keepersim.server.runner import RunnerError, open_scenario_chain

    s = dataclasses.replace(get_builtin_scenario("sparse"), devshard=DevshardSpec())
    with pytest.raises(RunnerError, match="classic path only"):
        open_scenario_chain(s, "none")
