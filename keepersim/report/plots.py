"""PNG plots of a comparison report (matplotlib, Agg backend: no display needed).

Files (``<scenario>`` made filename-safe):

* ``miss_rate_<scenario>.png``: mean miss rate per policy with 95% CI error bars;
* ``oracle_efficiency.png``: mean oracle efficiency per policy, grouped by scenario, with CIs;
* ``excluded_timeline_<scenario>.png``: excluded weight share per bucket, one line per policy
  (mean over seeds);
* ``miss_timeline_<scenario>.png``: miss rate of the inferences started in each bucket, one line
  per policy (pooled over seeds; only starts whose outcome the run can show);
* in both timelines partial buckets (the end of the run) are dotted over a hatched band;
* ``traffic_share_<scenario>.png``: each participant's traffic share against its weight share,
  one panel per policy (all seeds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from keepersim.types.policies import is_baseline  # noqa: E402

__all__ = [
    "plot_excluded_timeline",
    "plot_miss_rates",
    "plot_miss_timeline",
    "plot_oracle_efficiency",
    "plot_traffic_share",
    "safe_name",
    "write_plots",
]

_DPI = 110


def safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "scenario"


def _save(fig: Any, path: Path) -> Path:
    from keepersim.outputs import get_atomic_path

    fig.tight_layout()
    with get_atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=_DPI)
    plt.close(fig)
    return path


def _scenarios(report: dict[str, Any]) -> list[str]:
    return list(report["config"]["scenarios"])


def _policies(report: dict[str, Any]) -> list[str]:
    return list(report["config"]["policies"])


def _row(report: dict[str, Any], scenario: str, policy: str) -> dict[str, Any] | None:
    for row in report["summary"]:
        if row["scenario"] == scenario and row["policy"] == policy:
            return dict(row)
    return None


def _errors(
    means: Sequence[float], lows: Sequence[float | None], highs: Sequence[float | None]
) -> list[list[float]]:
    lower = [m - lo if lo is not None else 0.0 for m, lo in zip(means, lows, strict=True)]
    upper = [hi - m if hi is not None else 0.0 for m, hi in zip(means, highs, strict=True)]
    return [lower, upper]


def plot_miss_rates(report: dict[str, Any], folder: Path) -> list[Path]:
    out: list[Path] = []
    policies = _policies(report)
    for scenario in _scenarios(report):
        rows = [_row(report, scenario, p) for p in policies]
        means = [100 * (r["miss_rate_mean"] or 0.0) if r else 0.0 for r in rows]
        lows = [
            100 * r["miss_rate_ci_low"] if r and r["miss_rate_ci_low"] is not None else None
            for r in rows
        ]
        highs = [
            100 * r["miss_rate_ci_high"] if r and r["miss_rate_ci_high"] is not None else None
            for r in rows
        ]
        fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(policies) + 2), 4))
        colors = ["#888888" if is_baseline(p) else "#3a6ea5" for p in policies]
        ax.bar(policies, means, yerr=_errors(means, lows, highs), capsize=4, color=colors)
        ax.set_ylabel("miss rate (%)")
        ax.set_title(f"{scenario}: miss rate per policy (mean, 95% CI over seeds)")
        ax.tick_params(axis="x", rotation=30)
        out.append(_save(fig, folder / f"miss_rate_{safe_name(scenario)}.png"))
    return out


def plot_oracle_efficiency(report: dict[str, Any], folder: Path) -> list[Path]:
    scenarios = _scenarios(report)
    policies = [p for p in _policies(report) if not is_baseline(p)] or _policies(report)
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(
        figsize=(max(6.0, 1.2 * len(scenarios) * max(1, len(policies)) / 2 + 3), 4.5)
    )
    xs = list(range(len(scenarios)))
    for j, policy in enumerate(policies):
        rows = [_row(report, s, policy) for s in scenarios]
        means = [
            r["oracle_efficiency_mean"]
            if r and r["oracle_efficiency_mean"] is not None
            else math.nan
            for r in rows
        ]
        lows = [r["oracle_efficiency_ci_low"] if r else None for r in rows]
        highs = [r["oracle_efficiency_ci_high"] if r else None for r in rows]
        plotted = [0.0 if math.isnan(m) else m for m in means]
        ax.bar(
            [x + (j - (len(policies) - 1) / 2) * width for x in xs],
            plotted,
            width,
            yerr=_errors(plotted, lows, highs),
            capsize=3,
            label=policy,
        )
    ax.axhline(1.0, color="#555555", linewidth=0.8, linestyle="--")
    ax.axhline(0.0, color="#555555", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels(scenarios, rotation=30, ha="right")
    ax.set_ylabel("oracle efficiency")
    ax.set_title("Share of avoidable misses avoided (none = 0, oracle = 1)")
    ax.legend(fontsize="small", ncol=min(4, len(policies)))
    return [_save(fig, folder / "oracle_efficiency.png")]


def _runs(report: dict[str, Any], scenario: str, policy: str) -> list[dict[str, Any]]:
    return [r for r in report["runs"] if r["scenario"] == scenario and r["policy"] == policy]


def _timeline(runs: list[dict[str, Any]], key: str) -> tuple[list[float], list[float], list[bool]]:
    """Bucket centres, the per-bucket value and whether the bucket is partial (in any run).

    The value: mean of ``key`` over runs, or for ``miss_rate`` the pooled ``rate_misses`` /
    ``rate_inferences`` (the starts whose outcome the run can show; reports written before
    these fields existed: misses / inferences)."""
    if not runs:
        return [], [], []
    n = min(len(r["timeline"]) for r in runs)
    xs: list[float] = []
    ys: list[float] = []
    partial: list[bool] = []
    for i in range(n):
        buckets = [r["timeline"][i] for r in runs]
        xs.append((buckets[0]["start"] + buckets[0]["end"]) / 2)
        partial.append(any(b.get("partial", False) for b in buckets))
        if key == "miss_rate":
            total = sum(b.get("rate_inferences", b["inferences"]) for b in buckets)
            misses = sum(b.get("rate_misses", b["misses"]) for b in buckets)
            ys.append(100 * misses / total if total else math.nan)
        else:
            ys.append(100 * sum(b[key] for b in buckets) / len(buckets))
    return xs, ys, partial


def _partial_span(report: dict[str, Any], scenario: str) -> tuple[float, float] | None:
    """Heights ``[first, last]`` of the scenario's partial buckets (None: there are none)."""
    spans = [
        (b["start"], b["end"])
        for r in report["runs"]
        if r["scenario"] == scenario
        for b in r["timeline"]
        if b.get("partial", False)
    ]
    if not spans:
        return None
    return min(a for a, _ in spans) - 0.5, max(b for _, b in spans) + 0.5


def _plot_timeline(
    report: dict[str, Any], folder: Path, key: str, ylabel: str, prefix: str, title: str
) -> list[Path]:
    """One line per policy; partial buckets (docs/metrics.md, "timeline") are drawn dashed
    over a hatched band, so a last bucket that is not comparable is not read as a drop."""
    out: list[Path] = []
    for scenario in _scenarios(report):
        fig, ax = plt.subplots(figsize=(9, 4))
        span = _partial_span(report, scenario)
        if span is not None:
            ax.axvspan(
                *span,
                facecolor="none",
                edgecolor="#aaaaaa",
                hatch="//",
                linewidth=0,
                label="partial bucket",
            )
        for policy in _policies(report):
            xs, ys, partial = _timeline(_runs(report, scenario, policy), key)
            style = "--" if is_baseline(policy) else "-"
            full = [i for i, p in enumerate(partial) if not p]
            (line,) = ax.plot(
                [xs[i] for i in full], [ys[i] for i in full], style, linewidth=1.2, label=policy
            )
            tail = [i for i, p in enumerate(partial) if p]
            if tail:
                joined = ([full[-1]] if full and full[-1] == tail[0] - 1 else []) + tail
                ax.plot(
                    [xs[i] for i in joined],
                    [ys[i] for i in joined],
                    ":",
                    linewidth=1.2,
                    color=line.get_color(),
                    marker="o",
                    markersize=3,
                )
        ax.set_xlabel("height")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{scenario}: {title}")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        out.append(_save(fig, folder / f"{prefix}_{safe_name(scenario)}.png"))
    return out


def plot_excluded_timeline(report: dict[str, Any], folder: Path) -> list[Path]:
    return _plot_timeline(
        report,
        folder,
        "excluded_weight_share",
        "excluded weight share (%)",
        "excluded_timeline",
        "weight kept out of selection (mean over seeds)",
    )


def plot_miss_timeline(report: dict[str, Any], folder: Path) -> list[Path]:
    return _plot_timeline(
        report,
        folder,
        "miss_rate",
        "miss rate (%)",
        "miss_timeline",
        "miss rate of inferences started in each bucket",
    )


def plot_traffic_share(report: dict[str, Any], folder: Path) -> list[Path]:
    out: list[Path] = []
    policies = _policies(report)
    cols = min(4, len(policies))
    rows_n = math.ceil(len(policies) / cols)
    for scenario in _scenarios(report):
        fig, axes = plt.subplots(
            rows_n,
            cols,
            figsize=(3.2 * cols, 3.0 * rows_n),
            squeeze=False,
            sharex=True,
            sharey=True,
        )
        top = 0.0
        for k, policy in enumerate(policies):
            ax = axes[k // cols][k % cols]
            wx: list[float] = []
            ty: list[float] = []
            for run in _runs(report, scenario, policy):
                for p in run["participants"]:
                    wx.append(100 * p["weight_share"])
                    ty.append(100 * p["traffic_share"])
            top = max([top, *wx, *ty])
            ax.scatter(wx, ty, s=6, alpha=0.6)
            ax.set_title(policy, fontsize="small")
        for k in range(len(policies), rows_n * cols):
            axes[k // cols][k % cols].axis("off")
        for k in range(len(policies)):
            ax = axes[k // cols][k % cols]
            ax.plot([0, top], [0, top], color="#999999", linewidth=0.8)
            if k % cols == 0:
                ax.set_ylabel("traffic share (%)")
            if k // cols == rows_n - 1:
                ax.set_xlabel("weight share (%)")
        fig.suptitle(f"{scenario}: traffic share vs weight share")
        out.append(_save(fig, folder / f"traffic_share_{safe_name(scenario)}.png"))
    return out


def write_plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """Every plot of the report into ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    paths += plot_miss_rates(report, folder)
    paths += plot_oracle_efficiency(report, folder)
    paths += plot_excluded_timeline(report, folder)
    paths += plot_miss_timeline(report, folder)
    paths += plot_traffic_share(report, folder)
    return paths
