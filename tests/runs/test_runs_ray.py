"""The ray engine (a local Ray of 2 workers) gives the process engine's app hash for every task
of a sweep. Skipped when Ray is not installed (``pip install 'keepersim[ray]'``)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from sweep_paths import WINDOW_PATH

from keepersim.runs.sweep import run_sweep

pytest.importorskip("ray")


def _hashes(folder: Path) -> dict[tuple[str, str, str, str], str]:
    """app_hash by (scenario, policy, seed, grid cell) of every row (all finished)."""
    with (folder / "runs.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["status"] == "ok" for r in rows)
    return {(r["scenario"], r["policy"], r["seed"], r[WINDOW_PATH]): r["app_hash"] for r in rows}


def test_ray_and_process_engines_give_the_same_app_hashes(write_spec: Any, tmp_path: Path) -> None:
    spec = write_spec(policies=["windowed", "gonka"])
    kw: dict[str, Any] = {"progress": False, "stream": io.StringIO(), "plots": False}
    run_sweep(spec, tmp_path / "process", engine="process", jobs=2, **kw)
    run_sweep(spec, tmp_path / "ray", engine="ray", jobs=2, **kw)
    process = _hashes(tmp_path / "process")
    # windowed per grid value (2) x seed (2); gonka and the baselines once per seed
    assert len(process) == 2 * 2 + 3 * 2
    assert _hashes(tmp_path / "ray") == process
