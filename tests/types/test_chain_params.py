"""The chain's params rules (keepersim.types.chain_params) against the spec and upstream's rules.

Every ported Validate rule has a case below that breaks exactly that rule on a copy of the
defaults, so dropping or reordering a rule fails a test.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from keepersim.types.chain_decimal import compute_chain_decimal, get_chain_decimal_value
from keepersim.types.chain_defaults import get_chain_default_params, get_chain_mainnet_params
from keepersim.types.chain_params import validate_chain_params
from keepersim.types.errors import InvalidParamsError
from keepersim.types.pb.inference.inference.params_pb2 import (
    Decimal,
    DevshardApprovedVersion,
    Params,
    PoCModelConfig,
)

SPEC = Path(__file__).resolve().parents[2] / "docs" / "design" / "chain-types-v0.2.14.md"


def get_spec_json_block(after_heading: str) -> Any:
    """The first ```json block after the line that starts with ``after_heading`` in the spec."""
    text = SPEC.read_text(encoding="utf-8")
    start = text.index(after_heading)
    match = re.search(r"```json\n(.*?)\n```", text[start:], re.S)
    assert match, f"no json block after {after_heading!r}"
    return json.loads(match.group(1))


def get_gateway_dict(message: Any) -> Any:
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def get_without_nulls(value: Any) -> Any:
    """The gateway prints an unset message as null; MessageToDict leaves it out."""
    if isinstance(value, dict):
        return {k: get_without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [get_without_nulls(v) for v in value]
    return value


def as_pair(d: Decimal) -> tuple[int, int]:
    return d.value, d.exponent


# --- defaults and mainnet ------------------------------------------------------------------


def test_default_params_print_as_the_spec_appendix_c() -> None:
    expected = get_spec_json_block("## Appendix C.")["params"]
    params = get_chain_default_params()
    assert get_gateway_dict(params) == get_without_nulls(expected)
    nulls = {name for name, value in expected.items() if value is None}
    assert nulls == {"fee_params"}
    assert all(not params.HasField(name) for name in nulls)
    assert set(expected) == {f.name for f in Params.DESCRIPTOR.fields}


def test_defaults_and_mainnet_pass_validation() -> None:
    validate_chain_params(get_chain_default_params())
    validate_chain_params(get_chain_mainnet_params())


def test_mainnet_epoch_and_validation_params_are_the_spec_reconstruction_but_three() -> None:
    """The spec's reconstruction (genesis + handlers) against the preset (the live params +
    v0.2.13/v0.2.14): they differ in the three values governance changed on the live chain
    (docs/design/mainnet-preset.md)."""
    expected = get_spec_json_block("**Reconstructed mainnet `epoch_params` and `validation_params`")
    params = get_chain_mainnet_params()
    live = {
        ("epoch_params", "epoch_length"): "15391",
        ("validation_params", "timestamp_expiration"): "300",
        ("validation_params", "binom_test_p0"): {"value": "1", "exponent": -1},
    }
    for (part, name), value in live.items():
        assert expected[part][name] != value
        expected[part][name] = value
    assert get_gateway_dict(params.epoch_params) == expected["epoch_params"]
    assert get_gateway_dict(params.validation_params) == expected["validation_params"]


def test_mainnet_spot_values() -> None:
    p = get_chain_mainnet_params()
    v, e = p.validation_params, p.epoch_params
    assert v.expiration_blocks == 150
    assert as_pair(v.downtime_good_percentage) == (98, -2)
    assert as_pair(v.downtime_bad_percentage) == (99, -2)
    assert as_pair(v.downtime_h_threshold) == (1, 2)
    assert as_pair(v.binom_test_p0) == (1, -1)  # live; the genesis reconstruction had 0.4
    assert (e.epoch_length, e.poc_stage_duration, e.poc_validation_delay) == (15391, 35, 5)
    assert (e.poc_validation_duration, e.set_new_validators_delay) == (240, 120)
    assert as_pair(e.poc_slot_allocation) == (1, -1)
    assert p.bitcoin_reward_params.initial_epoch_reward == 323_000_000_000_000
    c = p.confirmation_poc_params
    assert (c.expected_confirmations_per_epoch, c.upgrade_protection_window) == (4, 500)
    assert as_pair(c.alpha_threshold) == (5, -1)
    assert p.poc_params.validation_vote_threshold_bps == 5000
    assert p.HasField("fee_params") and p.fee_params.min_gas_price_ngonka == 0
    assert as_pair(p.delegation_params.max_model_voting_power_percentage) == (3, -1)
    models = p.poc_params.models
    assert [m.model_id for m in models] == [
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        "moonshotai/Kimi-K2.6",
        "MiniMaxAI/MiniMax-M2.7",
    ]
    assert [as_pair(m.weight_scale_factor) for m in models] == [(3593, -4), (78, -2), (3024, -4)]
    assert p.delegation_params.initial_model_id == models[0].model_id
    assert not p.poc_params.HasField("model_params") and p.poc_params.model_id == ""
    assert p.devshard_escrow_params.max_nonce == 1_000_000
    assert len(p.devshard_escrow_params.approved_versions) == 1
    # the defaults are a fresh copy each call: mainnet's edits do not leak into them
    assert get_chain_default_params().validation_params.expiration_blocks == 20


# --- compute_chain_decimal -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("0.98", (98, -2)),
        ("100", (1, 2)),
        (100, (1, 2)),
        ("0.5", (5, -1)),
        ("0", (0, 0)),
        ("-0.000", (0, 0)),
        ("1.0", (1, 0)),
        ("0.20", (2, -1)),
        ("-0.000475", (-475, -6)),
        ("1e-6", (1, -6)),
        ("1.398077", (1398077, -6)),
        ("9223372036854775807", (9223372036854775807, 0)),
    ],
)
def test_compute_chain_decimal_examples(text: str | int, pair: tuple[int, int]) -> None:
    assert as_pair(compute_chain_decimal(text)) == pair


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775808",
        "1" * 40,
        "0.1234567890123456789012345",
        "-9223372036854775809",
        "1e2147483648",
        "1e-2147483649",
        "x",
        "NaN",
        "inf",
        0.5,
        True,
    ],
)
def test_compute_chain_decimal_rejects(text: Any) -> None:
    with pytest.raises(ValueError):
        compute_chain_decimal(text)


def test_compute_chain_decimal_int32_exponent_edges() -> None:
    assert as_pair(compute_chain_decimal("1e2147483647")) == (1, 2**31 - 1)
    assert as_pair(compute_chain_decimal("1e-2147483648")) == (1, -(2**31))


@given(
    st.integers(min_value=-(10**18), max_value=10**18),
    st.integers(min_value=-40, max_value=40),
    st.sampled_from(["{c}e{e}", "plain"]),
)
def test_compute_chain_decimal_is_exact_and_shortest(
    coefficient: int, exponent: int, style: str
) -> None:
    exact = decimal.Decimal(coefficient).scaleb(exponent)
    text = f"{coefficient}e{exponent}" if style != "plain" else format(exact, "f")
    d = compute_chain_decimal(text)
    assert get_chain_decimal_value(d) == decimal.Decimal(text)
    if d.value == 0:
        assert d.exponent == 0
    else:
        assert d.value % 10 != 0
        normal = decimal.Decimal(text).normalize().as_tuple()
        assert d.exponent == normal.exponent
        assert abs(d.value) == int("".join(map(str, normal.digits)))


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_compute_chain_decimal_matches_new_from_float_of_repr(f: float) -> None:
    """For a float's shortest repr, the form is shopspring NewFromFloat's (spec section 3.1)."""
    d = compute_chain_decimal(repr(f))
    if f == 0:
        assert as_pair(d) == (0, 0)
        return
    sign, digits, exponent = decimal.Decimal(repr(f)).normalize().as_tuple()
    assert d.exponent == exponent
    assert d.value == (-1 if sign else 1) * int("".join(map(str, digits)))


# --- every ported rule -----------------------------------------------------------------------


def dec(text: str) -> Decimal:
    return compute_chain_decimal(text)


def set_dec(message: Any, name: str, value: Decimal) -> None:
    getattr(message, name).CopyFrom(value)


TOO_PRECISE = Decimal(value=1, exponent=-19)  # LegacyDec conversion: more than 18 decimals
TOO_LARGE = Decimal(value=1, exponent=100)  # LegacyDec conversion: out of range

Mutation = Callable[[Params], None]
CASES: list[tuple[str, str, Mutation]] = []


def case(field: str, rule_start: str) -> Callable[[Mutation], Mutation]:
    def register(mutate: Mutation) -> Mutation:
        CASES.append((field, rule_start, mutate))
        return mutate

    return register


def add_clear(field: str, rule_start: str) -> None:
    """A case that unsets the (sub-)message at dotted ``field``."""
    *parents, leaf = field.split(".")

    def mutate(p: Params) -> None:
        message: Any = p
        for name in parents:
            message = message[int(name)] if name.isdigit() else getattr(message, name)
        message.ClearField(leaf)

    CASES.append((field, rule_start, mutate))


def add_set(field: str, rule_start: str, value: object) -> None:
    """A case that sets dotted ``field`` to ``value`` (a Decimal is copied in)."""
    *parents, leaf = field.split(".")

    def mutate(p: Params) -> None:
        message: Any = p
        for name in parents:
            message = message[int(name)] if name.isdigit() else getattr(message, name)
        if isinstance(value, Decimal):
            getattr(message, leaf).CopyFrom(value)
        else:
            setattr(message, leaf, value)

    CASES.append((field, rule_start, mutate))


# params.go:629 Params.Validate: nil sub-messages, and the nil dynamic pricing panic
for _name in ("validation", "tokenomics", "collateral", "bitcoin_reward", "epoch", "poc"):
    add_clear(f"{_name}_params", f"{_name.replace('_', ' ')} params cannot be nil")
add_clear("dynamic_pricing_params", "runtime error: invalid memory address")

# params.go:790 ValidationParams.Validate
for _name in (
    "false_positive_rate",
    "pass_value",
    "min_validation_average",
    "max_validation_average",
    "min_validation_halfway",
    "miss_percentage_cutoff",
    "miss_requests_penalty",
    "bad_participant_invalidation_rate",
    "invalidation_h_threshold",
    "downtime_good_percentage",
    "downtime_bad_percentage",
    "downtime_h_threshold",
    "quick_failure_threshold",
    "invalid_reputation_preserve",
    "downtime_reputation_preserve",
    "binom_test_p0",
):
    add_clear(f"validation_params.{_name}", f"{_name.replace('_', ' ')} cannot be nil")
add_set("validation_params.timestamp_expiration", "timestamp expiration must be positive", 0)
add_set("validation_params.timestamp_advance", "timestamp advance must be positive", -1)
add_set("validation_params.logprobs_mode", 'invalid logprobs_mode: "raw"', "raw")

# params.go:857 TokenomicsParams.Validate
for _name in (
    "subsidy_reduction_interval",
    "subsidy_reduction_amount",
    "current_subsidy_percentage",
):
    add_clear(f"tokenomics_params.{_name}", f"{_name.replace('_', ' ')} cannot be nil")

# params.go:902 BitcoinRewardParams.Validate
_BONUS = ("utilization_bonus_factor", "full_coverage_bonus_factor", "partial_coverage_bonus_factor")
for _name in ("decay_rate", *_BONUS):
    add_clear(f"bitcoin_reward_params.{_name}", f"{_name.replace('_', ' ')} cannot be nil")
add_set(
    "bitcoin_reward_params.decay_rate",
    "invalid decay_rate: value '0.0000000000000000001' exceeds max precision by -1",
    TOO_PRECISE,
)
add_set(
    "bitcoin_reward_params.decay_rate",
    "invalid decay_rate: decay rate must be negative for reward reduction, but is 0.000100000000000000",
    dec("0.0001"),
)
add_set(
    "bitcoin_reward_params.decay_rate",
    "invalid decay_rate: decay rate too extreme (less than -0.01): -0.020000000000000000",
    dec("-0.02"),
)
add_set(
    "bitcoin_reward_params.decay_rate",
    "invalid decay_rate: decay rate does not have exponent defined -0.000500000000000000",
    dec("-0.0005"),
)
for _name in _BONUS:
    add_set(f"bitcoin_reward_params.{_name}", f"invalid {_name}: decimal '1", TOO_LARGE)
    add_set(
        f"bitcoin_reward_params.{_name}",
        f"invalid {_name}: bonus factor cannot be negative: -0.100000000000000000",
        dec("-0.1"),
    )

# params.go:591 EpochParams.Validate
for _name, _value, _rule in (
    ("epoch_length", 0, "epoch length must be positive"),
    ("epoch_multiplier", -1, "epoch multiplier must be positive"),
    ("default_unit_of_compute_price", -1, "default unit of compute price cannot be negative"),
    ("poc_stage_duration", 0, "poc stage duration must be positive"),
    ("poc_exchange_duration", -1, "poc exchange duration cannot be negative"),
    ("poc_validation_delay", -1, "poc validation delay cannot be negative"),
    ("poc_validation_duration", 0, "poc validation duration must be positive"),
    ("set_new_validators_delay", -1, "set new validators delay cannot be negative"),
    ("inference_validation_cutoff", -1, "inference validation cutoff cannot be negative"),
    (
        "inference_pruning_epoch_threshold",
        0,
        "inference pruning epoch threshold must be at least 1",
    ),
    ("confirmation_poc_safety_window", -1, "safety window cannot be negative"),
):
    add_set(f"epoch_params.{_name}", _rule, _value)

# params.go:880 CollateralParams.Validate
for _name, _bad, _rule in (
    ("slash_fraction_invalid", "1.5", "slash fraction must be between 0 and 1, but is 1.5000"),
    ("slash_fraction_downtime", "-0.1", "slash fraction must be between 0 and 1, but is -0.1000"),
    (
        "downtime_missed_percentage_threshold",
        "1.01",
        "percentage must be between 0 and 1, but is 1.01",
    ),
    ("base_weight_ratio", "-0.2", "base weight ratio cannot be negative: -0.2000"),
    ("base_weight_ratio", "1.2", "base weight ratio cannot be greater than 1: 1.2000"),
    ("collateral_per_weight_unit", "-1", "collateral per weight unit cannot be negative: -1.000"),
):
    add_set(f"collateral_params.{_name}", f"invalid {_name}: {_rule}", dec(_bad))
for _name in (
    "slash_fraction_invalid",
    "slash_fraction_downtime",
    "downtime_missed_percentage_threshold",
    "base_weight_ratio",
    "collateral_per_weight_unit",
):
    add_clear(f"collateral_params.{_name}", "runtime error: invalid memory address")
    add_set(
        f"collateral_params.{_name}", f"invalid {_name}: value '0.0000000000000000001'", TOO_PRECISE
    )

# params.go:940 DynamicPricingParams.Validate
for _name in ("stability_zone_lower_bound", "stability_zone_upper_bound", "price_elasticity"):
    add_clear(f"dynamic_pricing_params.{_name}", f"{_name.replace('_', ' ')} cannot be nil")
add_set(
    "dynamic_pricing_params.stability_zone_lower_bound",
    "invalid stability_zone_lower_bound: stability zone bound must be between 0.0 and 1.0, got: -0.1",
    dec("-0.1"),
)
add_set(
    "dynamic_pricing_params.stability_zone_upper_bound",
    "invalid stability_zone_upper_bound: stability zone bound must be between 0.0 and 1.0, got: 1.5",
    dec("1.5"),
)
add_set(
    "dynamic_pricing_params.price_elasticity",
    "invalid price_elasticity: price elasticity must be between 0.0 and 1.0, got: 0",
    dec("0"),
)
add_set(
    "dynamic_pricing_params.utilization_window_duration",
    "invalid utilization_window_duration: utilization window duration must be greater than 0",
    0,
)
add_set(
    "dynamic_pricing_params.utilization_window_duration",
    "invalid utilization_window_duration: utilization window duration must not exceed 3600",
    3601,
)
add_set(
    "dynamic_pricing_params.utilization_window_duration",
    "invalid utilization_window_duration: utilization window duration (2505 seconds) results in 501 blocks",
    2505,
)
for _name in ("min_per_token_price", "base_per_token_price"):
    add_set(
        f"dynamic_pricing_params.{_name}",
        f"invalid {_name}: per-token price must be greater than 0",
        0,
    )
add_set(
    "dynamic_pricing_params.stability_zone_lower_bound",
    "stability zone lower bound (0.6) must be less than upper bound (0.6)",
    dec("0.6"),
)

# params.go:988 BandwidthLimitsParams.Validate
for _name in ("kb_per_input_token", "kb_per_output_token"):
    add_clear(f"bandwidth_limits_params.{_name}", f"{_name} cannot be nil")
add_set(
    "bandwidth_limits_params.invalidations_sample_period",
    "invalid invalidations_sample_period: invalidations sample period must be greater than 0",
    0,
)
add_set(
    "bandwidth_limits_params.invalidations_sample_period",
    "invalid invalidations_sample_period: invalidations sample period (2505 seconds) results in 501",
    2505,
)

# params.go:673 .. 695 Params.Validate: guardian, developer and participant access
for _field, _rule in (
    (
        "genesis_guardian_params.network_maturity_threshold",
        "genesis guardian network maturity threshold",
    ),
    (
        "genesis_guardian_params.network_maturity_min_height",
        "genesis guardian network maturity min height",
    ),
    ("developer_access_params.until_block_height", "developer access until block height"),
    (
        "participant_access_params.new_participant_registration_start_height",
        "new participant registration start height",
    ),
    (
        "participant_access_params.participant_allowlist_until_block_height",
        "participant allowlist until block height",
    ),
):
    add_set(_field, f"{_rule} cannot be negative", -1)

# params.go:761 PocParams.Validate
add_set(
    "poc_params.validation_vote_threshold_bps",
    "poc_params.validation_vote_threshold_bps must be 0 (default) or in [5000, 10000]",
    4999,
)
add_set(
    "poc_params.validation_vote_threshold_bps",
    "poc_params.validation_vote_threshold_bps must be 0 (default) or in [5000, 10000]",
    10001,
)


@case("poc_params.models[1].model_id", 'poc_params.models contains duplicate model_id "m"')
def _duplicate_model(p: Params) -> None:
    p.poc_params.models[0].model_id = "m"
    p.poc_params.models.append(PoCModelConfig(model_id="m", seq_len=1))


add_set("poc_params.models.0.seq_len", "poc_params.models.seq_len cannot be negative", -1)

# params.go:452 DevshardEscrowParams.Validate
_SHA = "ab" * 32
for _name, _value, _rule in (
    ("min_amount", 0, "devshard escrow min_amount must be positive"),
    (
        "max_amount",
        4_999_999_999,
        "devshard escrow max_amount (4999999999) must be >= min_amount (5000000000)",
    ),
    ("group_size", 0, "devshard escrow group_size must be positive"),
    ("max_nonce", 0, "devshard escrow max_nonce must be positive"),
    ("refusal_timeout", 0, "devshard escrow refusal_timeout must be positive"),
    ("execution_timeout", -1, "devshard escrow execution_timeout must be positive"),
    (
        "validation_rate",
        10001,
        "devshard escrow validation_rate (10001) must be <= 10000 basis points",
    ),
    ("vote_threshold_factor", 0, "devshard escrow vote_threshold_factor (0) must be in (0, 100]"),
    (
        "vote_threshold_factor",
        101,
        "devshard escrow vote_threshold_factor (101) must be in (0, 100]",
    ),
):
    add_set(f"devshard_escrow_params.{_name}", _rule, _value)


def add_version(field: str, rule: str, *versions: DevshardApprovedVersion) -> None:
    def mutate(p: Params) -> None:
        p.devshard_escrow_params.approved_versions.extend(versions)

    CASES.append((f"devshard_escrow_params.approved_versions[{field}", rule, mutate))


_AT = "devshard_escrow_params.approved_versions[0]"
add_version(
    "0].name", f"{_AT}: name cannot be empty", DevshardApprovedVersion(binary="b", sha256=_SHA)
)
add_version(
    "0].binary", f"{_AT}: binary cannot be empty", DevshardApprovedVersion(name="n", sha256=_SHA)
)
add_version(
    "0].sha256", f"{_AT}: sha256 cannot be empty", DevshardApprovedVersion(name="n", binary="b")
)
add_version(
    "0].sha256",
    f"{_AT}: sha256 must be 64 hex characters, got 66",
    DevshardApprovedVersion(name="n", binary="b", sha256=_SHA + "ab"),
)
add_version(
    "0].sha256",
    f"{_AT}: sha256 is not valid hex: encoding/hex: invalid byte: U+0067 'g'",
    DevshardApprovedVersion(name="n", binary="b", sha256="ab" * 31 + "ag"),
)
add_version(
    "1].name",
    'devshard_escrow_params.approved_versions: duplicate name "n"',
    DevshardApprovedVersion(name="n", binary="b", sha256=_SHA),
    DevshardApprovedVersion(name="n", binary="c", sha256=_SHA),
)

# params.go:709 Params.Validate: delegation params, validateDecimalFraction (params.go:521)
add_set("delegation_params.deploy_window", "delegation deploy_window cannot be negative", -1)
add_set("delegation_params.v_min", "delegation v_min cannot be negative", -1)
for _name in (
    "refusal_penalty",
    "no_participation_penalty",
    "delegation_share",
    "w_threshold",
    "cap_factor",
):
    add_set(
        f"delegation_params.{_name}",
        f"delegation {_name}: invalid decimal: value '0.0000000000000000001'",
        TOO_PRECISE,
    )
    add_set(
        f"delegation_params.{_name}",
        f"delegation {_name} must be between 0 and 1, got 1.100000000000000000",
        dec("1.1"),
    )
add_set(
    "delegation_params.initial_model_id",
    'delegation initial_model_id "absent" not found in poc_params models',
    "absent",
)

# fee_params.go:17 FeeParams.Validate
add_set(
    "fee_params.min_gas_price_ngonka",
    "min_gas_price_ngonka 1000001 exceeds safety limit of 1,000,000",
    1_000_001,
)

# params.go:413 MaintenanceParams.Validate
_BOUND = 10**15
for _name, _value, _rule in (
    ("maintenance_max_window_blocks", 0, "maintenance max window blocks must be positive"),
    (
        "maintenance_max_window_blocks",
        _BOUND + 1,
        "maintenance max window blocks (1000000000000001) exceeds",
    ),
    (
        "maintenance_min_schedule_lead_blocks",
        _BOUND + 1,
        "maintenance min schedule lead blocks (1000000000000001)",
    ),
    ("maintenance_credit_cap_blocks", 0, "maintenance credit cap blocks must be positive"),
    (
        "maintenance_credit_cap_blocks",
        _BOUND + 1,
        "maintenance credit cap blocks (1000000000000001) exceeds",
    ),
    (
        "maintenance_max_concurrent_validators",
        0,
        "maintenance max concurrent validators must be positive",
    ),
    (
        "maintenance_max_concurrent_power_bps",
        10001,
        "maintenance max concurrent power bps cannot exceed 10000",
    ),
    (
        "maintenance_credit_earn_per_successful_epoch_blocks",
        0,
        "maintenance credit earn per successful epoch blocks must be positive",
    ),
    (
        "maintenance_credit_earn_per_successful_epoch_blocks",
        401,
        "maintenance credit earn per successful epoch blocks (401) must not exceed credit cap (400)",
    ),
):
    add_set(f"maintenance_params.{_name}", _rule, _value)


def get_field_path(field: str) -> str:
    """``poc_params.models.0.seq_len`` (a settable path) is reported as ``models[0]``."""
    return re.sub(r"\.(\d+)\.", r"[\1].", field)


@pytest.mark.parametrize(
    ("field", "rule_start", "mutate"),
    CASES,
    ids=[f"{i:03d}-{field}" for i, (field, _, _) in enumerate(CASES)],
)
def test_each_rule_rejects_exactly_its_break(field: str, rule_start: str, mutate: Mutation) -> None:
    params = get_chain_default_params()
    if field.startswith("fee_params."):
        params.fee_params.SetInParent()
    mutate(params)
    with pytest.raises(InvalidParamsError) as raised:
        validate_chain_params(params)
    assert raised.value.field == get_field_path(field)
    assert raised.value.rule.startswith(rule_start), raised.value.rule


def test_nil_and_zero_delegation_fractions_pass() -> None:
    """validateDecimalFraction lets nil through; {0,0} skips the conversion, {0,-3} is 0 too."""
    params = get_chain_default_params()
    params.delegation_params.ClearField("refusal_penalty")
    set_dec(params.delegation_params, "cap_factor", Decimal(value=0, exponent=0))
    set_dec(params.delegation_params, "w_threshold", Decimal(value=0, exponent=-3))
    validate_chain_params(params)


def test_unset_optional_sub_messages_pass() -> None:
    params = get_chain_default_params()
    for name in (
        "bandwidth_limits_params",
        "genesis_guardian_params",
        "developer_access_params",
        "participant_access_params",
        "devshard_escrow_params",
        "delegation_params",
        "fee_params",
        "maintenance_params",
        "confirmation_poc_params",
        "transfer_agent_access_params",
    ):
        params.ClearField(name)
    validate_chain_params(params)


def test_error_carries_the_offending_value() -> None:
    params = get_chain_default_params()
    set_dec(params.collateral_params, "slash_fraction_invalid", dec("1.5"))
    with pytest.raises(InvalidParamsError) as raised:
        validate_chain_params(params)
    assert raised.value.value == decimal.Decimal("1.5")
    assert raised.value.rule == (
        "invalid slash_fraction_invalid: slash fraction must be between 0 and 1, "
        "but is 1.500000000000000000"
    )


def test_first_broken_rule_in_upstream_order_wins() -> None:
    """Upstream checks validation params before epoch params, and tokenomics before bitcoin."""
    params = get_chain_default_params()
    params.epoch_params.epoch_length = 0
    params.validation_params.timestamp_advance = 0
    params.bitcoin_reward_params.ClearField("decay_rate")
    with pytest.raises(InvalidParamsError) as raised:
        validate_chain_params(params)
    assert raised.value.field == "validation_params.timestamp_advance"
