"""Replay tests: the helpers module (``replay_helpers``) is importable from the tests here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def tmp_trace(tmp_path: Path) -> Path:
    return tmp_path / "trace.jsonl"
