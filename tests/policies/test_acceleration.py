"""The acceleration layer (keepersim/keeper/acceleration) decides nothing: every policy, run with
its speed-ups on and with all of them off (ChainPolicyStore.hints_enabled: no touched set
handed to gonka's pass 2, which then scans every participant as upstream does; no verdict handed
to the chain, only told that it may have moved; no memo handed between blocks), gives the same app hashes and transitions, and the chain's selection table equals a
fresh one at every height either way."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from policy_helpers import MODEL, make_policy_genesis
from test_properties import (
    ADDRESSES,
    POLICIES,
    Step,
    make_policy_params,
    open_chain,
    run,
    steps_strategy,
    weights_strategy,
)

from keepersim.chain import BlockResult, Chain
from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.acceleration.verdict_memo import SelectionIndex
from keepersim.keeper.policies import gonka_index
from keepersim.keeper.policies.base import ParamsView
from keepersim.keeper.selection import SelectionTable
from keepersim.types.errors import KeepersimError
from keepersim.types.params import get_cb_settings
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


def get_table_or_error(chain: Chain) -> tuple[Any, ...]:
    try:
        return dataclasses.astuple(chain.get_selection_table(MODEL))
    except KeepersimError as exc:
        return ("error", type(exc).__name__, str(exc))


@pytest.mark.parametrize("shadow", [False, True], ids=["gated", "shadow"])
@pytest.mark.parametrize("name", POLICIES)
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=steps_strategy, weights=weights_strategy)
def test_the_memos_own_table_equals_one_with_the_memo_dropped(
    name: str, shadow: bool, steps: list[Step], weights: list[int], monkeypatch: Any
) -> None:
    """SelectionIndex.get_memo_table (the memo alone, without the store or a policy: a block
    that moved nothing, or whose moved verdicts were all handed over with its commit) gives, at
    every height, field for field the table a chain with no memo computes over the same
    committed state; and it does answer at some heights (the steps' waits are empty blocks)."""
    alone: list[int] = []
    get_memo = SelectionIndex.get_memo_table

    def spy(index: SelectionIndex, model: str, height: int) -> SelectionTable | None:
        table = get_memo(index, model, height)
        if table is not None:
            alone.append(height)
        return table

    monkeypatch.setattr(SelectionIndex, "get_memo_table", spy)
    params = make_policy_params(name)
    params.extension_params.health_params.shadow = shadow
    genesis = make_policy_genesis(params, dict(zip(ADDRESSES, weights, strict=True)))
    with Chain.open(memory=True, genesis=genesis) as chain:
        deliver = chain.deliver_block

        def deliver_and_check(*args: Any, **kwargs: Any) -> BlockResult:
            result = deliver(*args, **kwargs)
            memo = get_table_or_error(chain)
            assert memo == get_table_or_error(chain), chain.height  # asked twice: the same
            dropped = Chain(chain._store.backend)  # noqa: SLF001 - the same committed state
            assert memo == get_table_or_error(dropped), (name, chain.height)
            return result

        chain.deliver_block = deliver_and_check  # type: ignore[method-assign]
        run(chain, steps, check=False)
    if any(step.wait for step in steps):
        assert alone
    assert len(alone) == len(set(alone))


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


@pytest.mark.parametrize("shadow", [False, True], ids=["gated", "shadow"])
def test_verdicts_handed_back_unchanged_are_answered_by_a_restamp(
    shadow: bool, monkeypatch: Any
) -> None:
    """gonka hands over the verdict of every participant its end block judged, most often the
    very verdict the memo holds (ADMITTED): get_memo_table then answers with a restamp, without
    process_memo, and the table equals at every height one a chain with no memo computes."""
    restamped: list[int] = []
    get_memo = SelectionIndex.get_memo_table
    process = SelectionIndex.process_memo

    def spy(index: SelectionIndex, model: str, height: int) -> SelectionTable | None:
        dirty = bool(index.dirty.get(model))
        calls_before = len(processed)
        table = get_memo(index, model, height)
        if table is not None and dirty and len(processed) == calls_before:
            restamped.append(height)
        return table

    processed: list[int] = []

    def spy_process(index: SelectionIndex, model: str, *args: Any) -> SelectionTable:
        processed.append(1)
        return process(index, model, *args)

    monkeypatch.setattr(SelectionIndex, "get_memo_table", spy)
    monkeypatch.setattr(SelectionIndex, "process_memo", spy_process)
    params = make_policy_params("gonka")
    params.extension_params.health_params.shadow = shadow
    genesis = make_policy_genesis(params, dict(zip(ADDRESSES, [1 << 17] * 5, strict=True)))
    steps = [Step(starts=(0, 1, 2), finishes=(), declines=(), wait=0) for _ in range(4)]
    steps += [Step(starts=(0, 1), finishes=(0, 1, 2), declines=(), wait=0) for _ in range(12)]
    with Chain.open(memory=True, genesis=genesis) as chain:
        deliver = chain.deliver_block

        def deliver_and_check(*args: Any, **kwargs: Any) -> BlockResult:
            result = deliver(*args, **kwargs)
            memo = get_table_or_error(chain)
            dropped = Chain(chain._store.backend)  # noqa: SLF001 - the same committed state
            assert memo == get_table_or_error(dropped), chain.height
            return result

        chain.deliver_block = deliver_and_check  # type: ignore[method-assign]
        run(chain, steps, check=False)
    assert restamped


def test_gonka_settings_derive_once_per_params_object() -> None:
    """gonka_index.get_cb_settings equals types.params.get_cb_settings for each params object,
    and a new object (new params, or the same values) is derived afresh."""
    first = ExtensionParams(cb_min_samples=9, cb_miss_threshold_pct=0)
    assert gonka_index.get_cb_settings(first) == get_cb_settings(first)
    assert gonka_index.get_cb_settings(first) is gonka_index.get_cb_settings(first)
    second = ExtensionParams()
    second.CopyFrom(first)
    second.cb_max_cooldown_blocks = 70
    assert gonka_index.get_cb_settings(second) == get_cb_settings(second)
    assert gonka_index.get_cb_settings(second).max_cooldown_blocks == 70
    assert gonka_index.get_cb_settings(first) == get_cb_settings(first)
    assert gonka_index.get_cb_settings(first).max_cooldown_blocks == 500
