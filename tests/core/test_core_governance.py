"""Governance: MsgUpdateParams (the chain's params) and MsgUpdateExtensionParams (keepersim's) are
authorized, fully validated together, and effective from the next block."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from core_helpers import MODEL, Driver
from google.protobuf.message import Message

import keepersim.types.params as params_module
from keepersim.chain import Chain
from keepersim.types.chain_decimal import compute_chain_decimal
from keepersim.types.errors import BlockError, InvalidParamsError, UnauthorizedError
from keepersim.types.events import HealthTransition, ParamsUpdated
from keepersim.types.messages import MsgStartInference, MsgUpdateParams
from keepersim.types.params import (
    CB_DEFAULTS,
    GOV_AUTHORITY,
    CbSettings,
    get_cb_settings,
    validate_params,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import (
    ConsecutiveOverride,
    ExtensionParams,
    ModuleParams,
)
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams


def setter(path: str, value: Any) -> Callable[[ModuleParams], None]:
    *parents, name = path.split(".")

    def mutate(p: Any) -> None:
        for part in parents:
            p = getattr(p, part)
        if hasattr(getattr(p, name), "CopyFrom"):
            getattr(p, name).CopyFrom(value)
        else:
            setattr(p, name, value)

    return mutate


def clearer(path: str) -> Callable[[ModuleParams], None]:
    *parents, name = path.split(".")

    def mutate(p: Any) -> None:
        for part in parents:
            p = getattr(p, part)
        p.ClearField(name)

    return mutate


def overrides(*items: ConsecutiveOverride) -> Callable[[ModuleParams], None]:
    def mutate(p: ModuleParams) -> None:
        p.extension_params.health_params.consecutive.overrides.extend(items)

    return mutate


def dec(value: str) -> Any:
    return compute_chain_decimal(value)


V = "params.validation_params."
E = "params.epoch_params."
X = "extension_params."
HC = X + "health_params.consecutive."
TA = X + "health_params.trin_additive."
TM = X + "health_params.trin_multiplicative."
W = X + "health_params.windowed."
OVR = HC + "overrides[0]."

# (expected InvalidParamsError.field, mutation of ModuleParams): one row per validation rule of
# types/params.py. Rows under "params." go in a MsgUpdateParams, rows under "extension_params."
# in a MsgUpdateExtensionParams.
ROWS: list[tuple[str, Callable[[ModuleParams], None]]] = [
    (V + "expiration_blocks", setter(V + "expiration_blocks", 0)),
    (V + "epochs_to_max", setter(V + "epochs_to_max", 0)),
    (V + "miss_percentage_cutoff", setter(V + "miss_percentage_cutoff", dec("1.01"))),
    (V + "miss_percentage_cutoff", setter(V + "miss_percentage_cutoff", dec("-0.01"))),
    (V + "miss_requests_penalty", setter(V + "miss_requests_penalty", dec("-1"))),
    (V + "downtime_good_percentage", setter(V + "downtime_good_percentage", dec("0"))),
    (V + "downtime_good_percentage", setter(V + "downtime_good_percentage", dec("1"))),
    (V + "downtime_bad_percentage", setter(V + "downtime_bad_percentage", dec("1"))),
    # bad < good (0.1)
    (V + "downtime_bad_percentage", setter(V + "downtime_bad_percentage", dec("0.05"))),
    (V + "downtime_h_threshold", setter(V + "downtime_h_threshold", dec("0"))),
    (E + "epoch_length", setter(E + "epoch_length", 0)),
    (E + "poc_stage_duration", setter(E + "poc_stage_duration", -1)),
    (E + "poc_validation_delay", setter(E + "poc_validation_delay", -1)),
    (E + "poc_validation_duration", setter(E + "poc_validation_duration", -1)),
    (E + "set_new_validators_delay", setter(E + "set_new_validators_delay", -1)),
    ("params.epoch_params", setter(E + "poc_stage_duration", 40)),  # PoC as long as the epoch
    (X + "cb_miss_threshold_pct", setter(X + "cb_miss_threshold_pct", 101)),
    (X + "cb_initial_cooldown_blocks", setter(X + "cb_initial_cooldown_blocks", -1)),
    (X + "cb_max_cooldown_blocks", setter(X + "cb_max_cooldown_blocks", -1)),
    (X + "cb_max_cooldown_blocks", setter(X + "cb_max_cooldown_blocks", 49)),  # < initial 50
    (X + "health_params", clearer(X + "health_params")),
    (X + "health_params.policy", setter(X + "health_params.policy", "bogus")),
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
    (W + "readmit_successes", setter(W + "readmit_successes", 33)),  # > window (32)
    (W + "short_window", setter(W + "short_window", 65)),  # beyond the 64-outcome ring
    (W + "incident_blocks", setter(W + "incident_blocks", -1)),
    (W + "recovered_max_cooldown_blocks", setter(W + "recovered_max_cooldown_blocks", -1)),
    (W + "suspicion_prior_pct", setter(W + "suspicion_prior_pct", 100)),
    (W + "suspicion_good_miss_pct", setter(W + "suspicion_good_miss_pct", 15)),  # = bad (15)
    (W + "suspicion_bad_miss_pct", setter(W + "suspicion_bad_miss_pct", 100)),
    (W + "probe_weight_pct", setter(W + "probe_weight_pct", 101)),
    # Neither half may be missing (no message can carry that: each handler rejects it first).
    ("params", clearer("params")),
    ("extension_params", clearer("extension_params")),
]
#: The rows a governance message can carry.
MESSAGE_ROWS = [r for r in ROWS if r[0] not in ("params", "extension_params")]


def make_update(params: ModuleParams, field: str) -> Message:
    """The governance message that carries the half of ``params`` that ``field`` is in."""
    if field.startswith("extension_params"):
        return MsgUpdateExtensionParams(
            authority=GOV_AUTHORITY, extension_params=params.extension_params
        )
    return MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params)


def make_invalid(chain: Chain, mutate: Callable[[ModuleParams], None]) -> ModuleParams:
    params = chain.get_params()
    mutate(params)
    return params


@pytest.mark.parametrize(
    ("field", "mutate"),
    MESSAGE_ROWS,
    ids=[f"{i:02d}-{r[0]}" for i, r in enumerate(MESSAGE_ROWS)],
)
def test_invalid_field_rejected(
    chain: Chain, field: str, mutate: Callable[[ModuleParams], None]
) -> None:
    before, app_hash, height = chain.get_params(), chain.app_hash, chain.height
    msg = make_update(make_invalid(chain, mutate), field)
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
        assert k.get_pending_extension_params() is None


def _rule_call_lines() -> set[int]:
    tree = ast.parse(inspect.getsource(params_module))
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_require"
    }


def _raising_line(mutate: Callable[[ModuleParams], None], chain: Chain) -> int | None:
    """The line of the ``_require(...)`` call that rejected the params (None when the chain's
    own rules, ``validate_chain_params``, rejected them first)."""
    with pytest.raises(InvalidParamsError) as exc_info:
        validate_params(make_invalid(chain, mutate))
    frames = [
        f
        for f in inspect.getinnerframes(exc_info.tb, context=0)
        if f.filename == params_module.__file__
    ]
    if frames[-1].function != "_require":
        return None
    return frames[-2].lineno  # the _require(...) call inside a validate_* function


def test_table_has_a_row_for_every_rule(chain: Chain) -> None:
    """Adding a rule to types/params.py without a row here fails this test."""
    covered = {_raising_line(mutate, chain) for _, mutate in ROWS} - {None}
    rules = _rule_call_lines()
    assert rules - covered == set(), "rules without a row (types/params.py line numbers)"
    assert covered <= rules


def test_defaults_and_mainnet_are_valid() -> None:
    from keepersim.types.params import get_default_params, get_mainnet_params

    validate_params(get_default_params())
    validate_params(get_mainnet_params())


def test_wrong_authority_unauthorized(chain: Chain) -> None:
    before = chain.get_params()
    params = chain.get_params()
    params.params.validation_params.expiration_blocks = 7
    params.extension_params.cb_min_samples = 9
    for msg, name in (
        (MsgUpdateParams(authority="gonka1mallory", params=params.params), "MsgUpdateParams"),
        (
            MsgUpdateExtensionParams(
                authority="gonka1mallory", extension_params=params.extension_params
            ),
            "MsgUpdateExtensionParams",
        ),
    ):
        with pytest.raises(BlockError) as exc_info:
            chain.deliver_block([msg], strict=True)
        assert isinstance(exc_info.value.__cause__, UnauthorizedError)
        assert (
            f"{name}.authority 'gonka1mallory' is not the governance account '{GOV_AUTHORITY}'"
            in str(exc_info.value)
        )
        result = chain.deliver_block([msg])
        assert result.tx_results[0].error.startswith("UnauthorizedError: ")
        assert result.events == ()
    chain.deliver_block([])
    assert chain.get_params() == before


def test_valid_update_takes_effect_from_the_next_block(chain: Chain) -> None:
    params = chain.get_params()
    params.params.validation_params.expiration_blocks = 5
    r1 = chain.deliver_block(
        [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params),
            MsgStartInference(inference_id="a", assigned_to="p0", model=MODEL),
        ]
    )
    assert not r1.get_failed()
    assert ParamsUpdated(1, 2, GOV_AUTHORITY) in r1.events
    # not in the block that carried it
    assert chain.get_params().params.validation_params.expiration_blocks == 20
    with chain.read() as k:
        assert k.get_pending_params() == params.params
        assert k.get_pending_extension_params() is None
    r2 = chain.deliver_block([MsgStartInference(inference_id="b", assigned_to="p0", model=MODEL)])
    assert not r2.get_failed()
    assert chain.get_params() == params
    with chain.read() as k:
        assert k.get_pending_params() is None
        assert sorted(k.iterate_timeouts()) == [(2 + 5, "b"), (1 + 20, "a")]


def test_extension_update_takes_effect_from_the_next_block(chain: Chain) -> None:
    before = chain.get_params()
    ext = ExtensionParams()
    ext.CopyFrom(before.extension_params)
    ext.cb_min_samples = 9
    ext.health_params.policy = "windowed"
    r1 = chain.deliver_block(
        [MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext)]
    )
    assert not r1.get_failed()
    assert r1.events == (ParamsUpdated(1, 2, GOV_AUTHORITY),)
    assert chain.get_params() == before  # not in the block that carried it
    assert chain.get_policy_name() == "gonka"
    with chain.read() as k:
        assert k.get_pending_extension_params() == ext
        assert k.get_pending_params() is None
    assert not chain.deliver_block([]).get_failed()
    assert chain.get_params() == ModuleParams(params=before.params, extension_params=ext)
    assert chain.get_policy_name() == "windowed"
    with chain.read() as k:
        assert k.get_pending_extension_params() is None


def test_both_halves_in_one_block_take_effect_together(chain: Chain) -> None:
    params = chain.get_params()
    params.params.validation_params.expiration_blocks = 6
    params.extension_params.cb_miss_threshold_pct = 40
    chain.deliver_block(
        [
            MsgUpdateExtensionParams(
                authority=GOV_AUTHORITY, extension_params=params.extension_params
            ),
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params),
        ]
    )
    assert chain.get_params() != params
    chain.deliver_block([])
    assert chain.get_params() == params


def test_each_half_is_checked_against_the_other_pending_half(chain: Chain) -> None:
    """A pending extension update is what a later MsgUpdateParams must load with, and the other
    way round: a pair that cannot run together is never accepted."""
    ext = chain.get_params().extension_params
    ext.sprt_enabled = False
    assert not chain.deliver_block(
        [MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext)]
    ).get_failed()
    # With the SPRT off, downtime params the SPRT could not run with are acceptable ...
    params = chain.get_params().params
    params.validation_params.downtime_good_percentage.CopyFrom(compute_chain_decimal("0"))
    assert not chain.deliver_block(
        [MsgUpdateParams(authority=GOV_AUTHORITY, params=params)]
    ).get_failed()
    # ... but then the SPRT cannot be switched back on: that pair cannot run.
    ext.sprt_enabled = True
    result = chain.deliver_block(
        [MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext)]
    )
    assert result.tx_results[0].error.startswith(
        "InvalidParamsError: invalid params: params.validation_params.downtime_good_percentage="
    )
    assert chain.get_params().extension_params.sprt_enabled is False
    # In one block, the extension update is checked against the chain update pending before
    # it: the SPRT on with p0 = 0 pending is rejected, with p0 = 0.1 pending accepted.
    params = chain.get_params().params
    result = chain.deliver_block(
        [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params),
            MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext),
        ]
    )
    assert [r.ok for r in result.tx_results] == [True, False]
    chain.deliver_block([])
    assert chain.get_params().extension_params.sprt_enabled is False
    params.validation_params.downtime_good_percentage.CopyFrom(compute_chain_decimal("0.1"))
    assert not chain.deliver_block(
        [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params),
            MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext),
        ]
    ).get_failed()
    chain.deliver_block([])
    assert chain.get_params().extension_params.sprt_enabled is True


@pytest.mark.parametrize(
    "name",
    [
        "cb_miss_threshold_pct",
        "cb_min_samples",
        "cb_initial_cooldown_blocks",
        "cb_max_cooldown_blocks",
    ],
)
def test_cb_param_zero_means_the_default(chain: Chain, name: str) -> None:
    """As upstream #942: a cb_* param of 0 is valid and reads as its default."""
    ext = chain.get_params().extension_params
    for other in ("cb_miss_threshold_pct", "cb_min_samples"):
        setattr(ext, other, 50 if other == "cb_miss_threshold_pct" else 7)
    ext.cb_initial_cooldown_blocks, ext.cb_max_cooldown_blocks = 60, 600
    setattr(ext, name, 0)
    validate_params(ModuleParams(params=chain.get_params().params, extension_params=ext))
    settings = get_cb_settings(ext)
    expected = {
        "miss_threshold_pct": 50,
        "min_samples": 7,
        "initial_cooldown_blocks": 60,
        "max_cooldown_blocks": 600,
    }
    expected[name.removeprefix("cb_")] = getattr(CB_DEFAULTS, name.removeprefix("cb_"))
    assert settings == CbSettings(**expected)
    assert not chain.deliver_block(
        [MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext)]
    ).get_failed()
    chain.deliver_block([])
    assert getattr(chain.get_params().extension_params, name) == 0


def test_cb_defaults_are_upstreams() -> None:
    assert CbSettings(25, 4, 50, 500) == CB_DEFAULTS
    assert get_cb_settings(ExtensionParams()) == CB_DEFAULTS


def test_breaker_with_zero_params_acts_as_with_the_defaults(
    make_driver: Callable[..., Driver], breaker_params: ModuleParams
) -> None:
    """cb_* all 0 run the breaker exactly as the explicit defaults 25% / 4 / 50 / 500 do."""
    runs = []
    for zero in (False, True):
        params = ModuleParams()
        params.CopyFrom(breaker_params)
        if zero:
            ext = params.extension_params
            ext.cb_miss_threshold_pct = ext.cb_min_samples = 0
            ext.cb_initial_cooldown_blocks = ext.cb_max_cooldown_blocks = 0
        d = make_driver(params)
        d.success("p0", 7, 3)
        d.miss("p0", 8, 4)  # 4/7 > 25%: excluded at 8 for 50 blocks
        d.miss("p0", 59)  # the probe fails: cooldown 100
        d.run_to(60)
        runs.append([(t.height, t.to_state, t.reason) for t in d.transitions()])
    assert runs[0] == runs[1]
    assert [(h, s) for h, s, _ in runs[0]] == [(8, "excluded"), (58, "probe"), (59, "excluded")]


def test_breaker_params_switch_between_blocks(driver: Driver) -> None:
    """A stricter breaker voted in block 8 still judges block 8 by the old rule; from block 9 the
    new rule applies, and to every participant at once (no new outcome needed)."""
    d = driver
    d.success("p0", 7, 3)
    d.miss("p0", 8, 4)  # 4/7 > 25%
    d.success("p1", 7, 9)
    d.miss("p1", 8, 1)  # 1/10: fine at 25%, too many at 5%
    ext = d.chain.get_params().extension_params
    ext.cb_min_samples = 100
    ext.cb_miss_threshold_pct = 5
    d.add(8, MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
    d.run_to(8)
    assert [(t.address, t.to_state) for t in d.transitions()] == [("p0", "excluded")]
    d.run_to(9)
    assert d.transitions_at(9) == []  # min_samples 100 is not reached by anyone
    ext.cb_min_samples = 4
    d.add(10, MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
    d.run_to(10)
    assert d.transitions_at(10) == []
    d.run_to(11)
    assert d.transitions_at(11) == [
        HealthTransition(11, "gonka", "p1", "healthy", "excluded", "miss rate 1/10")
    ]
