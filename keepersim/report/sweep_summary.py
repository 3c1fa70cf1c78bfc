"""A sweep's summary from its runs.csv rows: means and 95% CIs over seeds per (scenario,
policy, grid point), oracle efficiency paired on seeds with the baselines, and the table.

Intervals as compare's (docs/metrics.md): a percentile bootstrap for per-run rates and shares
(columns ending in ``_rate`` or ``_share``), a t-interval for everything else, Wilson for the
pooled miss rate. A policy row's baselines are the ``none`` / ``oracle`` rows of the same
scenario and seed whose grid cells match on the paths the baselines ran with (cells they left
empty match any value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from keepersim.report.stats import (
    compute_bootstrap_interval,
    compute_oracle_efficiency,
    compute_t_interval,
    compute_wilson_interval,
)
from keepersim.report.tables import format_table
from keepersim.types.policies import NO_POLICY, ORACLE

__all__ = [
    "SUMMARY_METRICS",
    "compute_short_names",
    "compute_sweep_summary",
    "format_sweep_table",
]

_ID = ("scenario", "policy", "seed", "status", "attempts", "error", "app_hash", "wall_seconds")
#: Metrics the table shows (the CSV has every numeric column).
SUMMARY_METRICS = (
    "miss_rate",
    "oracle_efficiency",
    "false_exclusion_weight_share",
    "withheld_weight_share",
    "excluded_weight_share",
    "fallback_selections",
)


def compute_short_names(paths: Sequence[str]) -> dict[str, str]:
    """Each grid path by its shortest dotted suffix that no other path ends with (for table
    heads and plot axes; files keep the whole path)."""
    out: dict[str, str] = {}
    for path in paths:
        parts = path.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != path and (o == tail or o.endswith("." + tail)) for o in paths):
                out[path] = tail
                break
        else:  # pragma: no cover - paths are unique
            out[path] = path
    return out


def _number(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _metric_columns(header: Sequence[str], paths: Sequence[str]) -> list[str]:
    return [c for c in header if c not in _ID and c not in paths]


def _matches(baseline: dict[str, str], row: dict[str, str], paths: Sequence[str]) -> bool:
    return all(baseline.get(p, "") in ("", row.get(p, "")) for p in paths)


def _find_baseline(
    rows: Sequence[dict[str, str]], row: dict[str, str], policy: str, paths: Sequence[str]
) -> dict[str, str] | None:
    for b in rows:
        if (
            b["policy"] == policy
            and b["scenario"] == row["scenario"]
            and b["seed"] == row["seed"]
            and _matches(b, row, paths)
        ):
            return b
    return None


def _efficiency(
    rows: Sequence[dict[str, str]], row: dict[str, str], paths: Sequence[str]
) -> float | None:
    none = _find_baseline(rows, row, NO_POLICY, paths)
    oracle = _find_baseline(rows, row, ORACLE, paths)
    if none is None or oracle is None:
        return None
    values = [_number(r.get("misses")) for r in (none, row, oracle)]
    if any(v is None for v in values):
        return None
    m_none, m_policy, m_oracle = (int(v) for v in values if v is not None)
    eff = compute_oracle_efficiency(m_none, m_policy, m_oracle)
    return None if math.isnan(eff) else eff


def compute_sweep_summary(
    header: Sequence[str], rows: Sequence[dict[str, str]], paths: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per (scenario, policy, grid cells), in first-seen order (``runs``: the finished
    runs aggregated, ``failed``: the failed ones)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    metrics = _metric_columns(header, paths)
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for r in ok:
        key = (r["scenario"], r["policy"], *(r.get(p, "") for p in paths))
        groups.setdefault(key, []).append(r)
    failed: dict[tuple[str, ...], int] = {}
    for r in rows:
        if r.get("status") != "ok":
            key = (r["scenario"], r["policy"], *(r.get(p, "") for p in paths))
            failed[key] = failed.get(key, 0) + 1
    for key in failed:
        groups.setdefault(key, [])  # every run of it failed: a row that says so
    out: list[dict[str, Any]] = []
    for key, members in groups.items():
        summary: dict[str, Any] = {"scenario": key[0], "policy": key[1]}
        summary.update(dict(zip(paths, key[2:], strict=True)))
        summary["runs"] = len(members)
        summary["failed"] = failed.get(key, 0)
        summary["seeds"] = " ".join(r["seed"] for r in members)
        for metric in metrics:
            values = [_number(r.get(metric)) for r in members]
            if all(v is None for v in values):
                continue
            bounded = metric.endswith(("_rate", "_share"))
            interval = compute_bootstrap_interval if bounded else compute_t_interval
            mean, low, high = interval(values)
            summary[f"{metric}_mean"] = mean
            summary[f"{metric}_ci_low"] = low
            summary[f"{metric}_ci_high"] = high
        misses = [_number(r.get("misses")) for r in members]
        inferences = [_number(r.get("inferences")) for r in members]
        if all(v is not None for v in misses + inferences):
            total = int(sum(v for v in inferences if v is not None))
            hit = int(sum(v for v in misses if v is not None))
            pooled, low, high = compute_wilson_interval(hit, total)
            summary["miss_rate_pooled"] = pooled
            summary["miss_rate_pooled_ci_low"] = low
            summary["miss_rate_pooled_ci_high"] = high
        effs = [_efficiency(ok, r, paths) for r in members]
        if any(e is not None for e in effs):
            mean, low, high = compute_t_interval(effs)
            summary["oracle_efficiency_mean"] = mean
            summary["oracle_efficiency_ci_low"] = low
            summary["oracle_efficiency_ci_high"] = high
        else:
            summary["oracle_efficiency_mean"] = None
            summary["oracle_efficiency_ci_low"] = None
            summary["oracle_efficiency_ci_high"] = None
        out.append(summary)
    return out


def _with_ci(row: dict[str, Any], metric: str, scale: float, digits: int, unit: str) -> str:
    mean = row.get(f"{metric}_mean")
    if mean is None:
        return "-"
    low, high = row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
    text = f"{scale * mean:.{digits}f}{unit}"
    if low is None or high is None:
        return text
    return f"{text} [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"


def format_sweep_table(summary: Sequence[dict[str, Any]], paths: Sequence[str]) -> str:
    """The stdout table: one line per (scenario, policy, grid point), a grid path headed by its
    :func:`compute_short_names` name; empty grid cells (a baseline run once for every value)
    print as ``*``."""
    short = compute_short_names(paths)
    headers = [
        "scenario",
        "policy",
        *(short[p] for p in paths),
        "runs",
        "miss rate [95% CI]",
        "oracle eff. [95% CI]",
    ]
    headers += ["false excl.", "withheld", "excluded", "fallback"]
    right = [False, False, *([True] * (len(headers) - 2))]
    lines: list[list[str]] = []
    for row in summary:
        cells = [str(row["scenario"]), str(row["policy"])]
        cells += [str(row.get(p) or "*") for p in paths]
        runs = str(row["runs"]) + (f" ({row['failed']} failed)" if row.get("failed") else "")
        cells += [
            runs,
            _with_ci(row, "miss_rate", 100, 2, "%"),
            _with_ci(row, "oracle_efficiency", 1, 2, ""),
            _with_ci(row, "false_exclusion_weight_share", 100, 2, "%").split(" [")[0],
            _with_ci(row, "withheld_weight_share", 100, 2, "%").split(" [")[0],
            _with_ci(row, "excluded_weight_share", 100, 2, "%").split(" [")[0],
            _with_ci(row, "fallback_selections", 1, 1, "").split(" [")[0],
        ]
        lines.append(cells)
    return format_table(headers, lines, right)
