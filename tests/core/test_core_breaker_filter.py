"""The breaker's read-only health filter (GonkaBreaker.get_health) and its use in selection.

States are set up through genesis (participant epoch stats and raw breaker entries), the way the
fork's tests use set/get, and read back through PolicyReader over ``chain.read()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from core_helpers import GONKA_STATE, MODEL

from keepersim.chain import Chain
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.types.messages import CurrentEpochStats, Participant
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.health_pb2 import (
    EXCLUDED,
    PROBE,
    CircuitBreakerEntry,
    CircuitBreakerState,
    PolicyStateEntry,
)
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

H = 100  # genesis height


def entry(
    address: str, state: CircuitBreakerState.ValueType, excluded_at: int = 0, cooldown: int = 0
) -> PolicyStateEntry:
    value = CircuitBreakerEntry(
        address=address, state=state, excluded_at_block=excluded_at, cooldown_blocks=cooldown
    )
    return PolicyStateEntry(key=GONKA_STATE + address.encode(), value=value.SerializeToString())


@pytest.fixture
def make_filter_chain(
    make_chain: Callable[..., Chain],
    make_genesis: Callable[..., Genesis],
    make_participant: Callable[..., tuple[Participant, ParticipantNodes]],
) -> Callable[..., Chain]:
    """``make(stats={addr: (ok, missed)}, entries=[...], n=4)`` at genesis height 100."""

    def make(
        stats: dict[str, tuple[int, int]] | None = None,
        entries: list[PolicyStateEntry] | None = None,
        n: int = 4,
    ) -> Chain:
        participants = []
        for i in range(n):
            p, nodes = make_participant(f"p{i}")
            ok, missed = (stats or {}).get(p.address, (0, 0))
            p.current_epoch_stats.CopyFrom(
                CurrentEpochStats(inference_count=ok, missed_requests=missed)
            )
            participants.append((p, nodes))
        genesis = make_genesis(participants=participants, height=H)
        genesis.keepersim.policy_state.extend(entries or [])
        return make_chain(genesis)

    return make


def get_health(chain: Chain, address: str, height: int) -> Any:
    policy = GonkaBreaker()
    with chain.read() as k:
        return policy.get_health(PolicyReader(k, policy), address, height)


@pytest.mark.parametrize(
    ("ok", "missed", "admitted"),
    [(3, 4, False), (9, 1, True), (1, 2, True), (1, 3, False), (0, 0, True), (3, 1, True)],
    ids=["3+4", "9+1", "1+2-below-min-samples", "1+3", "no-samples", "3+1-exactly-25pct"],
)
def test_filter_rule_on_healthy(
    make_filter_chain: Any, ok: int, missed: int, admitted: bool
) -> None:
    chain = make_filter_chain({"p0": (ok, missed)})
    health = get_health(chain, "p0", H)
    assert (health.admitted, health.state) == (admitted, "healthy")
    table = chain.get_selection_table(MODEL)
    assert ("p0" in table.addresses) is admitted
    assert ("p0" in table.excluded) is not admitted
    assert not table.fallback


def test_filter_excludes_above_25pct_and_includes_healthy(make_filter_chain: Any) -> None:
    chain = make_filter_chain({"p0": (3, 4), "p1": (10, 3), "p2": (10, 2)})
    table = chain.get_selection_table(MODEL)
    # 4/7 and 3/13 (23%) vs 2/12 (17%): only p0 is above the threshold.
    assert table.excluded == ("p0",)
    assert table.addresses == ("p1", "p2", "p3")
    assert table.total == 3000  # by weight alone (reputation plays no part by default)
    for i in range(200):
        assert chain.get_random_executor(MODEL, f"r{i}").address != "p0"


def test_in_cooldown_excluded_expired_cooldown_included_state_unchanged(
    make_filter_chain: Any,
) -> None:
    chain = make_filter_chain(entries=[entry("p0", EXCLUDED, excluded_at=90, cooldown=50)])
    raw_before = chain.get_policy_state("p0")
    assert raw_before["state"] == "excluded" and raw_before["cooldown_end"] == 140
    assert get_health(chain, "p0", H).admitted is False
    assert get_health(chain, "p0", 139).admitted is False
    later = get_health(chain, "p0", 140)
    assert (later.admitted, later.state) == (True, "excluded")
    assert get_health(chain, "p0", 10_000).admitted is True
    # The filter is read-only: the stored entry is still EXCLUDED with the same cooldown.
    with chain.read() as k:
        raw = k.store.get(GONKA_STATE + b"p0")
    assert raw is not None
    assert CircuitBreakerEntry.FromString(raw) == CircuitBreakerEntry(
        address="p0", state=EXCLUDED, excluded_at_block=90, cooldown_blocks=50
    )
    assert chain.get_policy_state("p0") == raw_before
    assert "p0" not in chain.get_selection_table(MODEL).addresses


def test_probe_included_even_with_bad_stats(make_filter_chain: Any) -> None:
    chain = make_filter_chain({"p0": (0, 9)}, entries=[entry("p0", PROBE, 40, 50)])
    health = get_health(chain, "p0", H)
    assert (health.admitted, health.state) == (True, "probe")
    assert "p0" in chain.get_selection_table(MODEL).addresses


def test_unknown_participant_passes(make_filter_chain: Any) -> None:
    chain = make_filter_chain()
    assert get_health(chain, "stranger", H).admitted is True


def test_all_degraded_fallback_returns_full_list(make_filter_chain: Any) -> None:
    chain = make_filter_chain(
        {"p0": (0, 5), "p1": (1, 4), "p2": (2, 2)},
        entries=[entry("p3", EXCLUDED, excluded_at=95, cooldown=50)],
    )
    assert all(not get_health(chain, f"p{i}", H).admitted for i in range(4))
    table = chain.get_selection_table(MODEL)
    assert table.fallback is True
    assert table.addresses == ("p0", "p1", "p2", "p3")
    assert table.excluded == ()
    selection = chain.get_random_executor(MODEL, "req")
    assert selection.fallback is True and selection.height == H
    seen = {chain.get_random_executor(MODEL, f"r{i}").address for i in range(200)}
    assert seen == {"p0", "p1", "p2", "p3"}


def test_one_healthy_left_is_no_fallback(make_filter_chain: Any) -> None:
    chain = make_filter_chain({"p0": (0, 5), "p1": (1, 4), "p2": (2, 2)})
    table = chain.get_selection_table(MODEL)
    assert table.fallback is False and table.addresses == ("p3",)
    assert chain.get_random_executor(MODEL, "req").address == "p3"
