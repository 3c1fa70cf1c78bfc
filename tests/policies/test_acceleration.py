"""The acceleration layer (keepersim/keeper/acceleration) decides nothing: every policy, run with
its speed-ups on and with all of them off (ChainPolicyStore.hints_enabled: no touched set
handed to gonka's pass 2, which then scans every participant as upstream does; no verdict handed
to the chain, only told that it may have moved; no memo handed between blocks), gives the same app hashes and transitions, and the chain's selection table equals a
fresh one at every height either way."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from test_properties import (
    POLICIES,
    Step,
    open_chain,
    run,
    steps_strategy,
    weights_strategy,
)

from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.policies.base import ParamsView
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams


def run_both(name: str, steps: list[Step], weights: list[int]) -> None:
    runs = []
    try:
        for enabled in (True, False):
            ChainPolicyStore.hints_enabled = enabled
            with open_chain(name, weights, None) as chain:
                runs.append(run(chain, steps, check=True))
                assert chain.verify_app_hash()
    finally:
        ChainPolicyStore.hints_enabled = True
    assert runs[0] == runs[1]


BUSY = [Step(starts=(0, 0, 1), finishes=(), declines=(), wait=2) for _ in range(12)] + [
    Step(starts=(2,), finishes=(0, 1), declines=(0,), wait=1) for _ in range(12)
]


@pytest.mark.parametrize("name", POLICIES)
def test_a_busy_sequence_is_the_same_without_the_speed_ups(name: str) -> None:
    run_both(name, BUSY, [1 << 17] * 5)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy, weights=weights_strategy)
def test_random_sequences_are_the_same_without_the_speed_ups(
    name: str, steps: list[Step], weights: list[int]
) -> None:
    run_both(name, steps, weights)


def test_params_view_derives_once_per_params_object_and_again_for_new_ones() -> None:
    """The chain replaces its params on a change and never edits them: one derivation per
    object, the same as deriving every time; a new object (new params) is derived afresh."""
    calls: list[int] = []

    def derive(params: ExtensionParams) -> int:
        calls.append(1)
        return params.health_params.trin_additive.window_blocks

    view = ParamsView(derive)
    first = ExtensionParams()
    first.health_params.trin_additive.window_blocks = 30
    assert view.get(first) == view.get(first) == derive(first)
    second = ExtensionParams()
    second.CopyFrom(first)
    second.health_params.trin_additive.window_blocks = 40
    assert view.get(second) == 40 == derive(second)
    assert len(calls) == 4  # two derivations by the view, two by hand
