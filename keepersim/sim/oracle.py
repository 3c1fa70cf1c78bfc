"""The ``oracle`` baseline: a health policy that knows the scenario's true miss probabilities.

It admits exactly the participants whose true miss probability is at most
:data:`HEALTHY_MISS_THRESHOLD` (0.05) and keeps everyone else out. It has no state, no exclusion
cap and no panic; the chain's fallback (everyone) applies only when every candidate is degraded.

Which height it looks at: the chain computes a selection table from the state committed at height
``H``, and that table serves the requests started in block ``H + 1`` (the simulator assigns the
requests of block ``h`` before delivering it). So the oracle's verdict at query height ``H`` is
about ``p(H + 1)``: the miss probability of the requests the table will actually assign.

It is not a chain policy (governance can never select it): a run hands its factory to the chain
as a harness hook, and the params name a real chain policy (``none``, :func:`get_chain_policy_name`)::

    Chain.open(..., policy_override=make_oracle_factory(scenario))

:func:`get_policy_override` and :func:`get_chain_policy_name` say this for any run policy.
"""

from __future__ import annotations

import bisect
from typing import ClassVar

from keepersim.keeper.policies import PolicyFactory
from keepersim.keeper.policies.base import NEVER, Health, HealthPolicy, PolicyReader
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.policies import NO_POLICY, ORACLE, POLICY_INFO

__all__ = [
    "HEALTHY_MISS_THRESHOLD",
    "OraclePolicy",
    "get_chain_policy_name",
    "get_policy_override",
    "is_truly_healthy",
    "make_oracle_factory",
]

#: A participant whose true miss probability is at most this counts as healthy (spec value).
HEALTHY_MISS_THRESHOLD = 0.05


def is_truly_healthy(spec: ParticipantSpec, height: int) -> bool:
    """True iff the participant's true miss probability at ``height`` is <= 0.05."""
    return spec.get_miss_probability(height) <= HEALTHY_MISS_THRESHOLD


class OraclePolicy(HealthPolicy):
    """Admits exactly the truly healthy participants (see the module docstring)."""

    name: ClassVar[str] = ORACLE
    prefix: ClassVar[bytes] = b"\x7f"  # never written: the oracle keeps no state

    def __init__(self, scenario: Scenario) -> None:
        self._specs = {p.address: p for p in scenario.participants}
        self._breaks = {p.address: tuple(b for b, _ in p.miss) for p in scenario.participants}

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        spec = self._specs.get(address)
        if spec is None:  # not in the scenario: nothing known, admit
            return Health(True, state="unknown")
        target = height + 1
        p = spec.get_miss_probability(target)
        # The verdict can change only when the next break point is reached: the table at query
        # height b - 1 serves height b.
        breaks = self._breaks[address]
        i = bisect.bisect_right(breaks, target)
        valid_until = breaks[i] - 2 if i < len(breaks) else NEVER
        valid_until = max(valid_until, height)
        if p <= HEALTHY_MISS_THRESHOLD:
            return Health(True, valid_until=valid_until, state="healthy")
        return Health(
            False,
            severity=int(p * 1_000_000),
            valid_until=valid_until,
            state="degraded",
        )

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        spec = self._specs.get(address)
        health = self.get_health(reader, address, height)
        return {
            "state": health.state,
            "admitted": health.admitted,
            "true_miss_probability": None
            if spec is None
            else spec.get_miss_probability(height + 1),
        }


def make_oracle_factory(scenario: Scenario) -> PolicyFactory:
    """A zero-argument factory for ``Chain.open(policy_override=...)``."""

    def factory() -> HealthPolicy:
        return OraclePolicy(scenario)

    return factory


def get_chain_policy_name(policy: str) -> str:
    """The policy a run's params name: the run's own, or the stand-in (``none``) of a policy
    the registry says is not on chain: the oracle, or ``devshard-limiter`` (the gateway's
    limiter, off-chain: :mod:`keepersim.sim.devshard_path`)."""
    info = POLICY_INFO.get(policy)
    if info is not None and not info.on_chain:
        return NO_POLICY
    return policy


def get_policy_override(policy: str, scenario: Scenario) -> PolicyFactory | None:
    """The harness policy a run's chain runs instead of its params' (the oracle), if any."""
    return make_oracle_factory(scenario) if policy == ORACLE else None
