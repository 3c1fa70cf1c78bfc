"""The proposal report: formatting only (the numbers come from :mod:`keepersim.proposal.compare`).

* stdout: one table per scenario, ``metric | current | proposed | diff | 95% CI``, then the
  verdict lines;
* ``DIR/proposal.json``: the comparison (every metric, the changed fields, each run's scalars);
* ``DIR/proposal.csv``: one row per scenario and metric;
* ``DIR/<metric>.png``: current vs proposed per scenario with 95% CIs of each arm's mean
  (:data:`PLOTTED_METRICS`).

Rates and shares (``*_rate``, ``*_share``) are shown in percentage points.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keepersim.outputs import write_json_atomic, write_text_atomic
from keepersim.proposal.compare import (
    ARMS,
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    MetricComparison,
    ProposalComparison,
)
from keepersim.report.stats import compute_t_interval

__all__ = [
    "CSV_COLUMNS",
    "PLOTTED_METRICS",
    "format_table",
    "format_verdicts",
    "write_proposal_report",
]

CSV_COLUMNS = (
    "scenario",
    "metric",
    "current",
    "proposed",
    "diff",
    "ci_low",
    "ci_high",
    "seeds",
    "significant",
)
PLOTTED_METRICS = ("miss_rate", "false_exclusion_weight_share", "excluded_weight_share")


def is_rate(metric: str) -> bool:
    return metric.endswith("_rate") or metric.endswith("_share")


def _fmt(value: float | None, metric: str, signed: bool = False) -> str:
    if value is None:
        return "-"
    if is_rate(metric):
        return f"{value * 100:+.3f}" if signed else f"{value * 100:.3f}"
    # Counts with one decimal (a mean over seeds), small quantities with four.
    places = 1 if abs(value) >= 1 or value == 0 else 4
    return f"{value:+.{places}f}" if signed else f"{value:.{places}f}"


def _ci(m: MetricComparison) -> str:
    if m.low is None or m.high is None:
        return "-"
    return f"{_fmt(m.low, m.metric)}..{_fmt(m.high, m.metric)}"


def format_table(report: ProposalComparison) -> str:
    """A plain-text table per scenario (rates in points)."""
    lines: list[str] = []
    header = ("metric", *ARMS, "diff", "95% CI")
    for scenario in report.get_scenarios():
        rows = [
            (
                m.metric + (" (pts)" if is_rate(m.metric) else ""),
                _fmt(m.current, m.metric),
                _fmt(m.proposed, m.metric),
                _fmt(m.diff, m.metric, signed=True),
                _ci(m),
            )
            for m in report.metrics
            if m.scenario == scenario
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        seeds = max((m.seeds for m in report.metrics if m.scenario == scenario), default=0)
        lines.append(f"{scenario} ({seeds} paired seeds)")
        for row in [header, *rows]:
            cells = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  " + "  ".join(cells).rstrip())
        lines.append("")
    return "\n".join(lines)


def _verdict(m: MetricComparison) -> str:
    assert m.diff is not None
    size = f"{abs(m.diff) * 100:.2f} points" if is_rate(m.metric) else f"{abs(m.diff):.4g}"
    if m.metric in LOWER_IS_BETTER or m.metric in HIGHER_IS_BETTER:
        worse = (m.diff > 0) == (m.metric in LOWER_IS_BETTER)
        how = f"proposed is {'worse' if worse else 'better'} by {size}"
    else:
        how = f"proposed is {'higher' if m.diff > 0 else 'lower'} by {size}"
    return f"{m.metric}: {how} (95% CI {_ci(m)}) on {m.scenario}"


def format_verdicts(report: ProposalComparison) -> list[str]:
    """One line per significant change (the CI of the paired difference excludes 0), or per
    scenario "no significant change"."""
    out: list[str] = []
    for scenario in report.get_scenarios():
        found = [m for m in report.metrics if m.scenario == scenario and m.is_significant()]
        if found:
            out.extend(_verdict(m) for m in found)
        else:
            seeds = max((m.seeds for m in report.metrics if m.scenario == scenario), default=0)
            why = " (one seed: no CI; use --seeds 2 or more)" if seeds < 2 else ""
            out.append(f"{scenario}: no significant change at 95%{why}")
    return out


def _scalar_run(run: dict[str, Any]) -> dict[str, Any]:
    """A run's identity and scalar metrics (no timeline / per-participant lists), NaN as null."""
    out: dict[str, Any] = {}
    for key, value in run.items():
        if isinstance(value, dict | list) and key != "governance_heights":
            continue
        out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    return out


def compute_report_data(report: ProposalComparison) -> dict[str, Any]:
    return {
        "title": report.title,
        "messages": report.message_types,
        "at_height": report.at_height,
        "policy": report.policy,
        "seeds": report.seeds,
        "changed_fields": report.changed_fields,
        "metrics": [m.to_dict() for m in report.metrics],
        "verdicts": format_verdicts(report),
        "runs": [_scalar_run(r) for r in report.runs],
    }


def format_csv(report: ProposalComparison) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    keys = {"ci_low": "low", "ci_high": "high"}
    for m in report.metrics:
        d = m.to_dict()
        values = [d[keys.get(c, c)] for c in CSV_COLUMNS]
        writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def _arm_values(report: ProposalComparison, scenario: str, metric: str, arm: str) -> list[Any]:
    return [
        r.get(metric) for r in report.runs if r.get("scenario") == scenario and r.get("arm") == arm
    ]


def plot_metric(report: ProposalComparison, metric: str, path: Path) -> Path | None:
    """Bars of each arm's mean per scenario with the 95% CI of the mean (rates in points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [
        s
        for s in report.get_scenarios()
        if any(m.scenario == s and m.metric == metric for m in report.metrics)
    ]
    if not scenarios:
        return None
    scale = 100.0 if is_rate(metric) else 1.0
    fig, ax = plt.subplots(figsize=(max(4.0, 1.8 * len(scenarios) + 2), 3.6))
    width = 0.38
    for k, arm in enumerate(ARMS):
        means, errs = [], []
        for s in scenarios:
            mean, low, high = compute_t_interval(_arm_values(report, s, metric, arm))
            means.append((mean or 0.0) * scale)
            errs.append(
                0.0 if low is None or high is None or mean is None else (high - mean) * scale
            )
        xs = [i + (k - 0.5) * width for i in range(len(scenarios))]
        ax.bar(xs, means, width, yerr=errs, capsize=4, label=arm)
    ax.set_xticks(range(len(scenarios)), scenarios)
    ax.set_ylabel(metric + (" (%)" if is_rate(metric) else ""))
    ax.set_title(f"{metric}: current vs proposed (95% CI)")
    ax.legend()
    fig.tight_layout()
    from keepersim.outputs import get_atomic_path

    with get_atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def write_proposal_report(
    report: ProposalComparison,
    out: str | os.PathLike[str],
    *,
    plots: bool = True,
    plotted: Sequence[str] = PLOTTED_METRICS,
) -> list[Path]:
    """Write proposal.json, proposal.csv and the PNG plots into ``out`` (created); the paths."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "proposal.json", folder / "proposal.csv"]
    write_json_atomic(written[0], compute_report_data(report))
    write_text_atomic(written[1], format_csv(report))
    if plots:
        for metric in plotted:
            path = plot_metric(report, metric, folder / f"{metric}.png")
            if path is not None:
                written.append(path)
    return written
