"""The Chain's selection memo never changes an answer: a fresh Chain over the same committed
state (an empty memo) computes the same table at every height, for every policy."""

from __future__ import annotations

import dataclasses

import pytest

from keepersim.chain import Chain
from keepersim.keeper.policies import BUILTIN_POLICIES
from keepersim.sim.driver import run_scenario
from keepersim.sim.generate import generate_scenario
from keepersim.store.kv import KVBackend


@pytest.mark.parametrize("policy", sorted(BUILTIN_POLICIES))
def test_memoized_table_equals_fresh_table(policy: str) -> None:
    scenario = generate_scenario(
        "memo",
        seed=4,
        participants=12,
        blocks=700,
        epoch_length=300,
        arrivals_per_block=3.0,
        degraded_share=0.3,
        degraded_miss=(0.4, 0.7),
    )
    scenario = dataclasses.replace(scenario, expiration_blocks=20)
    checked = []

    def compare(chain: Chain, height: int) -> None:
        backend: KVBackend = chain._store.backend  # noqa: SLF001 - the same committed state
        fresh = Chain(backend).get_selection_table("default")
        memo = chain.get_selection_table("default")
        assert dataclasses.astuple(memo) == dataclasses.astuple(fresh), (policy, height)
        checked.append(height)

    run_scenario(scenario, policy, store="memory", on_block=compare)
    assert len(checked) == 700
