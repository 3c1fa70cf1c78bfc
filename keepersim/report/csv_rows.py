"""Run records and summary rows as CSV (compare's runs.csv and summary.csv, a sweep's
summary.csv and the cells of its streamed runs.csv): one rule for flattening, one for writing."""

from __future__ import annotations

import csv
import io
from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = ["compute_flat_row", "format_csv"]


def compute_flat_row(record: Mapping[str, Any], skip: Collection[str] = ()) -> dict[str, Any]:
    """``record`` as one CSV row: a dict value becomes ``key_sub`` columns, a list its items
    joined by spaces; the keys in ``skip`` are left out."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                out[f"{key}_{k}"] = v
        elif isinstance(value, list):
            out[key] = " ".join(str(v) for v in value)
        else:
            out[key] = value
    return out


def format_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV text: the columns in the order first seen, None as an empty cell."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()
