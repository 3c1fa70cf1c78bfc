"""Records as CSV rows: the flattening and the writing every runs.csv / summary.csv shares."""

from __future__ import annotations

import csv
import io
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from keepersim.report.csv_rows import compute_flat_row, format_csv


def test_a_record_flattens_to_one_row() -> None:
    record = {"seed": 3, "selection": {"rule": "w", "n": 2}, "seeds": [1, 2], "timeline": [0]}
    assert compute_flat_row(record, skip={"timeline"}) == {
        "seed": 3,
        "selection_rule": "w",
        "selection_n": 2,
        "seeds": "1 2",
    }


cells = st.one_of(st.none(), st.integers(), st.text(alphabet='ab,"\n ', max_size=5))


@given(st.lists(st.dictionaries(st.sampled_from("xyz"), cells, min_size=1, max_size=3), max_size=5))
def test_rows_read_back_with_columns_in_first_seen_order(rows: list[dict[str, Any]]) -> None:
    text = format_csv(rows)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = list(dict.fromkeys(k for row in rows for k in row))
    expected = [{c: "" if row.get(c) is None else str(row[c]) for c in columns} for row in rows]
    assert list(reader) == expected
    assert (reader.fieldnames or []) == columns
