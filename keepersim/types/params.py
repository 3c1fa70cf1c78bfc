"""Module params: the chain's ``Params`` and keepersim's ``ExtensionParams``, side by side.

A run's params are a ``keepersim.v1.ModuleParams``: ``params`` is the chain's own
``inference.inference.Params`` (every field; keepersim reads the epoch timing, the validation
params' expiry, reputation inputs and downtime SPRT), ``extension_params`` is what the chain lacks
(the #942 breaker's ``cb_*``, reputation-weighted selection, the SPRT switch and the health
policies). Their JSON is ``{"params": {...}, "extension_params": {...}}``, and dotted paths
(governance ``set``, sweeps, error fields) start at that root: ``params.validation_params.
expiration_blocks``, ``extension_params.health_params.windowed.window``.

Validation is the chain's own (:func:`validate_chain_params`, upstream ``Params.Validate``) plus
what keepersim needs to run them, each rejection naming the field and the rule it breaks; nothing
is silently replaced by a default. The one default the chain itself applies is kept: a ``cb_*``
of 0 means the #942 default (:func:`get_cb_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal as PyDecimal
from typing import Any

from google.protobuf import json_format

from keepersim.types.bech32 import GOV_AUTHORITY as GOV_AUTHORITY  # re-exported
from keepersim.types.chain_decimal import get_chain_decimal_value
from keepersim.types.chain_defaults import get_chain_default_params, get_chain_mainnet_params
from keepersim.types.chain_params import validate_chain_params
from keepersim.types.devshard_params import validate_devshard_params
from keepersim.types.errors import InvalidParamsError
from keepersim.types.messages import Decimal, Params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import (
    ConsecutiveParams,
    ExtensionParams,
    HealthParams,
    ModuleParams,
    TrinAdditiveParams,
    TrinMultiplicativeParams,
    WindowedParams,
)
from keepersim.types.policies import POLICY_NAMES as POLICY_NAMES  # re-exported

PUSHBACK_OUTCOMES = ("declined", "miss")
#: The SPRT's running LLRs are Decimals with 12 fractional digits, as the chain stores its
#: ``Ln(precision 12)`` results; params Decimals are in the chain's shortest form instead.
DECIMAL_EXPONENT = -12


def get_decimal_value(d: Decimal) -> PyDecimal:
    return get_chain_decimal_value(d)


@dataclass(frozen=True, slots=True)
class CbSettings:
    """The #942 breaker's effective values: a ``cb_*`` param of 0 reads as its default."""

    miss_threshold_pct: int
    min_samples: int
    initial_cooldown_blocks: int
    max_cooldown_blocks: int


#: gonka-ai/gonka 6a468b08 x/inference/keeper/circuit_breaker.go: the defaults behind 0.
CB_DEFAULTS = CbSettings(
    miss_threshold_pct=25, min_samples=4, initial_cooldown_blocks=50, max_cooldown_blocks=500
)


def get_cb_settings(ext: ExtensionParams) -> CbSettings:
    """The breaker's values as upstream reads them: 0 means "use the default"."""
    d = CB_DEFAULTS
    return CbSettings(
        miss_threshold_pct=ext.cb_miss_threshold_pct or d.miss_threshold_pct,
        min_samples=ext.cb_min_samples or d.min_samples,
        initial_cooldown_blocks=ext.cb_initial_cooldown_blocks or d.initial_cooldown_blocks,
        max_cooldown_blocks=ext.cb_max_cooldown_blocks or d.max_cooldown_blocks,
    )


def get_default_extension_params() -> ExtensionParams:
    """keepersim's defaults: the #942 breaker's (25% / 4 / 50 / 500), selection by weight alone,
    the chain's SPRT on, and the gonka breaker as the health policy."""
    return ExtensionParams(
        cb_miss_threshold_pct=CB_DEFAULTS.miss_threshold_pct,
        cb_min_samples=CB_DEFAULTS.min_samples,
        cb_initial_cooldown_blocks=CB_DEFAULTS.initial_cooldown_blocks,
        cb_max_cooldown_blocks=CB_DEFAULTS.max_cooldown_blocks,
        # Upstream selects by weight alone (gonka-ai/gonka ee730031,
        # x/inference/epochgroup/random.go selectRandomParticipant) and uses reputation only
        # for validation sampling (calculations/should_validate.go). Selecting by weight x
        # reputation is the fork's unmerged PR #8: an option, off as on the chain.
        reputation_weighting=False,
        sprt_enabled=True,
        health_params=get_default_health_params(),
    )


def get_default_params() -> ModuleParams:
    """The chain's code defaults (``DefaultParams()`` at ee730031) with keepersim's defaults."""
    return ModuleParams(
        params=get_chain_default_params(), extension_params=get_default_extension_params()
    )


def get_mainnet_params() -> ModuleParams:
    """The live network's params (epochs 247-252) after the v0.2.13 and v0.2.14 upgrades
    (15,391-block epochs, expiry 150, downtime SPRT 0.98 / 0.99 / 100: effectively off;
    docs/design/mainnet-preset.md)."""
    return ModuleParams(
        params=get_chain_mainnet_params(), extension_params=get_default_extension_params()
    )


def get_default_health_params() -> HealthParams:
    """Each policy with its seed's defaults; durations in blocks at ~5 s per block."""
    return HealthParams(
        policy="gonka",
        shadow=False,
        # SMG: --cb-failure-threshold 5 --cb-success-threshold 2 --cb-timeout-duration-secs 30.
        consecutive=ConsecutiveParams(
            failure_threshold=5, success_threshold=2, timeout_blocks=6, fallback_when_all_open=False
        ),
        # trin as shipped: start 200, [0, 400], 15-minute window, +5 / -10 / -2.
        trin_additive=TrinAdditiveParams(
            initial_score=200,
            max_score=400,
            window_blocks=180,
            success_delta=5,
            miss_delta=-10,
            pushback_delta=-2,
            fallback_when_all_zero=False,
        ),
        # trin proposal: last 16 offers, x2 per 5 idle minutes, capped at 2^4.
        trin_multiplicative=TrinMultiplicativeParams(
            history=16, recency_blocks=60, max_recency_doublings=4
        ),
        # keepersim windowed: healthy nodes miss ~1%, the oracle's line is 5%. The gate (baseline
        # 7%, z 2.5) alone, sliding over 300 outcomes, excludes a node at p=1% 0.2% of the time,
        # 3% 2%, 5% 18%, 7% 49%, 10% 90% (median after 78 outcomes), 15% after 33, 30% after 6.
        # Baseline 5 excluded the 5% node 44% of the time: on the built-in suite (5 seeds) it cut
        # misses by 1-3% but put 2-6x gonka's false exclusion on mainnet_like and gradual.
        # Overdue = max(10, 3 x slowest recent latency). Issue 16's tuning (docs/policies.md,
        # "Research log"; docs/results/windowed-tuning): the cap 60 / panic 30 (the saturation
        # guard protects capacity-limited fleets), one probe in flight, re-admission after 3
        # clean probe outcomes, an 8-outcome second gate scale, strikes until a proven recovery,
        # a 200-block cooldown cap once a node has proven one, and incidents of 300 blocks.
        # Then suspicion weighting (a 10% prior of bad nodes, 1% misses when healthy against
        # 15% when bad: the median oracle efficiency 0.74 -> 0.87 on seeds 1-2, where 2% / 15%
        # gave 0.83 and 2% / 30% 0.78) and the recovered cap 200 -> 100 (flapping's false
        # exclusion -0.4 points, no miss lost; 50 gave the same). Then probing by weight (10%,
        # no probe cap: shared_outage's false exclusion 1.18 -> 0.59 on seeds 1-2, median
        # efficiency 0.82 -> 0.88), which made probes cheap enough for a 400-block cooldown cap
        # (flapping's false exclusion 1.26 -> 0.77 on seeds 3-5; 300 gave 0.46 at 0.02 less
        # steady_degraded efficiency).
        windowed=WindowedParams(
            window=32,
            baseline_miss_pct=7,
            confidence_z_milli=2500,
            min_samples=4,
            initial_cooldown_blocks=100,
            max_cooldown_blocks=400,
            jitter_pct=20,
            max_probes=1,
            ramp_blocks=150,
            max_excluded_weight_pct=60,
            panic_healthy_weight_pct=30,
            overdue_min_blocks=10,
            overdue_factor=3,
            ramp_start_pct=10,
            saturation_pct=50,
            readmit_successes=3,
            short_window=8,
            incident_blocks=300,
            strikes_until_proven=True,
            recovered_max_cooldown_blocks=100,
            suspicion_prior_pct=10,
            suspicion_good_miss_pct=1,
            suspicion_bad_miss_pct=15,
            probe_weight_pct=10,
        ),
    )


PRESETS = {"default": get_default_params, "mainnet": get_mainnet_params}


def get_preset_params(name: str) -> ModuleParams:
    if name not in PRESETS:
        raise InvalidParamsError("preset", f"one of {sorted(PRESETS)}", name)
    return PRESETS[name]()


def params_to_dict(params: ModuleParams) -> dict[str, Any]:
    """``{"params": {...}, "extension_params": {...}}`` (proto field names, every field)."""
    return json_format.MessageToDict(
        params, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def params_from_dict(data: dict[str, Any]) -> ModuleParams:
    """Parse ``{"params": ..., "extension_params": ...}`` (unknown fields are an error naming
    them)."""
    try:
        return json_format.ParseDict(data, ModuleParams())
    except json_format.ParseError as exc:
        raise InvalidParamsError("params", "well-formed ModuleParams JSON", str(exc)) from exc


def _require(ok: bool, field: str, rule: str, value: object) -> None:
    if not ok:
        raise InvalidParamsError(field, rule, value)


def validate_params(params: ModuleParams) -> None:
    """Check every field; raise InvalidParamsError naming the first rule broken."""
    _require(params.HasField("params"), "params", "set", None)
    _require(params.HasField("extension_params"), "extension_params", "set", None)
    validate_module_params(params.params, params.extension_params)


def validate_module_params(chain: Params, ext: ExtensionParams) -> None:
    """The chain's own rules on ``chain``, then what keepersim needs to run the pair."""
    try:
        validate_chain_params(chain)
    except InvalidParamsError as exc:
        raise InvalidParamsError("params." + exc.field, exc.rule, exc.value) from exc
    validate_run_params(chain, ext.sprt_enabled)
    validate_extension_params(ext)


def validate_run_params(chain: Params, sprt_enabled: bool) -> None:
    """keepersim's rules on the chain's params it reads (the chain's own are weaker here)."""
    v = chain.validation_params
    f = "params.validation_params."
    _require(v.expiration_blocks > 0, f + "expiration_blocks", "> 0", v.expiration_blocks)
    _require(v.epochs_to_max >= 1, f + "epochs_to_max", ">= 1", v.epochs_to_max)
    cutoff = get_decimal_value(v.miss_percentage_cutoff)
    _require(0 <= cutoff <= 1, f + "miss_percentage_cutoff", "in [0, 1]", str(cutoff))
    penalty = get_decimal_value(v.miss_requests_penalty)
    _require(penalty >= 0, f + "miss_requests_penalty", ">= 0", str(penalty))
    if sprt_enabled:
        p0 = get_decimal_value(v.downtime_good_percentage)
        p1 = get_decimal_value(v.downtime_bad_percentage)
        _require(0 < p0 < 1, f + "downtime_good_percentage", "0 < p0 < 1", str(p0))
        _require(0 < p1 < 1, f + "downtime_bad_percentage", "0 < p1 < 1", str(p1))
        # good = bad is what mainnet holds at epoch 386 (gonka issue #1726): the chain's
        # NewSPRT (x/inference/calculations/sprt.go at ee730031) accepts any p0, p1 in (0, 1),
        # and with p0 = p1 both log ratios are 0, so the SPRT never fires. good > bad is
        # refused: it would deactivate for passing.
        _require(p0 <= p1, f + "downtime_bad_percentage", "good <= bad", str(p1))
        h = get_decimal_value(v.downtime_h_threshold)
        _require(h > 0, f + "downtime_h_threshold", "> 0", str(h))
    # The chain's own rules (validate_chain_params) already require a positive epoch and PoC
    # stages that are not negative; keepersim collapses the stages into the epoch's first blocks.
    e = chain.epoch_params
    poc_total = (
        e.poc_stage_duration
        + e.poc_validation_delay
        + e.poc_validation_duration
        + e.set_new_validators_delay
    )
    _require(
        poc_total < e.epoch_length,
        "params.epoch_params",
        "PoC stages together shorter than epoch_length",
        poc_total,
    )


def validate_extension_params(ext: ExtensionParams) -> None:
    f = "extension_params."
    cb = get_cb_settings(ext)
    _require(
        1 <= cb.miss_threshold_pct <= 100,
        f + "cb_miss_threshold_pct",
        "in [1, 100] (0: the default 25)",
        ext.cb_miss_threshold_pct,
    )
    _require(
        ext.cb_initial_cooldown_blocks >= 0,
        f + "cb_initial_cooldown_blocks",
        ">= 0 (0: the default 50)",
        ext.cb_initial_cooldown_blocks,
    )
    _require(
        ext.cb_max_cooldown_blocks >= 0,
        f + "cb_max_cooldown_blocks",
        ">= 0 (0: the default 500)",
        ext.cb_max_cooldown_blocks,
    )
    _require(
        cb.max_cooldown_blocks >= cb.initial_cooldown_blocks,
        f + "cb_max_cooldown_blocks",
        ">= cb_initial_cooldown_blocks (after defaults)",
        ext.cb_max_cooldown_blocks,
    )
    _require(ext.HasField("health_params"), f + "health_params", "set", None)
    validate_health_params(ext.health_params)
    validate_devshard_params(ext.devshard_params)


def validate_health_params(h: HealthParams) -> None:
    _require(
        h.policy in POLICY_NAMES,
        "extension_params.health_params.policy",
        f"one of {POLICY_NAMES}",
        h.policy,
    )
    validate_consecutive_params(h.consecutive)
    validate_trin_additive_params(h.trin_additive)
    validate_trin_multiplicative_params(h.trin_multiplicative)
    validate_windowed_params(h.windowed)


def validate_consecutive_params(c: ConsecutiveParams) -> None:
    f = "extension_params.health_params.consecutive."
    _require(c.failure_threshold >= 1, f + "failure_threshold", ">= 1", c.failure_threshold)
    _require(c.success_threshold >= 1, f + "success_threshold", ">= 1", c.success_threshold)
    _require(c.timeout_blocks > 0, f + "timeout_blocks", "> 0", c.timeout_blocks)
    seen: set[str] = set()
    for i, o in enumerate(c.overrides):
        g = f"{f}overrides[{i}]."
        _require(bool(o.address), g + "address", "non-empty", o.address)
        _require(o.address not in seen, g + "address", "unique among overrides", o.address)
        seen.add(o.address)
        if o.HasField("failure_threshold"):
            _require(o.failure_threshold >= 1, g + "failure_threshold", ">= 1", o.failure_threshold)
        if o.HasField("success_threshold"):
            _require(o.success_threshold >= 1, g + "success_threshold", ">= 1", o.success_threshold)
        if o.HasField("timeout_blocks"):
            _require(o.timeout_blocks > 0, g + "timeout_blocks", "> 0", o.timeout_blocks)
        for outcome in o.pushback_outcomes:
            _require(
                outcome in PUSHBACK_OUTCOMES,
                g + "pushback_outcomes",
                f"each one of {PUSHBACK_OUTCOMES}",
                outcome,
            )
        _require(
            len(set(o.pushback_outcomes)) == len(o.pushback_outcomes),
            g + "pushback_outcomes",
            "no duplicates",
            list(o.pushback_outcomes),
        )


def validate_trin_additive_params(t: TrinAdditiveParams) -> None:
    f = "extension_params.health_params.trin_additive."
    _require(t.max_score > 0, f + "max_score", "> 0", t.max_score)
    _require(
        0 < t.initial_score <= t.max_score,
        f + "initial_score",
        "in (0, max_score]",
        t.initial_score,
    )
    _require(t.window_blocks > 0, f + "window_blocks", "> 0", t.window_blocks)
    _require(t.success_delta >= 0, f + "success_delta", ">= 0", t.success_delta)
    _require(t.miss_delta <= 0, f + "miss_delta", "<= 0", t.miss_delta)
    _require(t.pushback_delta <= 0, f + "pushback_delta", "<= 0", t.pushback_delta)


def validate_trin_multiplicative_params(t: TrinMultiplicativeParams) -> None:
    f = "extension_params.health_params.trin_multiplicative."
    _require(1 <= t.history <= 32, f + "history", "in [1, 32]", t.history)
    _require(t.recency_blocks > 0, f + "recency_blocks", "> 0", t.recency_blocks)
    _require(
        t.max_recency_doublings <= 16,
        f + "max_recency_doublings",
        "<= 16",
        t.max_recency_doublings,
    )


def validate_windowed_params(w: WindowedParams) -> None:
    f = "extension_params.health_params.windowed."
    _require(4 <= w.window <= 64, f + "window", "in [4, 64]", w.window)
    _require(
        1 <= w.baseline_miss_pct < 100, f + "baseline_miss_pct", "in [1, 99]", w.baseline_miss_pct
    )
    _require(
        500 <= w.confidence_z_milli <= 10000,
        f + "confidence_z_milli",
        "in [500, 10000] (z from 0.5 to 10)",
        w.confidence_z_milli,
    )
    _require(1 <= w.min_samples <= w.window, f + "min_samples", "in [1, window]", w.min_samples)
    _require(
        w.initial_cooldown_blocks > 0,
        f + "initial_cooldown_blocks",
        "> 0",
        w.initial_cooldown_blocks,
    )
    _require(
        w.max_cooldown_blocks >= w.initial_cooldown_blocks,
        f + "max_cooldown_blocks",
        ">= initial_cooldown_blocks",
        w.max_cooldown_blocks,
    )
    _require(w.jitter_pct <= 50, f + "jitter_pct", "<= 50", w.jitter_pct)
    _require(w.max_probes >= 1, f + "max_probes", ">= 1", w.max_probes)
    _require(
        w.probe_weight_pct <= 100,
        f + "probe_weight_pct",
        "in [0, 100] (0: probe at full weight, at most max_probes in flight)",
        w.probe_weight_pct,
    )
    _require(w.saturation_pct <= 100, f + "saturation_pct", "<= 100 (0: off)", w.saturation_pct)
    _require(
        w.readmit_successes <= w.window,
        f + "readmit_successes",
        "<= window (0: the whole window)",
        w.readmit_successes,
    )
    # (a short window at or above window, or below min_samples, adds nothing but is harmless)
    _require(w.short_window <= 64, f + "short_window", "<= 64 (0: off)", w.short_window)
    _require(w.incident_blocks >= 0, f + "incident_blocks", ">= 0 (0: off)", w.incident_blocks)
    _require(
        w.recovered_max_cooldown_blocks >= 0,
        f + "recovered_max_cooldown_blocks",
        ">= 0 (0: off)",
        w.recovered_max_cooldown_blocks,
    )
    _require(
        w.suspicion_prior_pct <= 99,
        f + "suspicion_prior_pct",
        "in [0, 99] (0: off)",
        w.suspicion_prior_pct,
    )
    if w.suspicion_prior_pct > 0:
        _require(
            1 <= w.suspicion_good_miss_pct < w.suspicion_bad_miss_pct,
            f + "suspicion_good_miss_pct",
            "in [1, suspicion_bad_miss_pct) when suspicion_prior_pct is set",
            w.suspicion_good_miss_pct,
        )
        _require(
            w.suspicion_bad_miss_pct <= 99,
            f + "suspicion_bad_miss_pct",
            "in (suspicion_good_miss_pct, 99] when suspicion_prior_pct is set",
            w.suspicion_bad_miss_pct,
        )
    _require(w.ramp_blocks >= 0, f + "ramp_blocks", ">= 0", w.ramp_blocks)
    _require(
        1 <= w.max_excluded_weight_pct <= 100,
        f + "max_excluded_weight_pct",
        "in [1, 100]",
        w.max_excluded_weight_pct,
    )
    _require(
        w.panic_healthy_weight_pct <= 100,
        f + "panic_healthy_weight_pct",
        "<= 100",
        w.panic_healthy_weight_pct,
    )
    _require(w.overdue_min_blocks >= 1, f + "overdue_min_blocks", ">= 1", w.overdue_min_blocks)
    _require(w.overdue_factor >= 1, f + "overdue_factor", ">= 1", w.overdue_factor)
    _require(1 <= w.ramp_start_pct <= 100, f + "ramp_start_pct", "in [1, 100]", w.ramp_start_pct)
