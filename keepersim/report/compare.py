"""Compare health policies on scenarios over several seeds, paired on the same request streams.

:func:`compare` runs every (scenario, policy, seed), always including the baselines ``none`` (no
health filter) and ``oracle`` (admits exactly the truly healthy), then aggregates per scenario
and policy, prints a table and writes ``report.json``, ``runs.csv``, ``summary.csv`` and PNG plots.

Seeds: a built-in scenario name is rebuilt for each seed ``1..N``
(``get_builtin_scenario(name, seed)``) and run with that seed, so both the fleet and the request
stream vary; a scenario file (or a :class:`Scenario`) keeps its fleet and runs with seeds
``scenario.seed + 0 .. scenario.seed + N - 1``. Every policy of one (scenario, seed) sees the same
fleet and the same request stream, which is what makes ``oracle_efficiency`` a paired measure:
``(misses_none - misses_policy) / (misses_none - misses_oracle)`` on the same seed (NaN, written
as null, when the oracle avoids nothing).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from keepersim.outputs import (
    check_output_folder,
    get_atomic_path,
    write_json_atomic,
    write_text_atomic,
)
from keepersim.report.inaction import compute_inaction_note
from keepersim.report.stats import (
    compute_bootstrap_interval,
    compute_oracle_efficiency,
    compute_t_interval,
    compute_wilson_interval,
    mean_or_none,
)
from keepersim.report.tables import format_baselines_line, format_summary_table
from keepersim.runs.engines import execute_runs, get_default_jobs
from keepersim.runs.sources import (
    BASELINES,
    CompareError,
    ScenarioSource,
    order_policies,
    resolve_scenarios,
)
from keepersim.runs.task import RunTask, make_task
from keepersim.sim.driver import (
    StoreKind,
    build_params,
    compute_run_mechanisms,
)
from keepersim.sim.scenario import Scenario, ScenarioError

__all__ = [
    "BASELINES",
    "REPORT_VERSION",
    "SPEC_RUN_KEYS",
    "CompareError",
    "compare",
    "order_policies",
    "resolve_scenarios",
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
        "wall_seconds_mean": mean("wall_seconds"),
        "inferences_per_second_mean": mean("inferences_per_second"),
    }


def _add_inaction(
    row: dict[str, Any],
    src: ScenarioSource,
    mine: list[dict[str, Any]],
    scenario_records: list[dict[str, Any]],
    reputation_weighting: bool,
) -> None:
    """``acted`` and ``inaction`` (the reason in words, or None) of a summary row."""
    policy = row["policy"]
    acted, note = policy != "none", None
    if policy not in BASELINES:
        params = build_params(src.get(0)[0], policy, reputation_weighting=reputation_weighting)
        base = [r for r in scenario_records if r["policy"] == "none"]
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
    """Per run: oracle_efficiency and misses_avoided against the same seed's baselines."""
    base: dict[tuple[str, int, str], int] = {
        (r["scenario"], r["seed"], r["policy"]): r["misses"]
        for r in records
        if r["policy"] in BASELINES
    }
    for r in records:
        m_none = base[(r["scenario"], r["seed"], "none")]
        m_oracle = base[(r["scenario"], r["seed"], "oracle")]
        r["oracle_efficiency"] = compute_oracle_efficiency(m_none, r["misses"], m_oracle)
        r["misses_avoided"] = m_none - r["misses"]


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _flatten(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _NESTED_RUN_KEYS:
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                out[f"{key}_{k}"] = v
        elif isinstance(value, list):
            out[key] = " ".join(str(v) for v in value)
        else:
            out[key] = value
    return out


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    with get_atomic_path(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def compare(
    scenarios: Sequence[Scenario | str | os.PathLike[str]],
    policies: Sequence[str],
    seeds: int = 3,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    store: StoreKind = "leveldb",
    progress: bool = True,
    jobs: int | None = None,
    plots: bool = True,
    stream: IO[str] | None = None,
    reputation_weighting: bool = False,
) -> dict[str, Any]:
    """Run and compare; return the report (the content of ``report.json``).

    ``scenarios``: built-in names, scenario files or :class:`Scenario` objects. ``policies``: the
    policies to compare (``none`` and ``oracle`` are always added). ``out_dir``: where the files
    go (None: nothing is written). ``jobs``: worker processes (default
    :func:`get_default_jobs`; 1 runs in this process). The table goes to ``stream`` (default
    stdout; pass ``io.StringIO()`` to silence it). ``reputation_weighting``: every run, baselines
    included, selects by weight x reputation (the fork's PR #8) instead of by weight alone; the
    report's ``config`` states the selection rule and SPRT's use
    (:func:`~keepersim.sim.driver.compute_run_mechanisms`), the table's first line says it in words.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise CompareError(f"seeds must be an integer >= 1, got {seeds!r}")
    jobs = get_default_jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise CompareError(f"jobs must be an integer >= 1, got {jobs!r}")
    if not scenarios:
        raise CompareError("no scenario given")
    folder = None if out_dir is None else check_output_folder(out_dir, "out_dir")
    ordered = order_policies(policies)
    try:
        sources = resolve_scenarios(scenarios)
    except ScenarioError as exc:
        raise CompareError(str(exc)) from exc
    override = {"extension_params.reputation_weighting": True} if reputation_weighting else {}
    tasks: list[RunTask] = []
    for src in sources:
        for i in range(seeds):
            scenario, seed = src.get(i)
            for policy in ordered:
                tasks.append(
                    make_task(scenario, policy, seed, label=src.label, params=override, store=store)
                )
    mechanisms = compute_run_mechanisms(
        sources[0].get(0)[0], reputation_weighting=reputation_weighting
    )
    started = time.perf_counter()
    records = execute_runs(tasks, jobs, progress)
    wall = time.perf_counter() - started
    _add_pairing(records)
    _add_run_intervals(records)
    summary: list[dict[str, Any]] = []
    for src in sources:
        for policy in ordered:
            mine = [r for r in records if r["scenario"] == src.label and r["policy"] == policy]
            efficiencies = [float(r["oracle_efficiency"]) for r in mine]
            row = _aggregate(src.label, policy, mine, efficiencies)
            scenario_records = [r for r in records if r["scenario"] == src.label]
            _add_inaction(row, src, mine, scenario_records, reputation_weighting)
            summary.append(row)
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "config": {
            "scenarios": [s.label for s in sources],
            "policies": ordered,
            "seeds": seeds,
            "store": store,
            "jobs": jobs,
            **mechanisms,
            "baselines": format_baselines_line(mechanisms),
        },
        "wall_seconds": wall,
        "summary": summary,
        "runs": records,
    }
    report = _json_safe(report)
    table = format_summary_table(report["summary"], report["config"])
    out = sys.stdout if stream is None else stream
    out.write(table + "\n")
    if folder is not None:
        write_json_atomic(folder / "report.json", report)
        _write_csv(folder / "runs.csv", [_flatten(r) for r in report["runs"]])
        _write_csv(folder / "summary.csv", [_flatten(r) for r in report["summary"]])
        write_text_atomic(folder / "table.txt", table + "\n")
        if plots:
            from keepersim.report.plots import write_plots

            report["plots"] = [p.name for p in write_plots(report, folder)]
            write_json_atomic(folder / "report.json", report)
    return report
