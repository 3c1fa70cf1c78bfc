"""An export's progress file, ``OUT.progress.json``: the snapshot and every finished unit, so a
rerun skips what was done (``docs/export.md``), and which epochs' summaries a trace holds."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from keepersim.export.export_run import ExportError
from keepersim.outputs import write_text_atomic

__all__ = [
    "PROGRESS_VERSION",
    "ExportProgress",
    "format_epoch_ranges",
    "get_summary_epochs",
]

PROGRESS_VERSION = 3  # 3: pinned height, per-epoch members, summaries_unavailable


class ExportProgress:
    """``OUT.progress.json``: the snapshot and the finished units (thread-safe)."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.lock = threading.Lock()

    @classmethod
    def load_or_create(
        cls, path: Path, node: str, epochs: tuple[int, int], restart: bool
    ) -> tuple[ExportProgress, bool]:
        if path.exists() and not restart:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ExportError(
                    f"cannot read progress file {path}: {exc}; rerun with --restart"
                ) from exc
            if data.get("version") != PROGRESS_VERSION:
                raise ExportError(f"{path}: unknown progress version; rerun with --restart")
            if data.get("node") != node or tuple(data.get("epochs", ())) != epochs:
                raise ExportError(
                    f"{path} belongs to another export (node {data.get('node')!r}, epochs "
                    f"{data.get('epochs')}); rerun with --restart to start over"
                )
            return cls(path, data), True
        data = {
            "version": PROGRESS_VERSION,
            "node": node,
            "epochs": list(epochs),
            "snapshot": None,
            "listings": {
                "participants": {"pages": [], "complete": False},
                "inferences": {"pages": [], "complete": False},
            },
            "summaries": {},
            "summaries_unavailable": False,
            "unknown_fields": {},
            "skipped_inferences": 0,
            "payloads_dropped": 0,
        }
        progress = cls(path, data)
        progress.save()
        return progress, False

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")

    def count_done(self) -> int:
        with self.lock:
            listings = self.data["listings"]
            pages = sum(len(v["pages"]) for v in listings.values())
            return pages + len(self.data["summaries"]) + (1 if self.data["snapshot"] else 0)


def get_summary_epochs(epochs: tuple[int, int], latest_epoch: int) -> list[int]:
    """The epochs whose summaries a trace of ``epochs`` holds: the settled ones, except the
    first of a trace that starts mid-chain (its stats count the previous epoch's inferences
    that resolved in it, and those are not in the trace)."""
    a, b = epochs
    return [e for e in range(a, b + 1) if e < latest_epoch and (e == 0 or e > a)]


def format_epoch_ranges(epochs: list[int]) -> str:
    """``[1, 2, 3]`` -> ``"1-3"``, ``[4]`` -> ``"4"`` (epochs are consecutive here)."""
    return str(epochs[0]) if len(epochs) == 1 else f"{epochs[0]}-{epochs[-1]}"
