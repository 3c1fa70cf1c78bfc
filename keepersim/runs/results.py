"""``runs.csv`` of a sweep, streamed: one row per task as it ends, each row one ``write`` and
``fsync``, so a killed sweep leaves a valid CSV prefix (at most a torn last line, which
:func:`read_runs` drops).

Columns: ``scenario, policy, seed``, one per grid path (named by the path), ``status`` (``ok``
or ``failed``), ``attempts``, ``error``, every metric of the run record (nested dicts as
``key_sub``, lists space-joined; the per-bucket timeline and per-participant lists are left
out), ``wall_seconds``, ``app_hash``. The metric columns come from the first finished run;
failed rows before it wait for it.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from keepersim.outputs import get_atomic_path
from keepersim.report.csv_rows import compute_flat_row
from keepersim.runs.engines import TaskOutcome
from keepersim.runs.plan import PlannedTask, TaskKey

__all__ = ["ID_COLUMNS", "RunsLog", "compute_row_key", "read_runs"]

ID_COLUMNS = ("scenario", "policy", "seed")
STATUS_COLUMNS = ("status", "attempts", "error")
#: Run-record keys that are identity or bulk, not metrics.
_NOT_METRICS = frozenset(
    {
        "scenario",
        "scenario_name",
        "policy",
        "seed",
        "blocks",
        "store",
        "shadow",
        "selection",
        "chain_id",
        "app_hash",
        "governance_heights",
        "trace_path",
        "timeline",
        "participants",
        "wall_seconds",
        "inferences_per_second",
        "blocks_per_second",
        "bucket_blocks",
    }
)


def compute_row_key(row: dict[str, str], paths: Sequence[str]) -> TaskKey:
    return (row["scenario"], row["policy"], row["seed"], tuple(row.get(p, "") for p in paths))


def read_runs(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a runs.csv (a torn last line dropped); empty when absent."""
    if not path.exists():
        return [], []
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = [dict(r) for r in reader]
    return list(reader.fieldnames or []), rows


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class RunsLog:
    """Appends rows to ``path``; :meth:`open_resumed` keeps the ``ok`` rows already there."""

    def __init__(self, path: Path, paths: Sequence[str]) -> None:
        self.path = path
        self.paths = list(paths)
        self.columns: list[str] | None = None
        self._file: IO[str] | None = None
        self._waiting: list[dict[str, Any]] = []
        self.done: dict[TaskKey, dict[str, str]] = {}

    def open_resumed(self) -> None:
        """Keep the finished rows of an earlier run (failed and torn rows are dropped, so their
        tasks run again), rewritten atomically; later rows append to them."""
        header, rows = read_runs(self.path)
        kept = [r for r in rows if r.get("status") == "ok"]
        if not kept:
            self.path.unlink(missing_ok=True)
            return
        with get_atomic_path(self.path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(kept)
        self.columns = header
        self.done = {compute_row_key(r, self.paths): r for r in kept}

    def _open(self, columns: list[str]) -> IO[str]:
        if self._file is None:
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            self._file = self.path.open("a", newline="", encoding="utf-8")
            if self.columns is None:
                self.columns = columns
            if fresh:
                self._write_line(list(self.columns))
        return self._file

    def _write_line(self, cells: list[str]) -> None:
        assert self._file is not None
        buffer = io.StringIO()
        csv.writer(buffer).writerow(cells)
        self._file.write(buffer.getvalue())
        self._file.flush()
        os.fsync(self._file.fileno())

    def write(self, planned: PlannedTask, outcome: TaskOutcome) -> None:
        """The outcome's row (a failed one waits for the first finished run's columns)."""
        row: dict[str, Any] = {
            "scenario": planned.key[0],
            "policy": planned.key[1],
            "seed": planned.key[2],
            **planned.cells,
            "status": "ok" if outcome.ok else "failed",
            "attempts": outcome.attempts,
            "error": "" if outcome.error is None else outcome.error,
        }
        if outcome.record is None:
            if self.columns is None:
                self._waiting.append(row)
                return
        else:
            row.update(compute_flat_row(outcome.record, _NOT_METRICS))
            row["wall_seconds"] = outcome.record.get("wall_seconds")
            row["app_hash"] = outcome.record.get("app_hash")
        columns = list(row) if outcome.ok else self._base_columns()
        if outcome.ok and "app_hash" in columns:  # app_hash last
            columns.remove("app_hash")
            columns.append("app_hash")
        self._open(columns)
        for waiting in self._waiting:
            self._put(waiting)
        self._waiting.clear()
        self._put(row)

    def _base_columns(self) -> list[str]:
        return [*ID_COLUMNS, *self.paths, *STATUS_COLUMNS]

    def _put(self, row: dict[str, Any]) -> None:
        assert self.columns is not None
        self._write_line([_format(row.get(c)) for c in self.columns])

    def close(self) -> None:
        """Flush failed rows still waiting (no run finished: the base columns only)."""
        if self._waiting:
            self._open(self._base_columns())
            for row in self._waiting:
                self._put(row)
            self._waiting.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
