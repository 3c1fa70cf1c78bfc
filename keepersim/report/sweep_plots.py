"""PNG plots of a sweep summary (matplotlib, Agg, as :mod:`keepersim.report.plots`).

* ``<metric>_by_<path>_<scenario>.png``: the metric's mean (95% CI band) along each grid axis,
  one line per policy; with more axes, one panel per combination of the others' values (up to
  :data:`MAX_PANELS`). A baseline run once for every value is a flat dashed line.
* ``heatmap_<metric>_<scenario>_<policy>_<path>__<path>.png``: where two axes vary, the mean
  over each pair of values (averaged over any further axes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from keepersim.report.plots import _save, safe_name  # noqa: E402
from keepersim.report.sweep_summary import compute_short_names  # noqa: E402
from keepersim.types.policies import is_baseline  # noqa: E402

__all__ = ["MAX_PANELS", "PLOT_METRICS", "write_sweep_plots"]

PLOT_METRICS = (
    "miss_rate",
    "oracle_efficiency",
    "false_exclusion_weight_share",
    "excluded_weight_share",
)
HEATMAP_METRICS = ("miss_rate", "oracle_efficiency")
MAX_PANELS = 9
_PERCENT = {"miss_rate", "false_exclusion_weight_share", "excluded_weight_share"}


def _scale(metric: str) -> float:
    return 100.0 if metric in _PERCENT else 1.0


def _label(metric: str) -> str:
    return metric.replace("_", " ") + (" (%)" if metric in _PERCENT else "")


def _value(row: dict[str, Any], key: str) -> float:
    v = row.get(key)
    return math.nan if v is None else float(v)


def _select(
    summary: Sequence[dict[str, Any]], scenario: str, policy: str, fixed: dict[str, str]
) -> list[dict[str, Any]]:
    return [
        r
        for r in summary
        if r["scenario"] == scenario
        and r["policy"] == policy
        and all(r.get(p, "") in ("", v) for p, v in fixed.items())
    ]


def _values(summary: Sequence[dict[str, Any]], path: str) -> list[str]:
    seen: list[str] = []
    for r in summary:
        cell = r.get(path, "")
        if cell and cell not in seen:
            seen.append(cell)
    return seen


def _sort_values(values: list[str]) -> tuple[list[str], bool]:
    """Values in numeric order when they are numbers (then the axis is numeric)."""
    try:
        return sorted(values, key=float), True
    except ValueError:
        return values, False


def _plot_axis(
    summary: Sequence[dict[str, Any]],
    folder: Path,
    scenario: str,
    policies: Sequence[str],
    paths: Sequence[str],
    path: str,
    metric: str,
) -> Path:
    xs_text, numeric = _sort_values(_values(summary, path))
    xs = [float(x) for x in xs_text] if numeric else list(range(len(xs_text)))
    short = compute_short_names(paths)
    others = [p for p in paths if p != path]
    combos = list(itertools.product(*(_values(summary, p) for p in others)))[:MAX_PANELS]
    cols = min(3, len(combos))
    rows_n = math.ceil(len(combos) / cols)
    fig, axes = plt.subplots(
        rows_n, cols, figsize=(5.2 * cols, 3.6 * rows_n), squeeze=False, sharey=True
    )
    scale = _scale(metric)
    for k, combo in enumerate(combos):
        ax = axes[k // cols][k % cols]
        fixed = dict(zip(others, combo, strict=True))
        for policy in policies:
            chosen = _select(summary, scenario, policy, fixed)
            by_x = {r.get(path, ""): r for r in chosen}
            style = "--" if is_baseline(policy) else "-"
            if set(by_x) == {""}:  # a baseline run once for every value: flat
                r = by_x[""]
                ys = [scale * _value(r, f"{metric}_mean")] * len(xs)
                ax.plot(xs, ys, style, linewidth=1.0, label=policy)
                continue
            ys = [scale * _value(by_x.get(x, {}), f"{metric}_mean") for x in xs_text]
            lows = [scale * _value(by_x.get(x, {}), f"{metric}_ci_low") for x in xs_text]
            highs = [scale * _value(by_x.get(x, {}), f"{metric}_ci_high") for x in xs_text]
            (line,) = ax.plot(xs, ys, style, marker="o", markersize=3, label=policy)
            ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
        if not numeric:
            ax.set_xticks(xs)
            ax.set_xticklabels(xs_text, rotation=30)
        ax.set_xlabel(short[path])
        if k % cols == 0:
            ax.set_ylabel(_label(metric))
        if fixed:
            ax.set_title(", ".join(f"{short[p]}={v}" for p, v in fixed.items()), fontsize="small")
    for k in range(len(combos), rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"{scenario}: {_label(metric)} along {short[path]} (mean, 95% CI over seeds)")
    name = f"{metric}_by_{safe_name(path)}_{safe_name(scenario)}.png"
    return _save(fig, folder / name)


def _plot_heatmap(
    summary: Sequence[dict[str, Any]],
    folder: Path,
    scenario: str,
    policy: str,
    x_path: str,
    y_path: str,
    metric: str,
) -> Path | None:
    xs, _ = _sort_values(_values(summary, x_path))
    ys, _ = _sort_values(_values(summary, y_path))
    chosen = _select(summary, scenario, policy, {})
    scale = _scale(metric)
    short = compute_short_names([x_path, y_path])
    grid: list[list[float]] = []
    for y in ys:
        line: list[float] = []
        for x in xs:
            cell = [
                _value(r, f"{metric}_mean")
                for r in chosen
                if r.get(x_path) == x and r.get(y_path) == y
            ]
            finite = [c for c in cell if not math.isnan(c)]
            line.append(scale * sum(finite) / len(finite) if finite else math.nan)
        grid.append(line)
    if all(math.isnan(v) for line in grid for v in line):
        return None
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 3.5, 0.7 * len(ys) + 2.5))
    image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
    finite = [v for line in grid for v in line if not math.isnan(v)]
    middle = (min(finite) + max(finite)) / 2
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if not math.isnan(v):
                color = "black" if v > middle else "white"
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color=color, fontsize=8)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=30)
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels(ys)
    ax.set_xlabel(short[x_path])
    ax.set_ylabel(short[y_path])
    fig.colorbar(image, ax=ax, label=_label(metric))
    ax.set_title(f"{scenario} / {policy}: {_label(metric)} (mean over seeds)")
    name = (
        f"heatmap_{metric}_{safe_name(scenario)}_{safe_name(policy)}_"
        f"{safe_name(x_path)}__{safe_name(y_path)}.png"
    )
    return _save(fig, folder / name)


def write_sweep_plots(
    summary: Sequence[dict[str, Any]],
    folder: Path,
    scenarios: Sequence[str],
    policies: Sequence[str],
    paths: Sequence[str],
) -> list[Path]:
    """Every plot of the summary into ``folder`` (none without a grid); the files written."""
    out: list[Path] = []
    if not paths:
        return out
    for scenario in scenarios:
        for metric in PLOT_METRICS:
            for path in paths:
                out.append(_plot_axis(summary, folder, scenario, policies, paths, path, metric))
        for x_path, y_path in itertools.combinations(paths, 2):
            for policy in policies:
                if is_baseline(policy):
                    continue
                for metric in HEATMAP_METRICS:
                    made = _plot_heatmap(summary, folder, scenario, policy, x_path, y_path, metric)
                    if made is not None:
                        out.append(made)
    return out
