"""Plain-text, aligned tables of comparison summaries.

The columns of the summary table, and how each is aggregated over seeds and what its interval
is, are defined in docs/metrics.md; the table ends with a line pointing there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keepersim.keeper.selection import SELECTION_BY_REPUTATION, SELECTION_BY_WEIGHT

__all__ = [
    "METRICS_DOC_LINE",
    "SUMMARY_COLUMNS",
    "format_baselines_line",
    "format_summary_table",
    "format_table",
]

#: The last line of every summary table.
METRICS_DOC_LINE = (
    "Columns, units, aggregation over seeds and intervals: docs/metrics.md "
    "(miss rate: percentile bootstrap over seeds; oracle eff.: t-interval)"
)


_SELECTION_WORDS = {
    SELECTION_BY_WEIGHT: "by weight alone, as upstream",
    SELECTION_BY_REPUTATION: (
        "by weight x reputation (the fork's PR #8; reputation recomputed at every epoch's end)"
    ),
}


def format_baselines_line(mechanisms: Mapping[str, Any]) -> str:
    """What every run of a comparison has besides its policy, in words, from its ``selection``
    and ``sprt`` (:func:`keepersim.sim.run_genesis.compute_run_mechanisms`)."""
    selection = str(mechanisms["selection"])
    words = _SELECTION_WORDS.get(selection, selection)
    line = (
        f"Every run, baselines included: executors drawn {words}; SPRT deactivation "
        f"{mechanisms['sprt']}; nothing else keeps a participant out."
    )
    if "selection_path" in mechanisms:
        line += f" Selection path: {mechanisms['selection_path']}."
    return line


def _pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+,.0f}"


def _miss_rate(row: dict[str, Any]) -> str:
    mean = row.get("miss_rate_mean")
    lo, hi = row.get("miss_rate_ci_low"), row.get("miss_rate_ci_high")
    if mean is None:
        return "-"
    if lo is None or hi is None:
        return _pct(mean)
    return f"{_pct(mean)} [{_pct(lo)}, {_pct(hi)}]"


def _efficiency(row: dict[str, Any]) -> str:
    mean = row.get("oracle_efficiency_mean")
    lo, hi = row.get("oracle_efficiency_ci_low"), row.get("oracle_efficiency_ci_high")
    if mean is None:
        return "-"
    if lo is None or hi is None:
        return f"{mean:.2f}"
    return f"{mean:.2f} [{lo:.2f}, {hi:.2f}]"


#: (header, right-aligned, formatter) of each column of the summary table (each defined in
#: docs/metrics.md, "table.txt").
SUMMARY_COLUMNS: tuple[tuple[str, bool, Any], ...] = (
    ("scenario", False, lambda r: str(r["scenario"])),
    ("policy", False, lambda r: str(r["policy"])),
    ("runs", True, lambda r: str(r["runs"])),
    ("miss rate [95% CI]", True, _miss_rate),
    ("oracle eff. [95% CI]", True, _efficiency),
    ("avoided", True, lambda r: _num(r.get("misses_avoided_mean"), 1)),
    ("to degraded", True, lambda r: _pct(r.get("degraded_traffic_share_mean"))),
    ("false excl.", True, lambda r: _pct(r.get("false_exclusion_weight_share_mean"))),
    ("withheld", True, lambda r: _pct(r.get("withheld_weight_share_mean"))),
    ("excluded", True, lambda r: _pct(r.get("excluded_weight_share_mean"))),
    ("detect med", True, lambda r: _num(r.get("detection_delay_median"))),
    ("undetected", True, lambda r: _pct(r.get("undetected_share"), 0)),
    ("recover med", True, lambda r: _num(r.get("recovery_delay_median"))),
    ("fallback", True, lambda r: _num(r.get("fallback_selections_mean"), 1)),
    ("gas/inf", True, lambda r: _num(r.get("gas_per_inference_mean"))),
    ("gas/inf over none", True, lambda r: _signed(r.get("gas_per_inference_over_none_mean"))),
)


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
) -> str:
    """Columns padded to their widest cell, separated by two spaces, a dashed rule under the head."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def format_summary_table(
    summary: Sequence[dict[str, Any]], config: Mapping[str, Any] | None = None
) -> str:
    """The comparison table: with a ``config`` that names its ``selection``, first its
    :func:`format_baselines_line` and a blank line; one row per (scenario, policy), a blank line
    between scenarios, then a ``note:`` line per row whose policy never acted (its
    ``inaction``), then :data:`METRICS_DOC_LINE`."""
    headers = [c[0] for c in SUMMARY_COLUMNS]
    right = [c[1] for c in SUMMARY_COLUMNS]
    rows = [[c[2](row) for c in SUMMARY_COLUMNS] for row in summary]
    table = format_table(headers, rows, right)
    lines = table.split("\n")
    out = []
    if config is not None and "selection" in config:
        out.extend([format_baselines_line(config), ""])
    out.extend(lines[:2])
    previous = None
    for row, text in zip(summary, lines[2:], strict=True):
        if previous is not None and row["scenario"] != previous:
            out.append("")
        out.append(text)
        previous = row["scenario"]
    notes = [
        f"note: {row['scenario']}: {row['inaction']}" for row in summary if row.get("inaction")
    ]
    if notes:
        out.append("")
        out.extend(notes)
    out.extend(["", METRICS_DOC_LINE])
    return "\n".join(out)
