"""The chain's own params rules at gonka v0.2.14 (commit ee730031decedd2428aa56c65084ae5ab33d9192).

Nothing here is keepersim-specific: it is upstream ``inference-chain/x/inference/types/params.go``
(and ``fee_params.go``) ported, so keepersim can hold and check the chain's ``Params`` as the chain
would.

- ``validate_chain_params``: ``func (p Params) Validate() error`` (params.go:629) and every
  ``Validate`` it calls, in upstream order. ``InvalidParamsError.rule`` is upstream's error text as
  Go would print it (``errors.Wrap`` prefixes included; :mod:`keepersim.types.chain_params_errors`
  and :mod:`keepersim.types.chain_decimal` print the values); ``field`` is the dotted proto path.

Checks of upstream that cannot fail here, so have no port:
- the type assertions ``validateEpoch`` (collateral and dynamic pricing grace_period_end_epoch,
  bitcoin genesis_epoch), ``validateInitialEpochReward``, ``validateVestingPeriod`` (work and
  reward vesting periods) and ``validateGracePeriodPerTokenPrice``: a typed proto field always
  has the asserted type;
- ``poc_params.models cannot contain nil entries`` (params.go:774) and a nil entry of
  ``devshard_escrow_params.approved_versions`` (a panic upstream): a decoded repeated message
  never holds nil;
- the nil checks inside ``validateStabilityZoneBound`` / ``validatePriceElasticity``: unreachable,
  ``DynamicPricingParams.Validate`` checks those nils first.

Where upstream dereferences nil and panics (unset ``dynamic_pricing_params``; an unset Decimal in
``collateral_params``), the port raises with Go's panic text as the rule.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable

from keepersim.types.chain_decimal import (
    compute_legacy_dec,
    get_chain_decimal_value,
    get_legacy_dec_string,
    get_shopspring_string,
)
from keepersim.types.chain_params_errors import (
    GO_NIL_DEREFERENCE,
    LEGACY_ONE,
    check_decimal,
    fail,
    get_go_quoted,
    get_hex_error,
    is_set,
    require_decimals,
)
from keepersim.types.pb.inference.inference.params_pb2 import (
    BandwidthLimitsParams,
    BitcoinRewardParams,
    CollateralParams,
    Decimal,
    DelegationParams,
    DevshardEscrowParams,
    DynamicPricingParams,
    EpochParams,
    FeeParams,
    MaintenanceParams,
    Params,
    PocParams,
    TokenomicsParams,
    ValidationParams,
)

# Upstream constants (params.go at ee730031).
LOGPROBS_MODE_PROCESSED = "processed_logprobs"  # params.go:91
LOGPROBS_MODE_RAW = "raw_logprobs"  # params.go:92
DYNAMIC_PRICING_ESTIMATED_BLOCK_SECONDS = 5  # params.go:60
MAX_ROLLING_WINDOW_BLOCKS = 500  # params.go:61
MAX_MAINTENANCE_BLOCKS_PARAM = 10**15  # params.go:411
MAX_MIN_GAS_PRICE_NGONKA = 1_000_000  # fee_params.go:21


# --- the Validate functions, in upstream's order --------------------------------------------


def validate_chain_params(params: Params) -> None:
    """Upstream ``Params.Validate()``: raise ``InvalidParamsError`` on the first broken rule."""
    # params.go:629 Params.Validate: nil sub-messages
    for name, text in (
        ("validation_params", "validation params cannot be nil"),
        ("tokenomics_params", "tokenomics params cannot be nil"),
        ("collateral_params", "collateral params cannot be nil"),
        ("bitcoin_reward_params", "bitcoin reward params cannot be nil"),
        ("epoch_params", "epoch params cannot be nil"),
        ("poc_params", "poc params cannot be nil"),
    ):
        if not is_set(params, name):
            fail(name, text, None)
    _validate_validation_params(params.validation_params)
    _validate_tokenomics_params(params.tokenomics_params)
    _validate_bitcoin_reward_params(params.bitcoin_reward_params)
    _validate_epoch_params(params.epoch_params)
    _validate_collateral_params(params.collateral_params)
    # params.go:664 upstream calls DynamicPricingParams.Validate without a nil check: it panics
    if not params.HasField("dynamic_pricing_params"):
        fail("dynamic_pricing_params", GO_NIL_DEREFERENCE, None)
    _validate_dynamic_pricing_params(params.dynamic_pricing_params)
    if params.HasField("bandwidth_limits_params"):
        _validate_bandwidth_limits_params(params.bandwidth_limits_params)

    # params.go:673 Params.Validate: genesis guardian params
    if params.HasField("genesis_guardian_params"):
        gg = params.genesis_guardian_params
        if gg.network_maturity_threshold < 0:
            fail(
                "genesis_guardian_params.network_maturity_threshold",
                "genesis guardian network maturity threshold cannot be negative",
                gg.network_maturity_threshold,
            )
        if gg.network_maturity_min_height < 0:
            fail(
                "genesis_guardian_params.network_maturity_min_height",
                "genesis guardian network maturity min height cannot be negative",
                gg.network_maturity_min_height,
            )
    # params.go:682 Params.Validate: developer access params
    if params.HasField("developer_access_params"):
        height = params.developer_access_params.until_block_height
        if height < 0:
            fail(
                "developer_access_params.until_block_height",
                "developer access until block height cannot be negative",
                height,
            )
    # params.go:688 Params.Validate: participant access params
    if params.HasField("participant_access_params"):
        pa = params.participant_access_params
        if pa.new_participant_registration_start_height < 0:
            fail(
                "participant_access_params.new_participant_registration_start_height",
                "new participant registration start height cannot be negative",
                pa.new_participant_registration_start_height,
            )
        if pa.participant_allowlist_until_block_height < 0:
            fail(
                "participant_access_params.participant_allowlist_until_block_height",
                "participant allowlist until block height cannot be negative",
                pa.participant_allowlist_until_block_height,
            )
    _validate_poc_params(params.poc_params)  # params.go:697 (set: checked above)
    if params.HasField("devshard_escrow_params"):
        _validate_devshard_escrow_params(params.devshard_escrow_params)
    if params.HasField("delegation_params"):
        _validate_delegation_params(params.delegation_params)
        # params.go:733 Params.Validate: initial_model_id must name a PoC model
        model_id = params.delegation_params.initial_model_id
        if model_id and all(m.model_id != model_id for m in params.poc_params.models):
            fail(
                "delegation_params.initial_model_id",
                f"delegation initial_model_id {get_go_quoted(model_id)} not found in poc_params models",
                model_id,
            )
    if params.HasField("fee_params"):
        _validate_fee_params(params.fee_params)
    if params.HasField("maintenance_params"):
        _validate_maintenance_params(params.maintenance_params)


def _validate_validation_params(p: ValidationParams) -> None:
    # params.go:790 ValidationParams.Validate: nil Decimals
    require_decimals(
        p,
        "validation_params",
        (
            ("false_positive_rate", "false positive rate cannot be nil"),
            ("pass_value", "pass value cannot be nil"),
            ("min_validation_average", "min validation average cannot be nil"),
            ("max_validation_average", "max validation average cannot be nil"),
            ("min_validation_halfway", "min validation halfway cannot be nil"),
            ("miss_percentage_cutoff", "miss percentage cutoff cannot be nil"),
            ("miss_requests_penalty", "miss requests penalty cannot be nil"),
            (
                "bad_participant_invalidation_rate",
                "bad participant invalidation rate cannot be nil",
            ),
            ("invalidation_h_threshold", "invalidation h threshold cannot be nil"),
            ("downtime_good_percentage", "downtime good percentage cannot be nil"),
            ("downtime_bad_percentage", "downtime bad percentage cannot be nil"),
            ("downtime_h_threshold", "downtime h threshold cannot be nil"),
            ("quick_failure_threshold", "quick failure threshold cannot be nil"),
            ("invalid_reputation_preserve", "invalid reputation preserve cannot be nil"),
            ("downtime_reputation_preserve", "downtime reputation preserve cannot be nil"),
            ("binom_test_p0", "binom test p0 cannot be nil"),
        ),
    )
    # params.go:841 ValidationParams.Validate: timestamps
    if p.timestamp_expiration <= 0:
        fail(
            "validation_params.timestamp_expiration",
            "timestamp expiration must be positive",
            p.timestamp_expiration,
        )
    if p.timestamp_advance <= 0:
        fail(
            "validation_params.timestamp_advance",
            "timestamp advance must be positive",
            p.timestamp_advance,
        )
    # params.go:848 ValidationParams.Validate: logprobs_mode
    if p.logprobs_mode not in (LOGPROBS_MODE_PROCESSED, LOGPROBS_MODE_RAW):
        fail(
            "validation_params.logprobs_mode",
            f"invalid logprobs_mode: {get_go_quoted(p.logprobs_mode)}, must be "
            f'"{LOGPROBS_MODE_PROCESSED}" or "{LOGPROBS_MODE_RAW}"',
            p.logprobs_mode,
        )


def _validate_tokenomics_params(p: TokenomicsParams) -> None:
    # params.go:857 TokenomicsParams.Validate: nil Decimals (vesting checks are type-only)
    require_decimals(
        p,
        "tokenomics_params",
        (
            ("subsidy_reduction_interval", "subsidy reduction interval cannot be nil"),
            ("subsidy_reduction_amount", "subsidy reduction amount cannot be nil"),
            ("current_subsidy_percentage", "current subsidy percentage cannot be nil"),
        ),
    )


def _validate_bitcoin_reward_params(p: BitcoinRewardParams) -> None:
    # params.go:902 BitcoinRewardParams.Validate: nil Decimals
    require_decimals(
        p,
        "bitcoin_reward_params",
        (
            ("decay_rate", "decay rate cannot be nil"),
            ("utilization_bonus_factor", "utilization bonus factor cannot be nil"),
            ("full_coverage_bonus_factor", "full coverage bonus factor cannot be nil"),
            ("partial_coverage_bonus_factor", "partial coverage bonus factor cannot be nil"),
        ),
    )

    # params.go:1112 validateDecayRate
    def decay_rule(scaled: int) -> str:
        shown = get_legacy_dec_string(scaled)
        if scaled > 0:
            return f"decay rate must be negative for reward reduction, but is {shown}"
        if scaled < -(10**16):
            return f"decay rate too extreme (less than -0.01): {shown}"
        # params.go:1378 GetExponent: only the tabulated decay rates have an exponent
        if get_chain_decimal_value(p.decay_rate) not in (
            decimal.Decimal("-0.000475"),
            decimal.Decimal("-0.000001"),
            decimal.Decimal("0.0001"),
            decimal.Decimal(0),
        ):
            return f"decay rate does not have exponent defined {shown}"
        return ""

    check_decimal(
        "bitcoin_reward_params.decay_rate", p.decay_rate, "invalid decay_rate", decay_rule
    )

    # params.go:1136 validateBonusFactor
    def bonus_rule(scaled: int) -> str:
        return (
            f"bonus factor cannot be negative: {get_legacy_dec_string(scaled)}"
            if scaled < 0
            else ""
        )

    for name in (
        "utilization_bonus_factor",
        "full_coverage_bonus_factor",
        "partial_coverage_bonus_factor",
    ):
        check_decimal(
            f"bitcoin_reward_params.{name}", getattr(p, name), f"invalid {name}", bonus_rule
        )


def _validate_epoch_params(p: EpochParams) -> None:
    # params.go:591 EpochParams.Validate
    checks: tuple[tuple[str, bool, str], ...] = (
        ("epoch_length", p.epoch_length <= 0, "epoch length must be positive"),
        ("epoch_multiplier", p.epoch_multiplier <= 0, "epoch multiplier must be positive"),
        (
            "default_unit_of_compute_price",
            p.default_unit_of_compute_price < 0,
            "default unit of compute price cannot be negative",
        ),
        ("poc_stage_duration", p.poc_stage_duration <= 0, "poc stage duration must be positive"),
        (
            "poc_exchange_duration",
            p.poc_exchange_duration < 0,
            "poc exchange duration cannot be negative",
        ),
        (
            "poc_validation_delay",
            p.poc_validation_delay < 0,
            "poc validation delay cannot be negative",
        ),
        (
            "poc_validation_duration",
            p.poc_validation_duration <= 0,
            "poc validation duration must be positive",
        ),
        (
            "set_new_validators_delay",
            p.set_new_validators_delay < 0,
            "set new validators delay cannot be negative",
        ),
        (
            "inference_validation_cutoff",
            p.inference_validation_cutoff < 0,
            "inference validation cutoff cannot be negative",
        ),
        (
            "inference_pruning_epoch_threshold",
            p.inference_pruning_epoch_threshold < 1,
            "inference pruning epoch threshold must be at least 1",
        ),
        (
            "confirmation_poc_safety_window",
            p.confirmation_poc_safety_window < 0,
            "safety window cannot be negative",
        ),
    )
    for name, broken, text in checks:
        if broken:
            fail(f"epoch_params.{name}", text, getattr(p, name))


def _validate_collateral_params(p: CollateralParams) -> None:
    # params.go:880 CollateralParams.Validate (a nil Decimal panics in ToLegacyDec upstream)
    def fraction(kind: str) -> Callable[[int], str]:
        def rule(scaled: int) -> str:
            if scaled < 0 or scaled > LEGACY_ONE:
                return f"{kind} must be between 0 and 1, but is {get_legacy_dec_string(scaled)}"
            return ""

        return rule

    def base_weight_ratio(scaled: int) -> str:  # params.go:1021 validateBaseWeightRatio
        if scaled < 0:
            return f"base weight ratio cannot be negative: {get_legacy_dec_string(scaled)}"
        if scaled > LEGACY_ONE:
            return f"base weight ratio cannot be greater than 1: {get_legacy_dec_string(scaled)}"
        return ""

    def per_weight_unit(scaled: int) -> str:  # params.go:1041 validateCollateralPerWeightUnit
        if scaled < 0:
            return f"collateral per weight unit cannot be negative: {get_legacy_dec_string(scaled)}"
        return ""

    for name, rule in (
        ("slash_fraction_invalid", fraction("slash fraction")),  # params.go:1006
        ("slash_fraction_downtime", fraction("slash fraction")),
        ("downtime_missed_percentage_threshold", fraction("percentage")),  # params.go:1081
        ("base_weight_ratio", base_weight_ratio),
        ("collateral_per_weight_unit", per_weight_unit),
    ):
        field = f"collateral_params.{name}"
        if not is_set(p, name):
            fail(field, GO_NIL_DEREFERENCE, None)
        check_decimal(field, getattr(p, name), f"invalid {name}", rule)


def _validate_dynamic_pricing_params(p: DynamicPricingParams) -> None:
    # params.go:940 DynamicPricingParams.Validate: nil Decimals
    require_decimals(
        p,
        "dynamic_pricing_params",
        (
            ("stability_zone_lower_bound", "stability zone lower bound cannot be nil"),
            ("stability_zone_upper_bound", "stability zone upper bound cannot be nil"),
            ("price_elasticity", "price elasticity cannot be nil"),
        ),
    )
    # params.go:1160 validateStabilityZoneBound (shopspring values, no LegacyDec)
    for name in ("stability_zone_lower_bound", "stability_zone_upper_bound"):
        bound: Decimal = getattr(p, name)
        value = get_chain_decimal_value(bound)
        if value < 0 or value > 1:
            fail(
                f"dynamic_pricing_params.{name}",
                f"invalid {name}: stability zone bound must be between 0.0 and 1.0, got: "
                f"{get_shopspring_string(bound)}",
                value,
            )
    # params.go:1176 validatePriceElasticity
    elasticity = get_chain_decimal_value(p.price_elasticity)
    if elasticity <= 0 or elasticity > 1:
        fail(
            "dynamic_pricing_params.price_elasticity",
            "invalid price_elasticity: price elasticity must be between 0.0 and 1.0, got: "
            f"{get_shopspring_string(p.price_elasticity)}",
            elasticity,
        )
    # params.go:1192 validateUtilizationWindowDuration
    duration = p.utilization_window_duration
    field = "dynamic_pricing_params.utilization_window_duration"
    wrap = "invalid utilization_window_duration"
    if duration == 0:
        fail(field, f"{wrap}: utilization window duration must be greater than 0", duration)
    if duration > 3600:
        fail(
            field,
            f"{wrap}: utilization window duration must not exceed 3600 seconds (1 hour), got: "
            f"{duration}",
            duration,
        )
    blocks = compute_window_blocks(duration)
    if blocks > MAX_ROLLING_WINDOW_BLOCKS:
        fail(
            field,
            f"{wrap}: utilization window duration ({duration} seconds) results in {blocks} blocks, "
            f"which exceeds the maximum of {MAX_ROLLING_WINDOW_BLOCKS} blocks",
            duration,
        )
    # params.go:1229 validatePerTokenPrice
    for name in ("min_per_token_price", "base_per_token_price"):
        if getattr(p, name) == 0:
            fail(
                f"dynamic_pricing_params.{name}",
                f"invalid {name}: per-token price must be greater than 0",
                0,
            )
    # params.go:978 DynamicPricingParams.Validate: lower bound < upper bound
    lower = get_chain_decimal_value(p.stability_zone_lower_bound)
    upper = get_chain_decimal_value(p.stability_zone_upper_bound)
    if lower >= upper:
        fail(
            "dynamic_pricing_params.stability_zone_lower_bound",
            f"stability zone lower bound ({get_shopspring_string(p.stability_zone_lower_bound)}) "
            f"must be less than upper bound ({get_shopspring_string(p.stability_zone_upper_bound)})",
            lower,
        )


def compute_window_blocks(window_seconds: int) -> int:
    """Upstream ``SecondsToBlocks`` (params.go:72): whole 5-second blocks, at least 1."""
    return max(window_seconds // DYNAMIC_PRICING_ESTIMATED_BLOCK_SECONDS, 1)


def _validate_bandwidth_limits_params(p: BandwidthLimitsParams) -> None:
    # params.go:988 BandwidthLimitsParams.Validate
    for name in ("kb_per_input_token", "kb_per_output_token"):
        if not p.HasField(name):
            fail(f"bandwidth_limits_params.{name}", f"{name} cannot be nil", None)
    # params.go:1212 validateInvalidationsSamplePeriod
    period = p.invalidations_sample_period
    field = "bandwidth_limits_params.invalidations_sample_period"
    wrap = "invalid invalidations_sample_period"
    if period == 0:
        fail(field, f"{wrap}: invalidations sample period must be greater than 0", period)
    blocks = compute_window_blocks(period)
    if blocks > MAX_ROLLING_WINDOW_BLOCKS:
        fail(
            field,
            f"{wrap}: invalidations sample period ({period} seconds) results in {blocks} blocks, "
            f"which exceeds the maximum of {MAX_ROLLING_WINDOW_BLOCKS} blocks",
            period,
        )


def _validate_poc_params(p: PocParams) -> None:
    # params.go:761 PocParams.Validate
    bps = p.validation_vote_threshold_bps
    if bps != 0 and (bps < 5000 or bps > 10000):
        fail(
            "poc_params.validation_vote_threshold_bps",
            "poc_params.validation_vote_threshold_bps must be 0 (default) or in [5000, 10000]",
            bps,
        )
    seen: set[str] = set()
    for i, model in enumerate(p.models):
        if model.model_id:
            if model.model_id in seen:
                fail(
                    f"poc_params.models[{i}].model_id",
                    f"poc_params.models contains duplicate model_id {get_go_quoted(model.model_id)}",
                    model.model_id,
                )
            seen.add(model.model_id)
        if model.seq_len < 0:
            fail(
                f"poc_params.models[{i}].seq_len",
                "poc_params.models.seq_len cannot be negative",
                model.seq_len,
            )


def _validate_devshard_escrow_params(p: DevshardEscrowParams) -> None:
    # params.go:452 DevshardEscrowParams.Validate
    prefix = "devshard_escrow_params"
    if p.min_amount == 0:
        fail(f"{prefix}.min_amount", "devshard escrow min_amount must be positive", 0)
    if p.max_amount < p.min_amount:
        fail(
            f"{prefix}.max_amount",
            f"devshard escrow max_amount ({p.max_amount}) must be >= min_amount ({p.min_amount})",
            p.max_amount,
        )
    if p.group_size == 0:
        fail(f"{prefix}.group_size", "devshard escrow group_size must be positive", 0)
    if p.max_nonce == 0:
        fail(f"{prefix}.max_nonce", "devshard escrow max_nonce must be positive", 0)
    # params.go:465 DevshardEscrowParams.Validate: approved_versions
    seen: set[str] = set()
    for i, version in enumerate(p.approved_versions):
        at = f"{prefix}.approved_versions[{i}]"
        for name in ("name", "binary", "sha256"):
            if not getattr(version, name):
                fail(f"{at}.{name}", f"{at}: {name} cannot be empty", "")
        size = len(version.sha256.encode("utf-8"))
        if size != 64:
            fail(
                f"{at}.sha256",
                f"{at}: sha256 must be 64 hex characters, got {size}",
                version.sha256,
            )
        hex_error = get_hex_error(version.sha256)
        if hex_error:
            fail(f"{at}.sha256", f"{at}: sha256 is not valid hex: {hex_error}", version.sha256)
        if version.name in seen:
            fail(
                f"{at}.name",
                f"{prefix}.approved_versions: duplicate name {get_go_quoted(version.name)}",
                version.name,
            )
        seen.add(version.name)
    # params.go:487 DevshardEscrowParams.Validate: timeouts, rate, vote factor
    if p.refusal_timeout <= 0:
        fail(
            f"{prefix}.refusal_timeout",
            "devshard escrow refusal_timeout must be positive",
            p.refusal_timeout,
        )
    if p.execution_timeout <= 0:
        fail(
            f"{prefix}.execution_timeout",
            "devshard escrow execution_timeout must be positive",
            p.execution_timeout,
        )
    if p.validation_rate > 10000:
        fail(
            f"{prefix}.validation_rate",
            f"devshard escrow validation_rate ({p.validation_rate}) must be <= 10000 basis points",
            p.validation_rate,
        )
    if p.vote_threshold_factor == 0 or p.vote_threshold_factor > 100:
        fail(
            f"{prefix}.vote_threshold_factor",
            f"devshard escrow vote_threshold_factor ({p.vote_threshold_factor}) must be in (0, 100]",
            p.vote_threshold_factor,
        )


def _validate_delegation_params(p: DelegationParams) -> None:
    # params.go:709 Params.Validate: delegation params
    if p.deploy_window < 0:
        fail(
            "delegation_params.deploy_window",
            "delegation deploy_window cannot be negative",
            p.deploy_window,
        )
    if p.v_min < 0:
        fail("delegation_params.v_min", "delegation v_min cannot be negative", p.v_min)
    # params.go:521 validateDecimalFraction: nil and exactly {0,0} pass
    for name in (
        "refusal_penalty",
        "no_participation_penalty",
        "delegation_share",
        "w_threshold",
        "cap_factor",
    ):
        if not p.HasField(name):
            continue
        d: Decimal = getattr(p, name)
        if d.value == 0 and d.exponent == 0:
            continue
        label = f"delegation {name}"
        scaled, error = compute_legacy_dec(d)
        if error:
            fail(
                f"delegation_params.{name}",
                f"{label}: invalid decimal: {error}",
                get_chain_decimal_value(d),
            )
        if scaled < 0 or scaled > LEGACY_ONE:
            fail(
                f"delegation_params.{name}",
                f"{label} must be between 0 and 1, got {get_legacy_dec_string(scaled)}",
                get_chain_decimal_value(d),
            )


def _validate_fee_params(p: FeeParams) -> None:
    # fee_params.go:17 FeeParams.Validate
    if p.min_gas_price_ngonka > MAX_MIN_GAS_PRICE_NGONKA:
        fail(
            "fee_params.min_gas_price_ngonka",
            f"min_gas_price_ngonka {p.min_gas_price_ngonka} exceeds safety limit of 1,000,000",
            p.min_gas_price_ngonka,
        )


def _validate_maintenance_params(p: MaintenanceParams) -> None:
    # params.go:413 MaintenanceParams.Validate
    prefix = "maintenance_params"
    bound = MAX_MAINTENANCE_BLOCKS_PARAM
    window = p.maintenance_max_window_blocks
    if window == 0:
        fail(
            f"{prefix}.maintenance_max_window_blocks",
            "maintenance max window blocks must be positive",
            0,
        )
    if window > bound:
        fail(
            f"{prefix}.maintenance_max_window_blocks",
            f"maintenance max window blocks ({window}) exceeds safe upper bound {bound}",
            window,
        )
    lead = p.maintenance_min_schedule_lead_blocks
    if lead > bound:
        fail(
            f"{prefix}.maintenance_min_schedule_lead_blocks",
            f"maintenance min schedule lead blocks ({lead}) exceeds safe upper bound {bound}",
            lead,
        )
    cap = p.maintenance_credit_cap_blocks
    if cap == 0:
        fail(
            f"{prefix}.maintenance_credit_cap_blocks",
            "maintenance credit cap blocks must be positive",
            0,
        )
    if cap > bound:
        fail(
            f"{prefix}.maintenance_credit_cap_blocks",
            f"maintenance credit cap blocks ({cap}) exceeds safe upper bound {bound}",
            cap,
        )
    if p.maintenance_max_concurrent_validators == 0:
        fail(
            f"{prefix}.maintenance_max_concurrent_validators",
            "maintenance max concurrent validators must be positive",
            0,
        )
    if p.maintenance_max_concurrent_power_bps > 10000:
        fail(
            f"{prefix}.maintenance_max_concurrent_power_bps",
            "maintenance max concurrent power bps cannot exceed 10000",
            p.maintenance_max_concurrent_power_bps,
        )
    earn = p.maintenance_credit_earn_per_successful_epoch_blocks
    field = f"{prefix}.maintenance_credit_earn_per_successful_epoch_blocks"
    if earn == 0:
        fail(
            field,
            "maintenance credit earn per successful epoch blocks must be positive "
            "(set maintenance_enabled=false to disable maintenance windows)",
            0,
        )
    if earn > cap:
        fail(
            field,
            f"maintenance credit earn per successful epoch blocks ({earn}) must not exceed credit "
            f"cap ({cap})",
            earn,
        )
