"""The Chain's selection memo never changes an answer: a fresh Chain over the same committed
state (an empty memo) and the reference pipeline (compute_selection_table over verdicts computed
from scratch) give the same table at every height, for every policy, gated and in shadow."""

from __future__ import annotations

import dataclasses

import pytest

from keepersim.chain import Chain
from keepersim.keeper.policies import BUILTIN_POLICIES
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.selection import (
    SelectionTable,
    compute_selection_table,
    get_candidates,
    get_pipeline_rules,
)
from keepersim.sim.driver import run_scenario
from keepersim.sim.generate import generate_scenario
from keepersim.store.kv import KVBackend


def compute_reference_table(chain: Chain, model: str) -> SelectionTable:
    """The table by the reference pipeline alone: no memo, no incremental sums."""
    with chain.read() as k:
        params = k.get_params()
        policy = chain.get_policy_object(params.health_params.policy)
        height = chain.height
        candidates = get_candidates(k, model, height)
        reader = PolicyReader(k, policy)
        healths = [policy.get_health(reader, c.address, height) for c in candidates]
        return compute_selection_table(
            candidates,
            healths,
            height=height,
            model=model,
            rules=get_pipeline_rules(policy, params),
        )


@pytest.mark.parametrize("shadow", [False, True], ids=["gated", "shadow"])
@pytest.mark.parametrize("policy", sorted(BUILTIN_POLICIES))
def test_memoized_table_equals_fresh_table(policy: str, shadow: bool) -> None:
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
        reference = compute_reference_table(chain, "default")
        assert dataclasses.astuple(memo) == dataclasses.astuple(fresh), (policy, height)
        assert dataclasses.astuple(memo) == dataclasses.astuple(reference), (policy, height)
        checked.append(height)

    run_scenario(scenario, policy, store="memory", shadow=shadow, on_block=compare)
    assert len(checked) == 700
