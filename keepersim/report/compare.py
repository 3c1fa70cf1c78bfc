"""The comparison report, made from the run records alone (:mod:`keepersim.runs.compare` runs
them): the paired measures per run, the aggregates per scenario and policy, the table, and the
files ``report.json``, ``runs.csv``, ``summary.csv``, ``table.txt`` and PNG plots.

``oracle_efficiency`` is paired: ``(misses_none - misses_policy) / (misses_none - misses_oracle)``
on the same (scenario, seed) (NaN, written as null, when the oracle avoids nothing).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keepersim.outputs import write_json_atomic, write_text_atomic
from keepersim.report.csv_rows import compute_flat_row, format_csv
from keepersim.report.inaction import compute_inaction_note
from keepersim.report.stats import (
    compute_bootstrap_interval,
    compute_oracle_efficiency,
    compute_t_interval,
    compute_wilson_interval,
    mean_or_none,
)
from keepersim.report.tables import format_baselines_line, format_summary_table
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import NO_POLICY, ORACLE, is_baseline

__all__ = [
    "REPORT_VERSION",
    "SPEC_RUN_KEYS",
    "ComparedRuns",
    "compute_compare_report",
    "format_compare_table",
    "write_compare_report",
]

REPORT_VERSION = 1
#: Keys every run record carries (shared/spec/scenario-format.md, "What a run reports").
SPEC_RUN_KEYS = (
    "scenario",
    "policy",
    "seed",
    "inferences",
    "misses",
    "miss_rate",
    "fallback_selections",
    "false_exclusion_weight_share",
    "oracle_efficiency",
    "app_hash",
)
_NESTED_RUN_KEYS = ("timeline", "participants")


@dataclass(frozen=True)
class ComparedRuns:
    """What a comparison ran (:func:`keepersim.runs.compare.run_compare`): the report's input.

    ``scenarios``: the labels; ``policies``: in table order, baselines included; ``records``: one
    run record per (scenario, seed, policy); ``mechanisms``: what every run has besides its
    policy (:func:`~keepersim.sim.run_genesis.compute_run_mechanisms`); ``policy_params``: the params
    each non-baseline policy ran with, by (label, policy), for the inaction notes."""

    scenarios: list[str]
    policies: list[str]
    seeds: int
    store: str
    jobs: int
    mechanisms: Mapping[str, str]
    records: list[dict[str, Any]]
    wall_seconds: float
    policy_params: Mapping[tuple[str, str], ModuleParams]


def _pooled(records: list[dict[str, Any]], key: str) -> list[int]:
    out: list[int] = []
    for r in records:
        for p in r["participants"]:
            out.extend(p[key])
    return out


def _median(values: list[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def _aggregate(
    label: str, policy: str, records: list[dict[str, Any]], efficiencies: list[float]
) -> dict[str, Any]:
    # Intervals: docs/metrics.md ("Intervals") says which method goes with which metric.
    miss_mean, miss_lo, miss_hi = compute_bootstrap_interval([r["miss_rate"] for r in records])
    pooled_rate, pooled_lo, pooled_hi = compute_wilson_interval(
        sum(r["misses"] for r in records), sum(r["inferences"] for r in records)
    )
    eff_mean, eff_lo, eff_hi = compute_t_interval(efficiencies)
    avoided_mean, avoided_lo, avoided_hi = compute_t_interval(
        [r["misses_avoided"] for r in records]
    )
    detection = _pooled(records, "detection_delays")
    recovery = _pooled(records, "recovery_delays")
    periods = sum(r["degraded_periods"] for r in records)
    undetected = sum(r["undetected_periods"] for r in records)
    undetected_share, undetected_lo, undetected_hi = compute_wilson_interval(undetected, periods)

    def mean(key: str) -> float | None:
        return mean_or_none(r[key] for r in records)

    def shares(key: str) -> dict[str, float | None]:
        share_mean, low, high = compute_bootstrap_interval([r[key] for r in records])
        return {f"{key}_mean": share_mean, f"{key}_ci_low": low, f"{key}_ci_high": high}

    return {
        "scenario": label,
        "policy": policy,
        "runs": len(records),
        "seeds": [r["seed"] for r in records],
        "inferences_mean": mean("inferences"),
        "misses_mean": mean("misses"),
        "miss_rate_mean": miss_mean,
        "miss_rate_ci_low": miss_lo,
        "miss_rate_ci_high": miss_hi,
        "miss_rate_pooled": pooled_rate,
        "miss_rate_pooled_ci_low": pooled_lo,
        "miss_rate_pooled_ci_high": pooled_hi,
        "oracle_efficiency_mean": eff_mean,
        "oracle_efficiency_ci_low": eff_lo,
        "oracle_efficiency_ci_high": eff_hi,
        "oracle_efficiency_per_seed": [None if math.isnan(e) else e for e in efficiencies],
        "misses_avoided_mean": avoided_mean,
        "misses_avoided_ci_low": avoided_lo,
        "misses_avoided_ci_high": avoided_hi,
        **shares("degraded_traffic_share"),
        **shares("false_exclusion_weight_share"),
        **shares("withheld_weight_share"),
        **shares("excluded_weight_share"),
        "detection_delay_median": _median(detection),
        "detection_delay_mean": float(statistics.fmean(detection)) if detection else None,
        "degraded_periods": periods,
        "undetected_share": undetected_share,
        "undetected_share_ci_low": undetected_lo,
        "undetected_share_ci_high": undetected_hi,
        "recovery_delay_median": _median(recovery),
        "recovery_delay_mean": float(statistics.fmean(recovery)) if recovery else None,
        "never_readmitted": sum(r["never_readmitted"] for r in records),
        "fallback_selections_mean": mean("fallback_selections"),
        "panic_selections_mean": mean("panic_selections"),
        "declines_mean": mean("declines"),
        "unserved_requests_mean": mean("unserved_requests"),
        "unassigned_requests_mean": mean("unassigned_requests"),
        "transitions_mean": mean("transitions"),
        "traffic_weight_distance_mean": mean("traffic_weight_distance"),
        # (r.get: a record from before gas has none)
        **{
            f"{key}_mean": mean_or_none(r.get(key) for r in records)
            for key in (
                "gas_total",
                "gas_per_inference",
                "gas_over_none",
                "gas_per_inference_over_none",
            )
        },
        "wall_seconds_mean": mean("wall_seconds"),
        "inferences_per_second_mean": mean("inferences_per_second"),
    }


def _add_inaction(
    row: dict[str, Any],
    mine: list[dict[str, Any]],
    scenario_records: list[dict[str, Any]],
    params: ModuleParams | None,
) -> None:
    """``acted`` and ``inaction`` (the reason in words, or None) of a summary row; ``params``:
    the policy's (None for a baseline)."""
    policy = row["policy"]
    acted, note = policy != NO_POLICY, None
    if params is not None:
        base = [r for r in scenario_records if r["policy"] == NO_POLICY]
        acted, note = compute_inaction_note(policy, mine, base, params)
    row["acted"] = acted
    row["inaction"] = note


def _add_run_intervals(records: list[dict[str, Any]]) -> None:
    """Per run: the Wilson interval of its miss rate (its own misses over its inferences)."""
    for r in records:
        _, low, high = compute_wilson_interval(r["misses"], r["inferences"])
        r["miss_rate_ci_low"] = low
        r["miss_rate_ci_high"] = high


def _add_pairing(records: list[dict[str, Any]]) -> None:
    """Per run: oracle_efficiency and misses_avoided against the same seed's baselines, and
    the gas it adds over ``none`` on that seed (gas_over_none, gas_per_inference_over_none)."""
    base: dict[tuple[str, int, str], dict[str, Any]] = {
        (r["scenario"], r["seed"], r["policy"]): r for r in records if is_baseline(r["policy"])
    }
    for r in records:
        none = base[(r["scenario"], r["seed"], NO_POLICY)]
        m_none = none["misses"]
        m_oracle = base[(r["scenario"], r["seed"], ORACLE)]["misses"]
        r["oracle_efficiency"] = compute_oracle_efficiency(m_none, r["misses"], m_oracle)
        r["misses_avoided"] = m_none - r["misses"]
        r["gas_over_none"] = compute_difference(r.get("gas_total"), none.get("gas_total"))
        r["gas_per_inference_over_none"] = compute_difference(
            r.get("gas_per_inference"), none.get("gas_per_inference")
        )


def compute_difference(value: float | None, base: float | None) -> float | None:
    """``value - base``; None if either is missing (a run without gas, or no inference)."""
    return None if value is None or base is None else value - base


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def compute_compare_report(runs: ComparedRuns) -> dict[str, Any]:
    """The report (the content of ``report.json``, without ``plots``): the records with their
    paired measures and intervals, a summary row per scenario and policy, the config."""
    records = runs.records
    _add_pairing(records)
    _add_run_intervals(records)
    summary: list[dict[str, Any]] = []
    for label in runs.scenarios:
        for policy in runs.policies:
            mine = [r for r in records if r["scenario"] == label and r["policy"] == policy]
            efficiencies = [float(r["oracle_efficiency"]) for r in mine]
            row = _aggregate(label, policy, mine, efficiencies)
            scenario_records = [r for r in records if r["scenario"] == label]
            params = runs.policy_params.get((label, policy))
            _add_inaction(row, mine, scenario_records, params)
            summary.append(row)
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "config": {
            "scenarios": list(runs.scenarios),
            "policies": list(runs.policies),
            "seeds": runs.seeds,
            "store": runs.store,
            "jobs": runs.jobs,
            **runs.mechanisms,
            "baselines": format_baselines_line(runs.mechanisms),
        },
        "wall_seconds": runs.wall_seconds,
        "summary": summary,
        "runs": records,
    }
    safe: dict[str, Any] = _json_safe(report)
    return safe


def format_compare_table(report: Mapping[str, Any]) -> str:
    """The summary table (``table.txt``, what ``keepersim compare`` prints), no final newline."""
    return format_summary_table(report["summary"], report["config"])


def write_compare_report(
    report: dict[str, Any], table: str, folder: Path, *, plots: bool = True
) -> None:
    """Write ``report.json``, ``runs.csv``, ``summary.csv``, ``table.txt`` (``table``) into
    ``folder`` and, with ``plots``, the PNG plots (their names go to ``report["plots"]``)."""
    write_json_atomic(folder / "report.json", report)
    for name in ("runs", "summary"):
        rows = [compute_flat_row(r, _NESTED_RUN_KEYS) for r in report[name]]
        write_text_atomic(folder / f"{name}.csv", format_csv(rows), newline="")
    write_text_atomic(folder / "table.txt", table + "\n")
    if plots:
        from keepersim.report.plots import write_plots

        report["plots"] = [p.name for p in write_plots(report, folder)]
        write_json_atomic(folder / "report.json", report)
