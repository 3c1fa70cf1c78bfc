"""Running keepersim's CLI as a subprocess and reading its report, as the kill-and-resume tests
do (shared by tests/test_resume.py and tests/devshard/test_devshard_resume.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Output fields that depend on the wall clock or on the output paths, not on the run.
UNSTABLE = frozenset({"wall_seconds", "inferences_per_second", "blocks_per_second", "trace_path"})


def run_keepersim(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m keepersim.cli ARGS`` with ``env`` added, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "keepersim.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def read_stable_report(path: Path) -> dict[str, Any]:
    """A report JSON without its UNSTABLE fields."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if k not in UNSTABLE}
