"""Governance: MsgUpdateParams is authorized, fully validated, and effective from the next block."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from core_helpers import MODEL, Driver

import keepersim.types.params as params_module
from keepersim.chain import Chain
from keepersim.types.errors import BlockError, InvalidParamsError, UnauthorizedError
from keepersim.types.events import HealthTransition, ParamsUpdated
from keepersim.types.messages import Params
from keepersim.types.params import GOV_AUTHORITY, compute_decimal, validate_params
from keepersim.types.pb.inference.inference.tx_pb2 import MsgStartInference, MsgUpdateParams
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ConsecutiveOverride


def setter(path: str, value: Any) -> Callable[[Params], None]:
    *parents, name = path.split(".")

    def mutate(p: Any) -> None:
        for part in parents:
            p = getattr(p, part)
        if hasattr(getattr(p, name), "CopyFrom"):
            getattr(p, name).CopyFrom(value)
        else:
            setattr(p, name, value)

    return mutate


def overrides(*items: ConsecutiveOverride) -> Callable[[Params], None]:
    def mutate(p: Params) -> None:
        p.health_params.consecutive.overrides.extend(items)

    return mutate


C = "circuit_breaker_params."
HC = "health_params.consecutive."
TA = "health_params.trin_additive."
TM = "health_params.trin_multiplicative."
W = "health_params.windowed."
OVR = HC + "overrides[0]."

# (expected InvalidParamsError.field, mutation): one row per validation rule of types/params.py
ROWS: list[tuple[str, Callable[[Params], None]]] = [
    ("expiration_blocks", setter("expiration_blocks", 0)),
    ("epoch_params.epoch_length", setter("epoch_params.epoch_length", 0)),
    ("epoch_params.poc_stage_duration", setter("epoch_params.poc_stage_duration", -1)),
    ("epoch_params.poc_validation_delay", setter("epoch_params.poc_validation_delay", -1)),
    ("epoch_params.poc_validation_duration", setter("epoch_params.poc_validation_duration", -1)),
    ("epoch_params.set_new_validators_delay", setter("epoch_params.set_new_validators_delay", -1)),
    ("epoch_params", setter("epoch_params.poc_stage_duration", 40)),  # PoC as long as the epoch
    ("reputation_params.epochs_to_max", setter("reputation_params.epochs_to_max", 0)),
    (
        "reputation_params.miss_percentage_cutoff",
        setter("reputation_params.miss_percentage_cutoff", compute_decimal("1.01")),
    ),
    (
        "reputation_params.miss_percentage_cutoff",
        setter("reputation_params.miss_percentage_cutoff", compute_decimal("-0.01")),
    ),
    (
        "reputation_params.miss_requests_penalty",
        setter("reputation_params.miss_requests_penalty", compute_decimal("-1")),
    ),
    ("sprt_params.p0", setter("sprt_params.p0", compute_decimal("0"))),
    ("sprt_params.p0", setter("sprt_params.p0", compute_decimal("1"))),
    ("sprt_params.p1", setter("sprt_params.p1", compute_decimal("1"))),
    ("sprt_params.p1", setter("sprt_params.p1", compute_decimal("0.05"))),  # p1 < p0
    ("sprt_params.threshold", setter("sprt_params.threshold", compute_decimal("0"))),
    (C + "miss_threshold_pct", setter(C + "miss_threshold_pct", 0)),
    (C + "miss_threshold_pct", setter(C + "miss_threshold_pct", 101)),
    (C + "min_samples", setter(C + "min_samples", 0)),
    (C + "initial_cooldown_blocks", setter(C + "initial_cooldown_blocks", 0)),
    (C + "max_cooldown_blocks", setter(C + "max_cooldown_blocks", 49)),
    ("health_params.policy", setter("health_params.policy", "bogus")),
    (HC + "failure_threshold", setter(HC + "failure_threshold", 0)),
    (HC + "success_threshold", setter(HC + "success_threshold", 0)),
    (HC + "timeout_blocks", setter(HC + "timeout_blocks", 0)),
    (OVR + "address", overrides(ConsecutiveOverride(address=""))),
    (
        HC + "overrides[1].address",
        overrides(ConsecutiveOverride(address="a"), ConsecutiveOverride(address="a")),
    ),
    (OVR + "failure_threshold", overrides(ConsecutiveOverride(address="a", failure_threshold=0))),
    (OVR + "success_threshold", overrides(ConsecutiveOverride(address="a", success_threshold=0))),
    (OVR + "timeout_blocks", overrides(ConsecutiveOverride(address="a", timeout_blocks=0))),
    (
        OVR + "pushback_outcomes",
        overrides(ConsecutiveOverride(address="a", pushback_outcomes=["bogus"])),
    ),
    (
        OVR + "pushback_outcomes",
        overrides(ConsecutiveOverride(address="a", pushback_outcomes=["miss", "miss"])),
    ),
    (TA + "max_score", setter(TA + "max_score", 0)),
    (TA + "initial_score", setter(TA + "initial_score", 0)),
    (TA + "initial_score", setter(TA + "initial_score", 401)),
    (TA + "window_blocks", setter(TA + "window_blocks", 0)),
    (TA + "success_delta", setter(TA + "success_delta", -1)),
    (TA + "miss_delta", setter(TA + "miss_delta", 1)),
    (TA + "pushback_delta", setter(TA + "pushback_delta", 1)),
    (TM + "history", setter(TM + "history", 0)),
    (TM + "history", setter(TM + "history", 33)),
    (TM + "recency_blocks", setter(TM + "recency_blocks", 0)),
    (TM + "max_recency_doublings", setter(TM + "max_recency_doublings", 17)),
    (W + "window", setter(W + "window", 3)),
    (W + "window", setter(W + "window", 65)),
    (W + "baseline_miss_pct", setter(W + "baseline_miss_pct", 0)),
    (W + "baseline_miss_pct", setter(W + "baseline_miss_pct", 100)),
    (W + "confidence_z_milli", setter(W + "confidence_z_milli", 499)),
    (W + "confidence_z_milli", setter(W + "confidence_z_milli", 10001)),
    (W + "min_samples", setter(W + "min_samples", 0)),
    (W + "min_samples", setter(W + "min_samples", 33)),  # > window (32)
    (W + "initial_cooldown_blocks", setter(W + "initial_cooldown_blocks", 0)),
    (W + "max_cooldown_blocks", setter(W + "max_cooldown_blocks", 99)),
    (W + "jitter_pct", setter(W + "jitter_pct", 51)),
    (W + "max_probes", setter(W + "max_probes", 0)),
    (W + "ramp_blocks", setter(W + "ramp_blocks", -1)),
    (W + "max_excluded_weight_pct", setter(W + "max_excluded_weight_pct", 0)),
    (W + "max_excluded_weight_pct", setter(W + "max_excluded_weight_pct", 101)),
    (W + "panic_healthy_weight_pct", setter(W + "panic_healthy_weight_pct", 101)),
    (W + "overdue_min_blocks", setter(W + "overdue_min_blocks", 0)),
    (W + "overdue_factor", setter(W + "overdue_factor", 0)),
    (W + "ramp_start_pct", setter(W + "ramp_start_pct", 0)),
    (W + "ramp_start_pct", setter(W + "ramp_start_pct", 101)),
    (W + "saturation_pct", setter(W + "saturation_pct", 101)),
]


def make_invalid(chain: Chain, mutate: Callable[[Params], None]) -> Params:
    params = chain.get_params()
    mutate(params)
    return params


@pytest.mark.parametrize(
    ("field", "mutate"), ROWS, ids=[f"{i:02d}-{r[0]}" for i, r in enumerate(ROWS)]
)
def test_invalid_field_rejected(chain: Chain, field: str, mutate: Callable[[Params], None]) -> None:
    before, app_hash, height = chain.get_params(), chain.app_hash, chain.height
    msg = MsgUpdateParams(authority=GOV_AUTHORITY, params=make_invalid(chain, mutate))
    with pytest.raises(BlockError) as exc_info:
        chain.deliver_block([msg], strict=True)
    cause = exc_info.value.__cause__
    assert isinstance(cause, InvalidParamsError)
    assert cause.field == field
    assert f"invalid params: {field}=" in str(exc_info.value)
    assert (chain.height, chain.app_hash) == (height, app_hash)
    result = chain.deliver_block([msg])
    assert result.tx_results[0].error.startswith(f"InvalidParamsError: invalid params: {field}=")
    assert result.events == ()
    assert chain.get_params() == before
    with chain.read() as k:
        assert k.get_pending_params() is None


def _rule_call_lines() -> set[int]:
    tree = ast.parse(inspect.getsource(params_module))
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_require"
    }


def _raising_line(mutate: Callable[[Params], None], chain: Chain) -> int:
    with pytest.raises(InvalidParamsError) as exc_info:
        validate_params(make_invalid(chain, mutate))
    frames = [
        f
        for f in inspect.getinnerframes(exc_info.tb, context=0)
        if f.filename == params_module.__file__
    ]
    return frames[-2].lineno  # the _require(...) call inside a validate_* function


def test_table_has_a_row_for_every_rule(chain: Chain) -> None:
    """Adding a rule to types/params.py without a row here fails this test."""
    covered = {_raising_line(mutate, chain) for _, mutate in ROWS}
    rules = _rule_call_lines()
    assert rules - covered == set(), "rules without a row (types/params.py line numbers)"
    assert covered <= rules


def test_defaults_and_mainnet_are_valid() -> None:
    from keepersim.types.params import get_default_params, get_mainnet_params

    validate_params(get_default_params())
    validate_params(get_mainnet_params())


def test_wrong_authority_unauthorized(chain: Chain) -> None:
    params = chain.get_params()
    params.expiration_blocks = 7
    msg = MsgUpdateParams(authority="gonka1mallory", params=params)
    with pytest.raises(BlockError) as exc_info:
        chain.deliver_block([msg], strict=True)
    assert isinstance(exc_info.value.__cause__, UnauthorizedError)
    assert (
        f"MsgUpdateParams.authority 'gonka1mallory' is not the governance account '{GOV_AUTHORITY}'"
        in str(exc_info.value)
    )
    result = chain.deliver_block([msg])
    assert result.tx_results[0].error.startswith("UnauthorizedError: ")
    chain.deliver_block([])
    assert chain.get_params().expiration_blocks == 20


def test_valid_update_takes_effect_from_the_next_block(chain: Chain) -> None:
    params = chain.get_params()
    params.expiration_blocks = 5
    r1 = chain.deliver_block(
        [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params),
            MsgStartInference(inference_id="a", assigned_to="p0", model=MODEL),
        ]
    )
    assert not r1.get_failed()
    assert ParamsUpdated(1, 2, GOV_AUTHORITY) in r1.events
    assert chain.get_params().expiration_blocks == 20  # not in the block that carried it
    with chain.read() as k:
        assert k.get_pending_params() == params
    r2 = chain.deliver_block([MsgStartInference(inference_id="b", assigned_to="p0", model=MODEL)])
    assert not r2.get_failed()
    assert chain.get_params() == params
    with chain.read() as k:
        assert k.get_pending_params() is None
        assert sorted(k.iterate_timeouts()) == [(2 + 5, "b"), (1 + 20, "a")]


def test_breaker_params_switch_between_blocks(driver: Driver) -> None:
    """A stricter breaker voted in block 8 still judges block 8 by the old rule; from block 9 the
    new rule applies, and to every participant at once (no new outcome needed)."""
    d = driver
    d.success("p0", 7, 3)
    d.miss("p0", 8, 4)  # 4/7 > 25%
    d.success("p1", 7, 9)
    d.miss("p1", 8, 1)  # 1/10: fine at 25%, too many at 5%
    params = d.chain.get_params()
    params.circuit_breaker_params.min_samples = 100
    params.circuit_breaker_params.miss_threshold_pct = 5
    d.add(8, MsgUpdateParams(authority=GOV_AUTHORITY, params=params))
    d.run_to(8)
    assert [(t.address, t.to_state) for t in d.transitions()] == [("p0", "excluded")]
    d.run_to(9)
    assert d.transitions_at(9) == []  # min_samples 100 is not reached by anyone
    params.circuit_breaker_params.min_samples = 4
    d.add(10, MsgUpdateParams(authority=GOV_AUTHORITY, params=params))
    d.run_to(10)
    assert d.transitions_at(10) == []
    d.run_to(11)
    assert d.transitions_at(11) == [
        HealthTransition(11, "gonka", "p1", "healthy", "excluded", "miss rate 1/10")
    ]
