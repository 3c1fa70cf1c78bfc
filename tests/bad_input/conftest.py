"""Bad-input corpus: helpers shared by its tests (the replay helpers build real traces)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "replay"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line after a run of the corpus: its cases' total time, the slowest, the largest peak
    memory (each case is also held to 10 s and 1 GB)."""
    from corpus_runner import MEASURED

    if not MEASURED:
        return
    slow = max(MEASURED, key=lambda m: m[1])
    big = max(MEASURED, key=lambda m: m[2])
    terminalreporter.write_line(
        f"bad-input corpus: {len(MEASURED)} cases in {sum(m[1] for m in MEASURED):.1f} s; "
        f"slowest {slow[0]} {slow[1]:.2f} s; largest peak {big[0]} {big[2] / 2**20:.0f} MiB"
    )
