"""Comparisons of health policies: runs over seeds, aggregates, tables, plots."""

from keepersim.report.compare import BASELINES, SPEC_RUN_KEYS, CompareError, compare
from keepersim.report.stats import compute_oracle_efficiency, compute_t_interval
from keepersim.report.tables import format_summary_table

__all__ = [
    "BASELINES",
    "SPEC_RUN_KEYS",
    "CompareError",
    "compare",
    "compute_oracle_efficiency",
    "compute_t_interval",
    "format_summary_table",
]
