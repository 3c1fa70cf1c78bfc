"""Trace package tests: the replay tests' trace-line helpers (``replay_helpers``) are importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))


@pytest.fixture
def tmp_trace(tmp_path: Path) -> Path:
    return tmp_path / "trace.jsonl"


class TraceBytes(bytes):
    """A trace's bytes, shown short (hypothesis prints a failing example's arguments)."""

    def __repr__(self) -> str:
        return f"<trace of {len(self)} bytes>"


@pytest.fixture(scope="session")
def sim_trace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real trace, written by ``simulate`` (run_scenario) on
    :func:`make_small_scenario`: its closing record included."""
    from replay_helpers import make_small_scenario

    from keepersim.sim.run_loop import run_scenario

    path = tmp_path_factory.mktemp("sim-trace") / "trace.jsonl"
    run_scenario(make_small_scenario(), "gonka", seed=3, store="memory", trace_out=path)
    return TraceBytes(path.read_bytes())
