"""A tiny scenario file and sweep specs for the runs/sweep tests."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("keepersim") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep_paths import WINDOW_PATH  # noqa: E402

from keepersim.sim.scenario import format_scenario_json, parse_scenario  # noqa: E402

TINY: dict[str, Any] = {
    "name": "tiny_sweep",
    "seed": 5,
    "blocks": 120,
    "epoch_length": 60,
    "expiration_blocks": 15,
    "arrivals_per_block": 2.0,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 600, "miss": [[0, 0.0], [30, 0.9], [90, 0.0]]},
        {"address": "c", "weight": 800, "miss": [[0, 0.3]]},
    ],
}


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(format_scenario_json(parse_scenario(TINY, "test")))
    return path


@pytest.fixture
def write_spec(tmp_path: Path, tiny_file: Path) -> Any:
    """``write_spec(**overrides)``: a spec file (tiny scenario, windowed, 2 seeds, 2 grid values)."""

    def write(**overrides: Any) -> Path:
        spec: dict[str, Any] = {
            "scenarios": [tiny_file.name],
            "policies": ["windowed"],
            "seeds": 2,
            "grid": {WINDOW_PATH: [100, 400]},
        }
        spec.update(overrides)
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(spec))
        return path

    return write
