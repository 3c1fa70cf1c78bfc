"""Trace package tests: the replay tests' trace-line helpers (``replay_helpers``) are importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))


@pytest.fixture
def tmp_trace(tmp_path: Path) -> Path:
    return tmp_path / "trace.jsonl"
