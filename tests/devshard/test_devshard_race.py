"""The "no winner" race (issue 33 item 2): a host in shadow quarantine or on probation gets
real traffic but cannot win, so the gateway starts the next attempt at once on another
participant (gonka ee730031 ``devshard/cmd/devshardctl/redundancy.go``: ``primary_suspicious``
decision :1714-1716, ``suspicious_host_immediate_escalation`` :2631-2637, ``triedParticipants``
:1695-1710, at most ``maxAttempts`` = the group size :3721-3730; the winner an eligible attempt
with content, else a no-winner one, :3732-3766; ``devshard/docs/host-health.md``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from keepersim.gateway.limiter_params import ThrottleSettings
from keepersim.sim.devshard_path import DevshardDispatch, DevshardPath
from keepersim.sim.devshard_spec import DevshardSpec
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.policies import DEVSHARD_LIMITER

GROUP = 16


def _scenario(*, capacity: int | None = None) -> Scenario:
    participants = [
        ParticipantSpec(
            f"p{i}", weight=w, latency_min=1, latency_max=3, miss=((0, 0.02),), capacity=capacity
        )
        for i, w in enumerate([100, 200, 300, 400, 150])
    ]
    participants.append(
        ParticipantSpec("bad", weight=500, latency_min=1, latency_max=3, miss=((0, 0.5),))
    )
    return Scenario(
        name="no-winner-race",
        seed=21,
        blocks=400,
        epoch_length=100_000,
        expiration_blocks=20,
        arrivals_per_block=2.0,
        participants=tuple(participants),
        pushback=capacity is not None,
        devshard=DevshardSpec(
            nonces_per_escrow=500,
            # 1-minute quarantines: hosts come back on probation (2 strikes, no winner) often
            limiter=ThrottleSettings(
                transport_failure_quarantine_ms=60_000, http_quarantine_ms=60_000
            ),
        ),
    )


def _run(
    monkeypatch: pytest.MonkeyPatch, policy: str, scenario: Scenario
) -> tuple[dict[str, Any], list[DevshardDispatch]]:
    seen: list[DevshardDispatch] = []
    original = DevshardPath.process_block

    def process_block(self: DevshardPath, height: int, chain: Any) -> Any:
        out = original(self, height, chain)
        seen.extend(e for e in out if isinstance(e, DevshardDispatch))
        return out

    monkeypatch.setattr(DevshardPath, "process_block", process_block)
    return run_scenario(scenario, policy, store="memory").metrics, seen


@pytest.mark.parametrize("capacity", [None, 2])
def test_a_no_winner_dispatch_starts_the_next_attempt_on_another_participant(
    monkeypatch: pytest.MonkeyPatch, capacity: int | None
) -> None:
    metrics, dispatches = _run(monkeypatch, DEVSHARD_LIMITER, _scenario(capacity=capacity))
    races: dict[str, list[DevshardDispatch]] = defaultdict(list)
    for d in dispatches:
        if d.race_root:
            races[d.race_root].append(d)
        else:
            assert d.race == 0 and not d.no_winner
    assert metrics["devshard_race_attempts"] > 20
    assert len(races) == metrics["devshard_races"]
    for root, attempts in races.items():
        first = attempts[0]
        assert first.race == 0 and first.no_winner and first.request_id == root
        assert [a.race for a in attempts] == list(range(len(attempts)))
        assert all(a.no_winner for a in attempts[:-1])  # only a no-winner attempt escalates
        assert len({a.address for a in attempts}) == len(attempts) <= GROUP  # tried: excluded
        assert {a.request for a in attempts} == {first.request}
        assert all(a.request_id == f"{root}/w{a.race}" for a in attempts[1:])
    assert sum(metrics["devshard_race_winners"].values()) == metrics["devshard_races"]
    assert metrics["devshard_race_winners"]["eligible"] > 0
    # every nonce dispatched is one MsgStartInference of the chain, race attempts included
    assert metrics["devshard_dispatches"] == len(dispatches)
    assert metrics["devshard_race_attempts"] == sum(1 for d in dispatches if d.race)
    assert metrics["selections"] == len(dispatches)


def test_a_race_attempts_decline_is_not_retried_nor_unserved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With capacity and pushback: the request's own attempts alone decide re-tries and
    ``unserved_requests`` (a re-try is the next attempt number, never a race attempt)."""
    metrics, dispatches = _run(monkeypatch, DEVSHARD_LIMITER, _scenario(capacity=2))
    own = [d for d in dispatches if d.race == 0]
    assert metrics["declines"] > 0
    retried = {(d.request, d.attempt) for d in own if d.attempt > 0}
    assert all((r, a - 1) in {(d.request, d.attempt) for d in own} for r, a in retried)
    assert metrics["unserved_requests"] <= metrics["declines"]


def test_no_race_without_the_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics, dispatches = _run(monkeypatch, "none", _scenario())
    assert metrics["devshard_races"] == metrics["devshard_race_attempts"] == 0
    assert not any(d.race or d.race_root or d.no_winner for d in dispatches)


def test_races_are_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    one = _run(monkeypatch, DEVSHARD_LIMITER, _scenario(capacity=2))
    monkeypatch.undo()
    two = _run(monkeypatch, DEVSHARD_LIMITER, _scenario(capacity=2))
    assert one == two
